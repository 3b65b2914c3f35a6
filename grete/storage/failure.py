"""Log-directory failures (Kafka's JBOD model, KIP-112): each directory of ``log.dirs`` fails alone.

An OSError from any storage operation takes the whole directory offline, once; from then on
its logs answer every call with ``KafkaStorageException`` (KAFKA_STORAGE_ERROR, 56) without
touching the disk, while the other directories go on serving.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from grete.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# (log dir, the error, partitions it held) -> None
OfflineListener = Callable[[Path, BaseException, list[TopicPartition]], None]


class KafkaStorageException(KafkaError):
    """A storage operation failed, or its log directory is offline. Maps to KAFKA_STORAGE_ERROR."""

    def __init__(self, log_dir: Path, partition: TopicPartition | None, message: str) -> None:
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, message)
        self.log_dir = log_dir
        self.partition = partition


def offline_error(log_dir: Path, partition: TopicPartition | None, cause: str) -> KafkaStorageException:
    where = f" for {partition[0]}-{partition[1]}" if partition is not None else ""
    return KafkaStorageException(log_dir, partition, f"log dir {log_dir} is offline{where}: {cause}")


class LogDirFailureChannel:
    """Which log dirs are offline, and why (Kafka's LogDirFailureChannel).

    ``mark_offline`` is safe from any thread and returns True only for the first failure of a
    directory: the caller that wins announces it (one log line, the listeners), every later
    failure in the same directory is already covered.
    """

    def __init__(self) -> None:
        self._offline: dict[Path, str] = {}
        self._lock = threading.Lock()
        self.listeners: list[OfflineListener] = []
        # Failures seen on storage threads (flusher, cleaner) wait here for the owner's thread.
        self._pending: list[tuple[Path, BaseException, list[TopicPartition]]] = []
        self.owner = threading.get_ident()

    def announce(self, log_dir: Path, error: BaseException, partitions: list[TopicPartition]) -> None:
        """Tell the listeners, on the owner's thread: now if this is it, else at deliver()."""
        if threading.get_ident() != self.owner:
            with self._lock:
                self._pending.append((log_dir, error, partitions))
            return
        self._notify(log_dir, error, partitions)

    def deliver(self) -> None:
        """Announce failures that storage threads saw (called from the owner's periodic work)."""
        with self._lock:
            pending, self._pending = self._pending, []
        for notice in pending:
            self._notify(*notice)

    def _notify(self, log_dir: Path, error: BaseException, partitions: list[TopicPartition]) -> None:
        for listener in list(self.listeners):
            try:
                listener(log_dir, error, partitions)
            except Exception:  # one broken listener must not hide the failure from the others
                log.exception("log dir failure listener %r failed", listener)

    def mark_offline(self, log_dir: Path, error: BaseException) -> bool:
        with self._lock:
            if log_dir in self._offline:
                return False
            self._offline[log_dir] = describe(error)
            return True

    def is_offline(self, log_dir: Path) -> bool:
        return log_dir in self._offline

    def reason(self, log_dir: Path) -> str | None:
        return self._offline.get(log_dir)

    @property
    def offline_dirs(self) -> dict[Path, str]:
        with self._lock:
            return dict(self._offline)


def describe(error: BaseException) -> str:
    """One line for a log: '[Errno 28] No space left on device: <path>' or the error's text."""
    return str(error) or type(error).__name__

