"""The ``grete.protocol.metadata`` package: KRaft's metadata records, control-record values and quorum state.

One module per schema, emitted like the message modules. The records of ``__cluster_metadata``
(type "metadata", keyed by their "apiKey", the record type) come from the shared October 2024 copy
merged with grete's copies of Kafka 4.3.1's newer ones (specs_local_metadata); the control-record
values are data schemas that live with the client specs.
"""

from __future__ import annotations

from pathlib import Path

from tools.codegen.emit import HEADER_LINE, emit_module, snake
from tools.codegen.specs import Message, load_all

METADATA_SPEC_DIRS = ["ak-metadata-2024-10"]
# grete's copies of Kafka 4.3.1's record schemas where they are newer than the shared copy.
LOCAL_METADATA_SPECS = Path(__file__).resolve().parent / "specs_local_metadata"
# The values of KRaft's control records (LEADER_CHANGE, SNAPSHOT_HEADER, ...), found with the client specs.
CONTROL_VALUES = frozenset({"LeaderChangeMessage", "SnapshotHeaderRecord", "SnapshotFooterRecord",
                            "VotersRecord", "KRaftVersionRecord"})
# Kafka's class for ZkMigrationRecord.json is ZkMigrationStateRecord; the file's name is kept as an alias.
ALIASES = {"ZkMigrationRecord": "ZkMigrationStateRecord"}
PACKAGE = "grete.protocol.metadata"

RECORDS_NOTE = ("Merged from Kafka's KRaft metadata record specs (ak-metadata-2024-10) and grete's copies of "
                "Kafka 4.3.1's newer ones (tools/codegen/specs_local_metadata): valid versions are the union "
                "of every copy.")


def module_of(name: str) -> str:
    """The module of a schema: its snake-case name, with KRaft as one word."""
    return snake(name).replace("k_raft_", "kraft_")


def load_metadata(spec_root: Path, message_dirs: list[str],
                  local_specs: Path | None) -> tuple[dict[str, Message], list[str]]:
    dirs = [*METADATA_SPEC_DIRS, *([str(local_specs)] if local_specs is not None else [])]
    records, notes = load_all(spec_root, dirs)
    control, control_notes = load_all(spec_root, message_dirs, names=CONTROL_VALUES)
    missing = CONTROL_VALUES - set(control)
    if missing:
        raise SystemExit(f"control-record value specs not found: {sorted(missing)}")
    keys: dict[int, str] = {}
    for name, msg in records.items():
        if msg.type != "metadata":
            continue
        if msg.api_key is None or msg.api_key in keys:
            raise SystemExit(f"{name}: metadata record without a distinct apiKey")
        keys[msg.api_key] = name
    return {**records, **control}, notes + control_notes


def render_metadata(spec_root: Path, message_dirs: list[str],
                    local_specs: Path | None = LOCAL_METADATA_SPECS) -> tuple[dict[str, str], list[str]]:
    messages, notes = load_metadata(spec_root, message_dirs, local_specs)
    control_note = ("Merged from Kafka's JSON message specs (" + ", ".join(message_dirs) + "): valid versions "
                    "are the union of every copy.")
    files = {f"{module_of(name)}.py": emit_module([msg], control_note if name in CONTROL_VALUES else RECORDS_NOTE)
             for name, msg in sorted(messages.items())}
    files["__init__.py"] = render_metadata_init(messages)
    return files, notes


def render_metadata_init(messages: dict[str, Message]) -> str:
    names = sorted(messages)
    records = sorted((m.api_key, m.name) for m in messages.values() if m.type == "metadata" and m.api_key is not None)
    lines = [
        HEADER_LINE,
        '"""Codecs of KRaft\'s metadata records, the KRaft control-record values and the quorum-state schema.',
        "",
        "``METADATA_RECORDS`` maps a metadata record's type (its spec's apiKey) to its class. How a record",
        "value of ``__cluster_metadata`` frames them is in ``grete.protocol.metadata_frame``.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from grete.protocol.codec import Message",
        *[f"from {PACKAGE}.{module_of(n)} import {n}" for n in names],
        "",
    ]
    for alias, target in sorted(ALIASES.items()):
        if target in messages:
            lines.append(f"# Kafka's class for {alias}.json is {target}; the file's name is an alias.")
            lines.append(f"{alias} = {target}")
    lines += [
        "",
        "METADATA_RECORDS: dict[int, type[Message]] = {",
        *[f"    {key}: {name}," for key, name in records],
        "}",
        "",
        "__all__ = [",
        '    "METADATA_RECORDS",',
        *[f'    "{n}",' for n in sorted([*names, *(a for a, t in ALIASES.items() if t in messages)])],
        "]",
        "",
    ]
    return "\n".join(lines)
