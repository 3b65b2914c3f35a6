"""Generic walks over the generated message classes: error answers shaped like the request, for
fault injection and for the answers Kafka gives to a whole request it refuses (ILLEGAL_SASL_STATE).

An injected error must be a correctly shaped response of the request's API and version, with
every partition the request named present in it. Rather than hand-writing one builder per API,
these helpers read each class's ``_FIELDS`` metadata: response arrays are mirrored from the request
array that carries the same key fields (topic name/id, partition index, group id, ...), every
``*error_code`` field is set, and other fields keep their spec defaults. The same key fields let a
request be split into the partitions a fault names and the rest, and the two responses be merged.

Nothing here is on the broker's normal path: it only runs for requests a fault matches or a
request refused whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from grete.protocol.codec import FieldSpec, Message, Struct

# Field names that identify an entry, mapped to one canonical key per kind of thing.
_CANONICAL = {
    "name": "topic", "topic": "topic", "topic_name": "topic",
    "topic_id": "topic_id",
    "partition": "partition", "partition_index": "partition", "index": "partition",
    "partition_id": "partition",
    "group_id": "group", "group": "group",
    "key": "key", "coordinator_key": "key",
    "member_id": "member", "group_instance_id": "instance",
    "resource_name": "resource", "resource_type": "resource_type",
    "transactional_id": "transactional_id",
}
# A primitive array in a request (e.g. OffsetFetch's ``partition_indexes``) names the keys of
# the response's struct array (``partitions[].partition_index``).
_PLURALS = {"partition_indexes": "partition", "partitions": "partition", "group_ids": "group",
            "groups": "group", "coordinator_keys": "key", "topic_names": "topic", "topics": "topic"}

# Fields Kafka answers with -1 in an error entry.
_UNKNOWN = frozenset({"node_id", "port", "leader_id", "producer_id"})

Keep = Callable[[str | None, Any, int | None], bool]   # (topic name, topic id, partition) -> keep?


def fields(obj_or_cls: Any, version: int) -> list[FieldSpec]:
    """The fields present at ``version``."""
    return [f for f in obj_or_cls._FIELDS if version in f.versions]


def keys_of(cls: Any, version: int) -> dict[str, str]:
    """canonical key -> attribute name, for the key fields of a struct class at ``version``."""
    out: dict[str, str] = {}
    for f in fields(cls, version):
        canonical = _CANONICAL.get(f.name)
        if canonical is not None and f.kind != "struct" and not f.array:
            out.setdefault(canonical, f.name)
    return out


def struct_class(root: type, spec: FieldSpec) -> type:
    """Nested struct classes are attributes of the top-level message class."""
    cls = getattr(root, spec.struct or "", None)
    if cls is None:
        raise TypeError(f"{root.__name__} has no struct {spec.struct}")
    return cls  # type: ignore[no-any-return]


# --- building an error response ------------------------------------------------------------
def error_response(response_cls: type[Message], request: Message, version: int, error: int,
                   message: str | None = None, *, top_level: bool = True) -> Message:
    """A response of ``response_cls`` mirroring ``request``, every error code set to ``error``.

    With ``top_level=False`` the response's own (request-wide) error codes stay 0: used when
    only some partitions fail and the rest of the request succeeded.
    """
    out = response_cls()
    _fill(out, request, response_cls, version, error, message)
    if not top_level:
        for f in fields(out, version):
            if f.name.endswith("error_code"):
                setattr(out, f.name, 0)
            elif f.name == "error_message":
                setattr(out, f.name, None)
    return out


def _fill(out: Any, src: Any, root: type, version: int, error: int, message: str | None) -> None:
    for f in fields(out, version):
        if f.name.endswith("error_code"):
            setattr(out, f.name, int(error))
        elif f.name == "error_message" and message is not None:
            setattr(out, f.name, message)
        elif f.kind == "records":
            setattr(out, f.name, b"")
        elif f.kind in ("int64", "int32") and (f.name.endswith(("offset", "watermark")) or f.name in _UNKNOWN):
            setattr(out, f.name, -1)  # Kafka's "none" in error entries (INVALID_OFFSET, no node)
        elif f.kind == "struct" and f.array:
            setattr(out, f.name, _mirror_array(f, src, root, version, error, message))


def _mirror_array(f: FieldSpec, src: Any, root: type, version: int, error: int,
                  message: str | None) -> list[Any]:
    cls = struct_class(root, f)
    out_keys = keys_of(cls, version)
    if not out_keys or src is None:
        return []
    source = _counterpart(src, out_keys, version)
    if source is None:
        return []
    items = []
    for entry in source:
        item = cls()
        if isinstance(entry, Struct):
            in_keys = keys_of(type(entry), version)
            for canonical, attr in out_keys.items():
                if canonical in in_keys:
                    setattr(item, attr, getattr(entry, in_keys[canonical]))
        else:  # a primitive array of keys: exactly one key field carries it
            setattr(item, next(iter(out_keys.values())), entry)
        _fill(item, entry if isinstance(entry, Struct) else None, root, version, error, message)
        items.append(item)
    return items


def _counterpart(src: Any, out_keys: dict[str, str], version: int) -> list[Any] | None:
    """The request array whose entries carry the most of the response entries' keys."""
    best: list[Any] | None = None
    best_score = 0
    for f in fields(src, version):
        if not f.array:
            continue
        values = getattr(src, f.name)
        if values is None:
            continue
        if f.kind == "struct":
            score = len(out_keys.keys() & keys_of(struct_class(_root_of(src), f), version).keys())
        else:
            score = 1 if _PLURALS.get(f.name) in out_keys and len(out_keys) == 1 else 0
        if score > best_score:
            best, best_score = values, score
    return best


