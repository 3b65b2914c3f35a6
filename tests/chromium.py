"""Debian's headless Chromium for the console's browser tests: the DOM after load (``--dump-dom``), a
screenshot, and the page's ``data-*`` attributes read back. Each run has a new profile directory."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
RUN_TIMEOUT_S = 90


def need_chromium() -> str:
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH: Debian's package (apt-get install chromium; ./scripts/install-test-deps "
                    "installs it) runs the console's browser tests")
    return CHROMIUM


def _run(*args: str) -> str:
    chromium = need_chromium()
    with tempfile.TemporaryDirectory(prefix="grete-chromium-") as profile:
        done = subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return done.stdout.decode()


def dump_dom(url: str) -> str:
    return _run("--dump-dom", url)


def screenshot(url: str, path: Path, size: str = "1280,900") -> None:
    _run(f"--screenshot={path}", f"--window-size={size}", "--hide-scrollbars", url)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class _Data(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.elements: list[dict[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        data = {k[5:]: v or "" for k, v in attrs if k.startswith("data-")}
        if data:
            self.elements.append({"tag": tag, **data})


def data_elements(html: str, key: str) -> list[dict[str, str]]:
    """The ``data-*`` attributes (names without ``data-``) of every element that has ``data-<key>``."""
    parser = _Data()
    parser.feed(html)
    return [e for e in parser.elements if key in e]
