"""``python -m tools.codegen [--specs DIR] [--check]``: regenerate grete/protocol/messages/ and
grete/protocol/metadata/ from specs."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from tools.codegen.emit import HEADER_LINE, api_base, module_name
from tools.codegen.emit import emit_module as emit_module
from tools.codegen.metadata import CONTROL_VALUES, render_metadata
from tools.codegen.specs import Message, load_all

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SPECS = ROOT.parent / "shared" / "kafka-message-specs"
SPEC_DIRS = ["trunk-2024-10", "ak-4.0", "ak-4.3"]
# grete's own spec files, for messages whose copy in the shared specs is older than Kafka 4.3.1 (each
# file says what it was written from); merged last, like another copy.
LOCAL_SPECS = Path(__file__).resolve().parent / "specs_local"
# grete's own APIs (the direct data path's control requests, docs/direct.md), in Kafka's spec format
# and kept in this repository: API keys from 32000 up, a range Kafka's sequential keys never reach.
GRETE_SPECS = ROOT / "specs"
GRETE_SPEC_DIRS = ["grete"]
OUT_DIR = ROOT / "grete" / "protocol" / "messages"
METADATA_OUT_DIR = ROOT / "grete" / "protocol" / "metadata"

# "data" schemas the broker needs; the KRaft control-record values go to grete/protocol/metadata, the rest
# (forwarded principals, ...) are not part of the client protocol and are reported as skipped.
DATA_WANTED = {"ConsumerProtocolSubscription", "ConsumerProtocolAssignment"}


def select(messages: dict[str, Message]) -> tuple[dict[str, list[Message]], list[str]]:
    modules: dict[str, list[Message]] = {}
    skipped: list[str] = []
    for name, msg in sorted(messages.items()):
        if msg.type in ("request", "response") or name in DATA_WANTED:
            modules.setdefault(module_name(msg), []).append(msg)
        elif name in CONTROL_VALUES:
            skipped.append(f"{name}: KRaft control-record value, generated in grete/protocol/metadata")
        elif msg.type == "header":
            skipped.append(f"{name}: header, hand-written in grete/protocol/headers.py")
        else:
            skipped.append(f"{name}: data schema not used by the broker")
    for msgs in modules.values():
        # Request before response; Subscription before Assignment is alphabetical anyway.
        msgs.sort(key=lambda m: (m.type != "request", m.name))
    return modules, skipped


def upper_snake(name: str) -> str:
    """``OffsetForLeaderEpoch`` -> ``OFFSET_FOR_LEADER_EPOCH``, as Kafka's generator names ApiKeys."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).upper()


