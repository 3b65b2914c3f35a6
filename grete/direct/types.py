"""The client library's value types, shaped like confluent-kafka's (``TopicPartition``, ``Message``,
``KafkaError``) so code written for it reads the same."""

from __future__ import annotations

import builtins

from grete.protocol.errors import ErrorCode

OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_INVALID = -1001


class KafkaError:
    """An error as confluent-kafka reports it: ``code()``, ``name()``, ``str()``, ``retriable()``."""

    def __init__(self, code: int, reason: builtins.str | None = None) -> None:
        self._code = int(code)
        self._reason = reason

    def code(self) -> int:
        return self._code

    def name(self) -> builtins.str:
        try:
            return ErrorCode(self._code).name
        except ValueError:
            return f"ERROR_{self._code}"

    def str(self) -> builtins.str:  # noqa: A003 - confluent-kafka's name
        return self._reason or self.name()

    def retriable(self) -> bool:
        try:
            return ErrorCode(self._code).retriable
        except ValueError:
            return False

    def __str__(self) -> builtins.str:
        return f"KafkaError{{code={self.name()},val={self._code},str=\"{self._reason or self.name()}\"}}"

    __repr__ = __str__


class KafkaException(Exception):
    def __init__(self, error: KafkaError) -> None:
        super().__init__(str(error))
        self.error = error

    def args_error(self) -> KafkaError:
        return self.error


class TopicPartition:
    __slots__ = ("topic", "partition", "offset", "error")

    def __init__(self, topic: str, partition: int = -1, offset: int = OFFSET_INVALID) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.error: KafkaError | None = None

    def __repr__(self) -> str:
        return f"TopicPartition{{topic={self.topic},partition={self.partition},offset={self.offset}}}"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TopicPartition) and (self.topic, self.partition, self.offset)
                == (other.topic, other.partition, other.offset))

    def __hash__(self) -> int:
        return hash((self.topic, self.partition))


class Message:
    """One consumed (or delivered) record, or an error event (``error()`` not None)."""

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value", "_timestamp", "_headers", "_error")

    def __init__(self, topic: str | None, partition: int, offset: int, key: bytes | None, value: bytes | None,
                 timestamp: int = -1, headers: list[tuple[str, bytes | None]] | None = None,
                 error: KafkaError | None = None) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._timestamp = timestamp
        self._headers = headers
        self._error = error

    def topic(self) -> str | None:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        """(type, ms) as confluent-kafka gives it: type 1 is CreateTime, 0 none."""
        return (1 if self._timestamp >= 0 else 0, self._timestamp)

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers

    def error(self) -> KafkaError | None:
        return self._error

    def __len__(self) -> int:
        return 0 if self._value is None else len(self._value)

    def __repr__(self) -> str:
        return f"Message({self._topic}-{self._partition}@{self._offset}, error={self._error})"
