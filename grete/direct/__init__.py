"""grete's direct data path, client side (docs/direct.md): ``Producer`` and ``Consumer`` shaped like
confluent-kafka's, writing into and reading from the broker's files through a one-sided transport
(``direct.transport``: ``shm`` on one host). Control goes over the Kafka protocol to
``bootstrap.servers``.

This package also holds what the broker shares with its clients (the transports, the region and
slot layouts); it imports nothing of the broker (an import-linter contract in pyproject.toml).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grete.direct.consumer import Consumer
    from grete.direct.producer import Producer
    from grete.direct.types import (
        OFFSET_BEGINNING,
        OFFSET_END,
        OFFSET_INVALID,
        KafkaError,
        KafkaException,
        Message,
        TopicPartition,
    )

# Loaded on first use: the broker imports grete.direct.layout / .shm without the client library.
_MODULE_OF = {"Consumer": "consumer", "Producer": "producer", "OFFSET_BEGINNING": "types",
              "OFFSET_END": "types", "OFFSET_INVALID": "types", "KafkaError": "types",
              "KafkaException": "types", "Message": "types", "TopicPartition": "types"}


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(f"grete.direct.{_MODULE_OF[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "Consumer", "KafkaError", "KafkaException",
           "Message", "Producer", "TopicPartition"]