def render_init(modules: dict[str, list[Message]]) -> str:
    """The package __init__: API metadata as plain data, message classes imported on first use.

    Importing every generated module costs most of a second; a broker needs only the ~35 APIs it
    serves, so classes are resolved lazily (PEP 562 ``__getattr__``) and ``ApiInfo.request`` /
    ``.response`` import their module when first read. Type checkers see ordinary imports.
    """
    exported: dict[str, str] = {}
    typing_imports: list[str] = []
    for mod in sorted(modules):
        names = sorted(m.name for m in modules[mod])
        exported.update((n, mod) for n in names)
        typing_imports.append(f"    from grete.protocol.messages.{mod} import {', '.join(names)}")
    lines = [
        HEADER_LINE,
        '"""Every generated message class, and ``APIS``: what grete knows about each API key.',
        "",
        "Modules are imported on first use: ``from grete.protocol.messages import ProduceRequest``",
        'loads only produce.py."""',
        "",
        "from __future__ import annotations",
        "",
        "import importlib",
        "from dataclasses import dataclass",
        "from enum import IntEnum",
        "from typing import TYPE_CHECKING, Any",
        "",
        "from grete.protocol.codec import Message",
        "",
        "if TYPE_CHECKING:",
        *typing_imports,
        "",
        "_MODULE_OF: dict[str, str] = {",
        *[f"    {n!r}: {m!r}," for n, m in sorted(exported.items())],
        "}",
        "",
        "",
        "def _load(name: str) -> Any:",
        '    module = importlib.import_module(f"grete.protocol.messages.{_MODULE_OF[name]}")',
        "    return getattr(module, name)",
        "",
        "",
        "def __getattr__(name: str) -> Any:",
        "    if name in _MODULE_OF:",
        "        value = _load(name)",
        "        globals()[name] = value",
        "        return value",
        '    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")',
        "",
        "",
        "@dataclass(frozen=True, slots=True)",
        "class ApiInfo:",
        '    """One API key: its message classes and the version range the codecs support."""',
        "",
        "    key: int",
        "    name: str",
        "    request_name: str",
        "    response_name: str",
        "    min_version: int",
        "    max_version: int",
        "    flexible_from: int | None",
        "",
        "    @property",
        "    def request(self) -> type[Message]:",
        "        cls: type[Message] = _load(self.request_name)",
        "        return cls",
        "",
        "    @property",
        "    def response(self) -> type[Message]:",
        "        cls: type[Message] = _load(self.response_name)",
        "        return cls",
        "",
        "",
        "APIS: dict[int, ApiInfo] = {",
    ]
    apis: list[tuple[int, str, Message, Message]] = []
    for msgs in modules.values():
        reqs = [m for m in msgs if m.type == "request"]
        resps = [m for m in msgs if m.type == "response"]
        if reqs and resps:
            apis.append((reqs[0].api_key or 0, api_base(reqs[0].name), reqs[0], resps[0]))
    for key, name, req, resp in sorted(apis, key=lambda a: a[0]):
        lo = min(req.valid | resp.valid)
        hi = max(req.valid | resp.valid)
        if req.valid != resp.valid or req.flexible_from != resp.flexible_from:
            raise SystemExit(f"{name}: request and response disagree on versions")
        lines.append(f"    {key}: ApiInfo({key}, {name!r}, {req.name!r}, {resp.name!r}, {lo}, {hi}, "
                     f"{req.flexible_from!r}),")
    lines += [
        "}",
        "",
        "",
        "class ApiKey(IntEnum):",
        '    """Every API key, named as in Kafka (its ApiKeys enum)."""',
        "",
        *[f"    {upper_snake(name)} = {key}" for key, name, _, _ in sorted(apis, key=lambda a: a[0])],
        "",
        "",
        "_CONTROLLED_SHUTDOWN = 7",
        "_API_VERSIONS = 18",
        "",
        "",
        "def _flexible(api_key: int, api_version: int) -> bool:",
        "    info = APIS.get(api_key)",
        "    return info is not None and info.flexible_from is not None and api_version >= info.flexible_from",
        "",
        "",
        "def request_header_version(api_key: int, api_version: int) -> int:",
        '    """2 for flexible requests, 1 otherwise; 0 only for ControlledShutdown v0."""',
        "    if api_key == _CONTROLLED_SHUTDOWN and api_version == 0:",
        "        return 0",
        "    return 2 if _flexible(api_key, api_version) else 1",
        "",
        "",
        "def response_header_version(api_key: int, api_version: int) -> int:",
        '    """1 for flexible responses, 0 otherwise; ApiVersions always uses 0 (clients parse it first)."""',
        "    if api_key == _API_VERSIONS:",
        "        return 0",
        "    return 1 if _flexible(api_key, api_version) else 0",
        "",
        "",
        "__all__ = [",
        '    "APIS",',
        '    "ApiInfo",',
        '    "ApiKey",',
        '    "request_header_version",',
        '    "response_header_version",',
    ]
    lines += [f"    {n!r}," for n in sorted(exported)]
    lines += ["]", ""]
    return "\n".join(lines).replace("'", '"')


def render_all(spec_root: Path, own_specs: Path | None = GRETE_SPECS,
               local_specs: Path | None = LOCAL_SPECS) -> tuple[dict[str, str], list[str]]:
    messages, notes = load_all(spec_root, [*SPEC_DIRS, *([str(local_specs)] if local_specs is not None else [])])
    own, own_notes = load_all(own_specs, GRETE_SPEC_DIRS) if own_specs is not None else ({}, [])
    clash = set(messages) & set(own)
    if clash:
        raise SystemExit(f"grete's specs reuse Kafka's message names: {sorted(clash)}")
    messages.update(own)
    notes += own_notes
    modules, skipped = select(messages)
    note = ("Merged from Kafka's JSON message specs (" + ", ".join(SPEC_DIRS) + "): valid versions are "
            "the union of every copy.")
    files = {f"{mod}.py": emit_module(msgs, note) for mod, msgs in sorted(modules.items())}
    files["__init__.py"] = render_init(modules)
    return files, notes + skipped


def sync(out: Path, files: dict[str, str], check: bool) -> list[str]:
    """Bring ``out`` to ``files`` (or, with ``check``, only compare); returns what differs."""
    existing = {p.name for p in out.glob("*.py")} if out.is_dir() else set()
    stale = sorted(existing - set(files))
    changed = sorted(n for n, text in files.items()
                     if not (out / n).is_file() or (out / n).read_text(encoding="utf-8") != text)
    where = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    if check:
        return [f"out of date: {where / n}" for n in changed] + [f"stale (not generated): {where / n}" for n in stale]
    out.mkdir(parents=True, exist_ok=True)
    for n in changed:
        (out / n).write_text(files[n], encoding="utf-8")
    for n in stale:
        (out / n).unlink()
    print(f"{where}: {len(files)} files, {len(changed)} written, {len(stale)} removed", file=sys.stderr)
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.codegen", description=__doc__)
    parser.add_argument("--specs", type=Path, default=DEFAULT_SPECS)
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument("--metadata-out", type=Path, default=METADATA_OUT_DIR)
    parser.add_argument("--check", action="store_true", help="exit 1 if regenerating would change anything")
    args = parser.parse_args(argv)
    files, notes = render_all(args.specs)
    metadata_files, metadata_notes = render_metadata(args.specs, SPEC_DIRS)
    for n in notes + metadata_notes:
        print(f"note: {n}", file=sys.stderr)
    differs = sync(args.out, files, args.check) + sync(args.metadata_out, metadata_files, args.check)
    for line in differs:
        print(line, file=sys.stderr)
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
