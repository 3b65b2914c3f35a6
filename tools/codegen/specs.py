"""Load Kafka's JSON message specs and merge several copies of them into one model per message.

Merge rule (per message name): valid versions = union of every copy's validVersions. Fields merge by
name, recursively through struct types; a field's version sets (versions, nullableVersions,
taggedVersions) are the union over the copies of (the copy's set intersected with that copy's
validVersions). Any disagreement that would change the wire format at a version two copies both
cover (types, tags, field order, flexibility) is an error, not a guess.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

MAX_VERSION = 0x7FFF

# Kafka renamed API 74 in 4.x (KIP-1142). The new spec covers every version of the old one, so the
# old name is dropped wherever the new one exists rather than generating two classes for one key.
RENAMED = {"ListClientMetricsResources": "ListConfigResources"}

PRIMITIVES = {"int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "bool", "uuid",
              "string", "bytes", "records"}


class SpecError(Exception):
    """The specs cannot be merged or contain something the generator does not understand."""


def strip_comments(text: str) -> str:
    """Remove // comments outside JSON strings."""
    out: list[str] = []
    i = 0
    in_string = False
    while i < len(text):
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def parse_versions(text: str | None, valid: frozenset[int]) -> frozenset[int]:
    """'3+', '0-7', '5', 'none' -> the set of versions, limited to ``valid``."""
    if text is None or text == "none" or text == "":
        return frozenset()
    m = re.fullmatch(r"(\d+)(\+|-(\d+))?", text.strip())
    if not m:
        raise SpecError(f"bad version range {text!r}")
    lo = int(m.group(1))
    if m.group(2) == "+":
        hi = MAX_VERSION
    elif m.group(3) is not None:
        hi = int(m.group(3))
    else:
        hi = lo
    return frozenset(v for v in valid if lo <= v <= hi)


@dataclass
class Field:
    name: str
    type: str  # "int32", "string", "[]int32", "[]SomeStruct", "SomeStruct"
    versions: frozenset[int]
    nullable: frozenset[int] = frozenset()
    tagged: frozenset[int] = frozenset()
    tag: int | None = None
    ignorable: bool = False
    default: str | None = None
    about: str = ""
    # Field-level flexibleVersions (only RequestHeader.ClientId uses it; generated code rejects it).
    flexible_override: str | None = None

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.element not in PRIMITIVES


@dataclass
class Struct:
    name: str
    fields: list[Field] = field(default_factory=list)


@dataclass
class Message:
    name: str  # e.g. "ProduceRequest"
    type: str  # request / response / data / header
    api_key: int | None
    valid: frozenset[int]
    flexible: frozenset[int]
    fields: list[Field]
    structs: dict[str, Struct]  # every struct type of this message, inline and common
    sources: list[str] = field(default_factory=list)
    supersedes: bool = False  # a grete spec file that replaces every other copy ("gretesupersedes": true)

    @property
    def flexible_from(self) -> int | None:
        return min(self.flexible) if self.flexible else None


def _parse_fields(raw: list[dict[str, object]], valid: frozenset[int], structs: dict[str, Struct],
                  where: str) -> list[Field]:
    fields: list[Field] = []
    for spec in raw:
        name = str(spec["name"])
        ftype = str(spec["type"])
        tag = spec.get("tag")
        default = spec.get("default")
        if isinstance(default, bool):
            default = "true" if default else "false"
        f = Field(
            name=name, type=ftype,
            versions=parse_versions(str(spec["versions"]), valid),
            nullable=parse_versions(_opt_str(spec.get("nullableVersions")), valid),
            tagged=parse_versions(_opt_str(spec.get("taggedVersions")), valid),
            tag=int(str(tag)) if tag is not None else None,
            ignorable=bool(spec.get("ignorable", False)),
            default=None if default is None else str(default).strip(),
            about=str(spec.get("about", "")),
            flexible_override=_opt_str(spec.get("flexibleVersions")),
        )
        if (f.tag is None) != (not f.tagged) and f.versions:
            raise SpecError(f"{where}.{name}: tag and taggedVersions must come together")
        sub = spec.get("fields")
        if isinstance(sub, list):
            _add_struct(structs, Struct(f.element, _parse_fields(sub, valid, structs, f"{where}.{name}")),
                        where)
        elif f.is_struct and f.element not in structs:
            pass  # a commonStruct: registered by the caller (possibly after this field)
        fields.append(f)
    return fields


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _add_struct(structs: dict[str, Struct], s: Struct, where: str) -> None:
    if s.name in structs:
        # Kafka allows reusing a name only for identical definitions.
        if structs[s.name] != s:
            raise SpecError(f"{where}: struct {s.name} defined twice with different fields")
        return
    structs[s.name] = s


