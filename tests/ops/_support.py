"""Shared by tests/ops: the repository's docker/ files, loaded the way the image uses them."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"


def entrypoint() -> ModuleType:
    """docker/entrypoint.py as a module (it is a script in the image, not part of the package)."""
    spec = importlib.util.spec_from_file_location("grete_entrypoint", DOCKER / "entrypoint.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