def _root_of(obj: Any) -> type:
    """The top-level message class a (possibly nested) struct belongs to."""
    qualname = type(obj).__qualname__.split(".")[0]
    module = __import__(type(obj).__module__, fromlist=[qualname])
    return getattr(module, qualname)  # type: ignore[no-any-return]


# --- splitting a request by partition --------------------------------------------------------
def split(request: Message, version: int, matches: Keep) -> tuple[Message | None, Message | None]:
    """(the request without matching entries, the request with only them); None when empty.

    Entries are topics (for topic-level APIs such as CreateTopics) or partitions. A request that
    names no topic at all (JoinGroup, ...) yields (request, None): a topic filter cannot match it.
    """
    rest, kept, total = _filter(request, version, lambda t, i, p: not matches(t, i, p), None)
    only, matched, _ = _filter(request, version, matches, None)
    return (rest if kept or not total else None), (only if matched else None)


def _filter(obj: Any, version: int, keep: Keep, scope: tuple[str | None, Any] | None
            ) -> tuple[Any, int, int]:
    """(copy of ``obj`` keeping wanted entries, entries kept, entries seen) below ``obj``.

    ``scope`` is the (name, id) of the enclosing topic entry; inside one, a ``name`` field is no
    longer a topic (it may be a config's name), only partition keys decide.
    """
    keys = keys_of(type(obj), version)
    if scope is not None and "partition" in keys:
        wanted = keep(scope[0], scope[1], getattr(obj, keys["partition"]))
        return (obj if wanted else None), int(wanted), 1
    is_topic = scope is None and ("topic" in keys or "topic_id" in keys)
    if is_topic:
        scope = (getattr(obj, keys["topic"]) if "topic" in keys else None,
                 getattr(obj, keys["topic_id"]) if "topic_id" in keys else None)
    changes: dict[str, Any] = {}
    kept = seen = 0
    for f in fields(obj, version):
        values = getattr(obj, f.name)
        if not f.array or not values:
            continue
        if f.kind == "struct":
            results = [_filter(v, version, keep, scope) for v in values]
            k = sum(r[1] for r in results)
            s = sum(r[2] for r in results)
            if s:
                changes[f.name] = [r[0] for r in results if r[0] is not None]
                kept, seen = kept + k, seen + s
        elif scope is not None and _PLURALS.get(f.name) == "partition":
            ids = [p for p in values if keep(scope[0], scope[1], p)]
            changes[f.name] = ids
            kept, seen = kept + len(ids), seen + len(values)
    copy = dataclasses.replace(obj, **changes) if changes else obj
    if is_topic and not seen:  # a topic-level entry: decide on the topic itself
        wanted = keep(scope[0], scope[1], None) if scope else True
        return (copy if wanted else None), int(wanted), 1
    if seen and not kept:
        return None, 0, seen
    return copy, kept, seen


# --- merging two responses -------------------------------------------------------------------
def merge(base: Any, extra: Any, version: int) -> Any:
    """Add ``extra``'s array entries into ``base`` (entries with equal keys merge recursively)."""
    for f in fields(base, version):
        if not (f.kind == "struct" and f.array):
            continue
        ours = getattr(base, f.name)
        theirs = getattr(extra, f.name)
        if not theirs:
            continue
        index = {_identity(e, version): e for e in ours}
        for entry in theirs:
            key = _identity(entry, version)
            if key and key in index:
                merge(index[key], entry, version)
            else:
                ours.append(entry)
    return base


def _identity(entry: Any, version: int) -> tuple[Any, ...]:
    keys = keys_of(type(entry), version)
    return tuple(getattr(entry, attr) for _, attr in sorted(keys.items()))


# --- detaching a request from the connection's buffer ----------------------------------------
def detach(obj: Any) -> None:
    """Copy zero-copy ``records`` views into bytes, so a request can outlive its read buffer."""
    for f in obj._FIELDS:
        value = getattr(obj, f.name, None)
        if f.kind == "records" and isinstance(value, memoryview):
            setattr(obj, f.name, bytearray(value))  # writable: the log patches offsets in place
        elif f.kind == "struct" and value is not None:
            for child in (value if f.array else [value]):
                detach(child)