def load_spec(path: Path) -> Message:
    data = json.loads(strip_comments(path.read_text(encoding="utf-8")))
    if "+" in str(data["validVersions"]):
        raise SpecError(f"{path}: validVersions must be a closed range")
    valid = parse_versions(str(data["validVersions"]), frozenset(range(MAX_VERSION + 1)))
    if not valid:
        raise SpecError(f"{path}: no valid versions")
    structs: dict[str, Struct] = {}
    name = str(data["name"])
    for common in data.get("commonStructs", []):
        _add_struct(structs, Struct(str(common["name"]),
                                    _parse_fields(common["fields"], valid, structs, name)), name)
    fields = _parse_fields(data.get("fields", []), valid, structs, name)
    api_key = data.get("apiKey")
    msg = Message(
        name=name, type=str(data["type"]), api_key=None if api_key is None else int(api_key),
        valid=valid, flexible=parse_versions(str(data.get("flexibleVersions", "none")), valid),
        fields=fields, structs=structs, sources=[str(path)], supersedes=bool(data.get("gretesupersedes")),
    )
    _check_struct_refs(msg)
    return msg


def _check_struct_refs(msg: Message) -> None:
    for f in _all_fields(msg):
        if f.is_struct and f.element not in msg.structs:
            raise SpecError(f"{msg.name}: unknown type {f.type} for field {f.name}")


def _all_fields(msg: Message) -> list[Field]:
    out = list(msg.fields)
    for s in msg.structs.values():
        out.extend(s.fields)
    return out


# ------------------------------------------------------------------------------------------------
# Merging


def merge_messages(copies: list[Message]) -> Message:
    base = copies[0]
    merged = Message(
        name=base.name, type=base.type, api_key=base.api_key, valid=frozenset(), flexible=frozenset(),
        fields=[], structs={}, sources=[],
    )
    for msg in copies:
        if (msg.type, msg.api_key) != (merged.type, merged.api_key):
            raise SpecError(f"{msg.name}: type/apiKey differ between {merged.sources} and {msg.sources}")
        for v in msg.valid & merged.valid:
            if (v in msg.flexible) != (v in merged.flexible):
                raise SpecError(f"{msg.name}: flexibility of v{v} differs between copies")
        merged.valid |= msg.valid
        merged.flexible |= msg.flexible
        merged.fields = _merge_fields(merged.fields, msg.fields, msg.name)
        for sname, s in msg.structs.items():
            if sname in merged.structs:
                merged.structs[sname].fields = _merge_fields(merged.structs[sname].fields, s.fields,
                                                             f"{msg.name}.{sname}")
            else:
                merged.structs[sname] = Struct(sname, list(s.fields))
        merged.sources += msg.sources
    # Flexible versions are "N+": the union must be contiguous up to the top version.
    if merged.flexible and merged.flexible != frozenset(range(min(merged.flexible), max(merged.valid) + 1)):
        raise SpecError(f"{merged.name}: merged flexible versions are not an open range")
    return merged


