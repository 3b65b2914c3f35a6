"""How ``grete host`` lays N brokers out on one host (docs/cluster.md, "Several brokers per host").

A grete broker runs its requests on one event loop, so it uses one core; a host's cores are used
by running one broker per core. From one broker's properties, as an operator writes them for this
host, each broker gets:

- its id: the file's ``node.id`` (or ``broker.id``) plus its index on the host;
- its ports: every listener's port (and advertised port) plus index × stride, the stride being the
  span of the file's ports (9092 and 9093 → 2), so brokers' listeners never overlap;
- its log dirs: with as many dirs as brokers or more, a share of them each (one broker per disk);
  with fewer, the brokers share them round-robin, each in a ``broker-<id>`` subdirectory;
- ``broker.rack``: the host's name unless the file sets one, so rack-aware placement puts a
  partition's replicas on other hosts (on one host they would all die with it);
- a share of memory for requests in flight: ``queued.max.request.bytes`` (Kafka's default, -1, is
  unbounded) set to a quarter of the host's memory divided among the brokers, the rest left to the
  page cache, which every broker on the host shares.

Pure: the caller reads the file, the host's facts and writes the result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REQUEST_MEMORY_SHARE = 4  # a quarter of the host's memory for all its brokers' queued requests
_ENDPOINT = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)://(?P<host>\[[^\]]*\]|[^:]*):(?P<port>\d+)$")


class HostLayoutError(ValueError):
    """The properties cannot be laid out for several brokers (the message says why)."""


@dataclass(frozen=True)
class HostFacts:
    hostname: str
    cores: int
    memory_bytes: int


def broker_count(requested: str, facts: HostFacts) -> int:
    """``--brokers``: a number, or ``auto`` for one per core."""
    if requested == "auto":
        return max(1, facts.cores)
    try:
        count = int(requested)
    except ValueError:
        raise HostLayoutError(f"--brokers takes a number or auto, not {requested!r}") from None
    if count < 1:
        raise HostLayoutError(f"--brokers must be at least 1, not {count}")
    return count


def lay_out(items: dict[str, str], count: int, facts: HostFacts,
            port_stride: int | None = None) -> list[dict[str, str]]:
    """Each broker's properties, in index order."""
    _refuse_controllers(items)
    id_key = "node.id" if "node.id" in items else "broker.id"
    if id_key not in items:
        raise HostLayoutError("the properties need node.id (KRaft) or broker.id (ZooKeeper): "
                              "the first broker's id; the others take the ids after it")
    first_id = _int(items, id_key)
    ports = _ports(items.get("listeners", "")) + _ports(items.get("advertised.listeners", ""))
    stride = port_stride if port_stride is not None else _span(ports)
    dirs = _log_dirs(items)
    memory = _request_memory(items, count, facts)
    laid_out = []
    for index in range(count):
        broker_id = first_id + index
        own = dict(items)
        own[id_key] = str(broker_id)
        for key in ("listeners", "advertised.listeners"):
            if key in own:
                own[key] = _shift(own[key], index * stride)
        own.pop("log.dir", None)
        own["log.dirs"] = ",".join(_dirs_of(dirs, index, count, broker_id))
        if "metadata.log.dir" in own:
            own["metadata.log.dir"] = f"{own['metadata.log.dir'].rstrip('/')}/broker-{broker_id}"
        own.setdefault("broker.rack", facts.hostname)
        if memory is not None:
            own["queued.max.request.bytes"] = str(memory)
        laid_out.append(own)
    return laid_out


def _refuse_controllers(items: dict[str, str]) -> None:
    roles = {r.strip() for r in items.get("process.roles", "").split(",") if r.strip()}
    if "controller" in roles:
        raise HostLayoutError("grete host runs brokers only (process.roles=broker): run each controller "
                              "with grete serve, as Kafka runs its controllers apart from its brokers")


def _int(items: dict[str, str], key: str) -> int:
    try:
        return int(items[key])
    except ValueError:
        raise HostLayoutError(f"{key} must be a number, not {items[key]!r}") from None


def _ports(listeners: str) -> list[int]:
    ports = []
    for endpoint in filter(None, (e.strip() for e in listeners.split(","))):
        match = _ENDPOINT.match(endpoint)
        if match is None:
            raise HostLayoutError(f"cannot read the listener {endpoint!r} (NAME://host:port)")
        ports.append(int(match["port"]))
    return ports


def _span(ports: list[int]) -> int:
    fixed = [p for p in ports if p]
    if len(fixed) != len(ports):
        raise HostLayoutError("a listener has port 0: give every listener a port, the first broker's; "
                              "the others take the ports after it")
    return max(fixed) - min(fixed) + 1 if fixed else 1


def _shift(listeners: str, by: int) -> str:
    shifted = []
    for endpoint in filter(None, (e.strip() for e in listeners.split(","))):
        match = _ENDPOINT.match(endpoint)
        assert match is not None  # read by _ports already
        shifted.append(f"{match['name']}://{match['host']}:{int(match['port']) + by}")
    return ",".join(shifted)


def _log_dirs(items: dict[str, str]) -> list[str]:
    value = items.get("log.dirs") or items.get("log.dir")
    if not value:
        raise HostLayoutError("the properties need log.dirs: the host's data directories, shared out among its brokers")
    return [d.strip().rstrip("/") for d in value.split(",") if d.strip()]


def _dirs_of(dirs: list[str], index: int, count: int, broker_id: int) -> list[str]:
    if len(dirs) >= count:
        return dirs[index::count]
    return [f"{dirs[index % len(dirs)]}/broker-{broker_id}"]


def _request_memory(items: dict[str, str], count: int, facts: HostFacts) -> int | None:
    """The file's value if it sets one (it is per broker), else the host's share for each broker."""
    if "queued.max.request.bytes" in items:
        return None
    return max(1 << 20, facts.memory_bytes // REQUEST_MEMORY_SHARE // count)
