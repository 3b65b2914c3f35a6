"""Partition logs stored byte-for-byte the way Kafka stores them (see docs/storage.md)."""

from grete.storage.config import LogConfig
from grete.storage.failure import KafkaStorageException
from grete.storage.loader import LogOffline
from grete.storage.log import AppendResult, FileSlice, Log, ReadResult
from grete.storage.manager import LogManager

__all__ = ["AppendResult", "FileSlice", "KafkaStorageException", "Log", "LogConfig", "LogManager", "LogOffline",
           "ReadResult"]
