"""Shared machinery of the group coordinator: configuration, the group table, availability checks,
timers, background tasks and writes to ``__consumer_offsets`` with Kafka's error mapping.

``GroupCoordinator`` is this state plus two parts that hold a reference to it (composition, not
inheritance): ``group_membership.Membership`` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the
rebalance state machine) and ``group_offsets.Offsets`` (OffsetCommit, OffsetFetch, OffsetDelete,
DeleteGroups, retention). A part reaches the state as ``self.core`` and the other part by name.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from grete.coordinator.group_state import Group, GroupState
from grete.coordinator.group_store import OffsetsStore, Record
from grete.coordinator.group_types import GroupConfig
from grete.coordinator.offsets_format import (
    GroupValue,
    MemberValue,
    encode_group_key,
    encode_group_value,
    partition_for,
)
from grete.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("grete.coordinator")

T = TypeVar("T")

# How Kafka reports a failed write of group metadata (GroupMetadataManager.storeGroup).
_GROUP_WRITE_ERRORS: dict[ErrorCode, ErrorCode] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}

# ... and of offsets (GroupMetadataManager.storeOffsets).
OFFSET_WRITE_ERRORS: dict[ErrorCode, ErrorCode] = {
    **_GROUP_WRITE_ERRORS,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class CoordinatorBase:
    def __init__(self, config: GroupConfig, store: OffsetsStore, *,
                 now_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.config = config
        self.store = store
        self.now_ms = now_ms
        self.groups: dict[str, Group] = {}
        self._active = False
        self._loading = False
        # Kafka's GroupMetadataManager: the __consumer_offsets partitions this coordinator serves,
        # and those it was elected for and is still loading.
        self.owned_partitions: set[int] = set()
        self.loading_partitions: set[int] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------------ availability

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition that holds this group, exactly as Kafka picks it."""
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    def availability_error(self) -> ErrorCode:
        """NONE, or the code every group API answers right now (ListGroups uses it as is): a
        partition still loading makes ListGroups incomplete, as in Kafka."""
        if self._loading or self.loading_partitions:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if not self._active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    def status_error(self, group_id: str | None, *, allow_empty_id: bool = False) -> ErrorCode | None:
        """Kafka's validateGroupStatus. OffsetCommit, OffsetFetch, DescribeGroups and DeleteGroups
        accept the empty group id for backwards compatibility; the membership APIs do not. A group
        whose partition is loading gets COORDINATOR_LOAD_IN_PROGRESS, one whose partition is not
        served here NOT_COORDINATOR."""
        if group_id is None or (not group_id and not allow_empty_id):
            return ErrorCode.INVALID_GROUP_ID
        if not self._active and not self.loading_partitions:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        partition = self.partition_for(group_id)
        if partition in self.loading_partitions:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned_partitions:
            return ErrorCode.NOT_COORDINATOR
        return None

    def new_group(self, group_id: str) -> Group:
        group = Group(group_id, GroupState.EMPTY, self.now_ms())
        self.groups[group_id] = group
        return group

    def live_group(self, group: Group) -> bool:
        """False once the group was deleted or unloaded (a timer may still fire for it)."""
        return self.groups.get(group.group_id) is group and not group.is_(GroupState.DEAD)

    # ------------------------------------------------------------------- timers and tasks

    def call_later(self, delay_ms: int, callback: Callable[..., None], *args: Any) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000, callback, *args)

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run a write in the background (from a timer callback); shutdown() waits for it."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def detached(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await a state change that must finish even if the calling handler is cancelled (its client
        went away): a write half-applied to memory would leave the group stuck."""
        return await asyncio.shield(self.spawn(coro))

    async def drain_tasks(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --------------------------------------------------------------------------- writing

    def store_group(self, group: Group, assignment: dict[str, bytes]) -> Awaitable[ErrorCode]:
        """Write the group's metadata record. The record is built NOW (not when awaited), so it is
        a consistent snapshot even if the caller only awaits it later."""
        record = (encode_group_key(group.group_id), encode_group_value(self._group_value(group, assignment)))
        return self.append(self.partition_for(group.group_id), [record], _GROUP_WRITE_ERRORS)

    def _group_value(self, group: Group, assignment: dict[str, bytes]) -> GroupValue:
        protocol = group.protocol_name
        members = tuple(
            MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                        m.session_timeout_ms, m.metadata_or_empty(protocol),
                        assignment.get(m.member_id, b""))
            for m in group.members.values())
        return GroupValue(group.protocol_type or "", group.generation_id, protocol, group.leader_id,
                          group.state_timestamp_ms, members)

    async def append(self, partition: int, records: list[Record],
                     error_map: dict[ErrorCode, ErrorCode]) -> ErrorCode:
        try:
            await self.store.append(partition, records)
        except KafkaError as exc:
            log.warning("write to __consumer_offsets-%d failed: %s", partition, exc)
            return error_map.get(exc.code, exc.code)
        except Exception:
            # A failed local write is the broker's trouble, not the client's: answer with a
            # retriable code rather than UNKNOWN_SERVER_ERROR.
            log.exception("write to __consumer_offsets-%d failed", partition)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE


def cancel(handle: asyncio.TimerHandle | None) -> None:
    if handle is not None:
        handle.cancel()
