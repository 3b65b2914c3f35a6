"""A partition this broker leads: its log plus the state replication needs from day one.

The partition owns its leader epoch, high watermark, log start offset and last stable offset (the
last two live in the storage ``Log``). On a single node the ISR is this broker alone, so the high
watermark follows the log end offset as soon as an append returns. Long-poll fetches park a future
here; an append (or a DeleteRecords, or the partition going away) wakes them — no polling.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

from grete.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from grete.protocol.records.batch import RecordBatch
    from grete.storage.log import Log


class Partition:
    __slots__ = ("topic", "index", "topic_id", "log", "leader_epoch", "_waiters", "online")

    def __init__(self, topic: str, index: int, topic_id: uuid.UUID, log: Log, leader_epoch: int) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.leader_epoch = leader_epoch
        self._waiters: list[asyncio.Future[None]] = []
        self.online = True
        if log.end_offset_for_epoch(leader_epoch)[0] != leader_epoch:
            log.assign_leader_epoch(leader_epoch, log.log_end_offset)
        # The only replica holds everything in its log: the high watermark is the log end at once.
        # (The checkpointed value lags after a crash; left there, reads and coordinator loads would
        # stop short of data that was acknowledged, including offset commits and transaction state.)
        log.high_watermark = log.log_end_offset

    # --- offsets -----------------------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        return int(self.log.high_watermark)

    @property
    def log_start_offset(self) -> int:
        return int(self.log.log_start_offset)

    @property
    def log_end_offset(self) -> int:
        return int(self.log.log_end_offset)

    @property
    def last_stable_offset(self) -> int:
        return int(self.log.last_stable_offset)

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Fetch/ListOffsets/OffsetForLeaderEpoch fencing (KIP-320); -1 means the client has none."""
        if current_leader_epoch == -1 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    # --- writes ------------------------------------------------------------------------------
    def append(self, batch: RecordBatch, now_ms: int) -> Any:
        if not self.online:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{self.topic}-{self.index} is offline")
        result = self.log.append(batch, leader_epoch=self.leader_epoch, now_ms=now_ms)
        self.advance_high_watermark()
        return result

    def advance_high_watermark(self) -> None:
        """Single replica: everything appended is replicated. Wakes parked fetches."""
        self.log.high_watermark = self.log.log_end_offset
        self.wake()

    # --- parked fetches ----------------------------------------------------------------------
    def waiter(self) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        return future

    def wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for future in waiters:
                if not future.done():
                    future.set_result(None)

    def discard_waiter(self, future: asyncio.Future[None]) -> None:
        try:
            self._waiters.remove(future)
        except ValueError:
            pass
