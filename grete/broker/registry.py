"""One registry of API handlers; it also builds the ApiVersions advertisement.

A handler module declares the versions it implements with ``@api(key, min, max)``. Nothing is
advertised that no module implements, and the advertised range is exactly the implemented one,
except where Kafka itself advertises more for client feature checks (Produce advertises min 0, as
Apache Kafka 4.x does for librdkafka; v0-2 are then answered by up-converting legacy message sets).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grete.protocol.messages import APIS

if TYPE_CHECKING:
    from grete.broker.context import RequestContext

HandlerFn = Callable[["RequestContext", Any], Any | Awaitable[Any] | None]


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: int
    name: str
    min_version: int
    max_version: int
    advertised_min: int
    fn: HandlerFn
    request_cls: type
    response_cls: type


_HANDLERS: dict[int, Handler] = {}


def api(api_key: int, min_version: int, max_version: int, *,
        advertised_min: int | None = None) -> Callable[[HandlerFn], HandlerFn]:
    """Register the decorated function as the handler of ``api_key`` for these versions."""
    info = APIS[api_key]
    if min_version < info.min_version or max_version > info.max_version:
        raise ValueError(f"{info.name}: codecs cover v{info.min_version}-{info.max_version}, "
                         f"handler claims v{min_version}-{max_version}")

    def register(fn: HandlerFn) -> HandlerFn:
        if api_key in _HANDLERS:
            raise ValueError(f"{info.name} registered twice")
        _HANDLERS[api_key] = Handler(api_key, info.name, min_version, max_version,
                                     min_version if advertised_min is None else advertised_min,
                                     fn, info.request, info.response)
        return fn

    return register


def handlers() -> dict[int, Handler]:
    """Every registered handler, importing each module of grete.broker.handlers once."""
    if not _HANDLERS:
        import grete.broker.handlers as package
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{module.name}")
    return _HANDLERS


def advertised_versions() -> list[tuple[int, int, int]]:
    """(api_key, min, max) for the ApiVersions response, sorted by key."""
    return [(h.api_key, h.advertised_min, h.max_version) for h in sorted(handlers().values(),
                                                                         key=lambda h: h.api_key)]