def _merge_fields(old: list[Field], new: list[Field], where: str) -> list[Field]:
    """Union of two ordered field lists; new fields go right after their predecessor in ``new``."""
    by_name = {f.name: f for f in old}
    result = list(old)
    prev: str | None = None
    last_index = -1
    for f in new:
        if f.name in by_name:
            o = by_name[f.name]
            _check_compatible(o, f, where)
            merged = Field(
                name=o.name, type=o.type, versions=o.versions | f.versions,
                nullable=o.nullable | f.nullable, tagged=o.tagged | f.tagged,
                tag=o.tag if o.tag is not None else f.tag, ignorable=o.ignorable or f.ignorable,
                default=f.default if f.default is not None else o.default, about=f.about or o.about,
            )
            index = next(i for i, x in enumerate(result) if x.name == f.name)
            # An order difference is harmless when the two fields never share a version;
            # check_layouts() rejects any case where it would change the wire format.
            result[index] = merged
            last_index = max(last_index, index)
        else:
            index = 0 if prev is None else next(i for i, x in enumerate(result) if x.name == prev) + 1
            result.insert(index, f)
            last_index = index
        by_name[f.name] = result[index]
        prev = f.name
    return result


def _check_compatible(a: Field, b: Field, where: str) -> None:
    if a.type != b.type:
        raise SpecError(f"{where}.{a.name}: type {a.type} vs {b.type}")
    if a.tag is not None and b.tag is not None and a.tag != b.tag:
        raise SpecError(f"{where}.{a.name}: tag {a.tag} vs {b.tag}")
    if a.default is not None and b.default is not None and _norm_default(a.default) != _norm_default(b.default):
        raise SpecError(f"{where}.{a.name}: default {a.default} vs {b.default}")


def _norm_default(d: str) -> str:
    try:
        return str(int(d, 0))
    except ValueError:
        return d.lower()


# ------------------------------------------------------------------------------------------------
# Cross-check: every copy must describe the same wire layout at every version it shares.


def wire_layout(msg: Message, version: int) -> tuple[object, ...]:
    return _layout(msg, msg.fields, version, set())


def _layout(msg: Message, fields: list[Field], v: int, seen: set[str]) -> tuple[object, ...]:
    out: list[object] = []
    for f in fields:
        if v not in f.versions:
            continue
        sub: object = None
        if f.is_struct and f.element not in seen:
            sub = _layout(msg, msg.structs[f.element].fields, v, seen | {f.element})
        out.append((f.type if not f.is_struct else ("[]" if f.is_array else "") + "struct",
                    v in f.nullable, f.tag if v in f.tagged else None, sub))
    return tuple(out)


def check_layouts(merged: Message, copies: list[Message]) -> None:
    for copy in copies:
        for v in copy.valid:
            if wire_layout(copy, v) != wire_layout(merged, v):
                raise SpecError(f"{merged.name} v{v}: merged layout differs from {copy.sources[0]}")


def load_all(spec_root: Path, dirs: list[str],
             names: frozenset[str] | None = None) -> tuple[dict[str, Message], list[str]]:
    """Merge every spec found under ``spec_root/<dir>`` (only the files named ``<name>.json`` of
    ``names``, if given); returns messages by name and notes."""
    copies: dict[str, list[Message]] = {}
    for d in dirs:
        for path in sorted((spec_root / d).glob("*.json")):
            if names is not None and path.stem not in names:
                continue
            msg = load_spec(path)
            copies.setdefault(msg.name, []).append(msg)
    notes: list[str] = []
    for old, new in RENAMED.items():
        for suffix in ("Request", "Response"):
            if old + suffix in copies and new + suffix in copies:
                del copies[old + suffix]
                notes.append(f"{old}{suffix}: superseded by {new}{suffix} (same API key, renamed in Kafka 4.x)")
    for name, found in copies.items():
        # A corrected copy whose layout an older shared copy contradicts at a version both cover.
        if any(c.supersedes for c in found):
            copies[name] = [c for c in found if c.supersedes]
            notes.append(f"{name}: grete's corrected copy supersedes the shared ones")
    merged: dict[str, Message] = {}
    for name in sorted(copies):
        m = merge_messages(copies[name])
        check_layouts(m, copies[name])
        merged[name] = m
    return merged, notes
