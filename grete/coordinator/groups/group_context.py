"""What the parts of the group coordinator share: configuration, the clock, the store, the group table,
which ``__consumer_offsets`` partitions are served here, timers, background tasks, and writes to the
log with Kafka's error mapping.

``GroupCoordinator`` (``group.py``) is a facade over parts that each hold one ``GroupContext``:
``Membership`` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the rebalance state machine),
``Offsets`` (OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups, retention) and
``GroupPartitions`` (loading and unloading partitions: Kafka's onElection / onResignation).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Protocol, TypeVar, TypeVarTuple

from grete.coordinator.groups.consumer_assignors import TopicView
from grete.coordinator.groups.group_state import Group, GroupState
from grete.coordinator.groups.group_store import OffsetsStore, Record
from grete.coordinator.groups.group_types import GroupConfig
from grete.coordinator.groups.offsets_format import (
    GroupValue,
    MemberValue,
    encode_group_key,
    encode_group_value,
    partition_for,
)
from grete.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("grete.coordinator")

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

# How Kafka reports a failed write of group metadata (GroupMetadataManager.storeGroup).
GROUP_WRITE_ERRORS: dict[ErrorCode, ErrorCode] = {
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
    **GROUP_WRITE_ERRORS,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


def _no_overrides(group_id: str) -> Mapping[str, str]:
    return {}


def _ignore_loaded(partition: int, records: list[Record]) -> None:
    return None


def _ignore_unloaded(partition: int) -> None:
    return None


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def cancel(handle: asyncio.TimerHandle | None) -> None:
    if handle is not None:
        handle.cancel()


class TimedMember(Protocol):
    """A member of a heartbeat-driven group (KIP-848 consumer, KIP-1071 streams)."""

    session_timer: asyncio.TimerHandle | None
    rebalance_timer: asyncio.TimerHandle | None
    rebalance_timeout_ms: int


def arm_member_timers(ctx: GroupContext, member: TimedMember, session_ms: int, revoking: bool,
                      expire: Callable[[str], object], revoke_reason: str) -> None:
    """Kafka's two timers of a heartbeat-driven member: the session, restarted by every heartbeat,
    and the rebalance timeout, running from when the member is asked to give something up until it
    has (``revoking``)."""
    cancel(member.session_timer)
    member.session_timer = ctx.call_later(session_ms, expire, "session timeout")
    if revoking:
        if member.rebalance_timer is None:
            member.rebalance_timer = ctx.call_later(member.rebalance_timeout_ms, expire, revoke_reason)
    else:
        cancel(member.rebalance_timer)
        member.rebalance_timer = None


class GroupContext:
    def __init__(self, config: GroupConfig, store: OffsetsStore, now_ms: Callable[[], int]) -> None:
        self.config = config
        self.store = store
        self.now_ms = now_ms
        self.groups: dict[str, Group] = {}
        # Kafka's isActive: set at start-up (the first election, or load()), cleared by shutdown.
        self.active = False
        # Kafka's GroupMetadataManager: the __consumer_offsets partitions this coordinator serves,
        # those it was elected for and is still loading, and the leader epoch each was loaded in.
        self.owned_partitions: set[int] = set()
        self.loading_partitions: set[int] = set()
        self.partition_epochs: dict[int, int] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        # What KIP-848 groups see of the cluster: the topics (name -> id, partition count), and a
        # group's configs (ConfigResource GROUP overrides such as consumer.session.timeout.ms). The
        # broker sets both; the defaults suit tests of the classic protocol.
        self.topic_view: Callable[[], TopicView] = dict
        self.group_overrides: Callable[[str], Mapping[str, str]] = _no_overrides
        # Records of the partition kept by another owner (share groups, grete.broker.groups.share_groups):
        # handed over when a partition is loaded, and the partition named when it is unloaded.
        self.on_loaded: Callable[[int, list[Record]], None] = _ignore_loaded
        self.on_unloaded: Callable[[int], None] = _ignore_unloaded
        self._writes: dict[int, asyncio.Future[None]] = {}  # partition -> the last write under way

    # ------------------------------------------------------------------------ availability

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition that holds this group, exactly as Kafka picks it."""
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    def availability_error(self) -> ErrorCode:
        """Kafka's ListGroups answer: COORDINATOR_NOT_AVAILABLE unless started, LOAD_IN_PROGRESS while
        any partition loads (the listing may be incomplete then), else NONE."""
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.loading_partitions:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    def status_error(self, group_id: str | None, *, allow_empty_id: bool = False) -> ErrorCode | None:
        """Kafka's validateGroupStatus. OffsetCommit, OffsetFetch, DescribeGroups and DeleteGroups
        accept the empty group id for backwards compatibility; the membership APIs do not. Then, in
        Kafka's order: COORDINATOR_NOT_AVAILABLE before start-up and after shutdown, NOT_COORDINATOR
        for a group whose partition is neither served nor loading here, COORDINATOR_LOAD_IN_PROGRESS
        while it loads."""
        if group_id is None or (not group_id and not allow_empty_id):
            return ErrorCode.INVALID_GROUP_ID
        if not self.active:
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

    def groups_in(self, partition: int) -> list[Group]:
        return [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]

    # ------------------------------------------------------------------- timers and tasks

    def call_later(self, delay_ms: int, callback: Callable[[*Ts], object], *args: *Ts) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000, callback, *args)

    def spawn(self, coro: Coroutine[object, None, T]) -> asyncio.Task[T]:
        """Run a write in the background (from a timer callback); shutdown() waits for it."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def detached(self, coro: Coroutine[object, None, T]) -> T:
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
        return self.append(self.partition_for(group.group_id), [record], GROUP_WRITE_ERRORS)

    @staticmethod
    def _group_value(group: Group, assignment: dict[str, bytes]) -> GroupValue:
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

    async def append_in_order(self, partition: int, records: list[Record]) -> ErrorCode:
        """Append a group's changed records after every write to the partition begun before this
        one, so the log has the changes in the order they were made. Nothing to write: answer once
        the earlier writes are done (one of them may carry this change)."""
        previous = self._writes.get(partition)
        if not records:
            if previous is not None:
                await previous
            return ErrorCode.NONE
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._writes[partition] = done
        try:
            if previous is not None:
                await previous
            return await self.append(partition, records, GROUP_WRITE_ERRORS)
        finally:
            done.set_result(None)
            if self._writes.get(partition) is done:
                del self._writes[partition]

    async def append_txn(self, partition: int, records: list[Record], producer_id: int,
                         producer_epoch: int) -> ErrorCode:
        try:
            await self.store.append_txn(partition, records, producer_id, producer_epoch)
        except KafkaError as exc:
            log.warning("transactional write to __consumer_offsets-%d failed: %s", partition, exc)
            return OFFSET_WRITE_ERRORS.get(exc.code, exc.code)
        except Exception:
            log.exception("transactional write to __consumer_offsets-%d failed", partition)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE
