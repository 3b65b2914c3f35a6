"""Share-group membership (ShareGroupHeartbeat, on the group's coordinator): the groups, their members'
session timers, and their records in the group's ``__consumer_offsets`` partition."""

from __future__ import annotations

import asyncio
import uuid

from grete.broker.config import BrokerConfig
from grete.broker.groups.share_sessions import INITIAL_EPOCH
from grete.broker.groups.share_settings import ShareSettings
from grete.coordinator.groups.group import GroupCoordinator
from grete.coordinator.groups.group_store import Record
from grete.coordinator.metadata import MetadataStore
from grete.coordinator.share import share_records
from grete.coordinator.share.share_group import HeartbeatResult, ShareGroup, TopicView
from grete.protocol.errors import ErrorCode


class ShareMembership:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore, settings: ShareSettings) -> None:
        self.config = config
        self.metadata = metadata
        self.settings = settings
        self.coordinator: GroupCoordinator | None = None  # where membership is kept (``attach``)
        self.groups: dict[str, ShareGroup] = {}
        self._member_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}

    def cancel_timers(self) -> None:
        for timer in self._member_timers.values():
            timer.cancel()
        self._member_timers.clear()

    def topic_view(self, names: set[str]) -> TopicView:
        view: dict[str, tuple[uuid.UUID, int]] = {}
        for name in names:
            meta = self.metadata.topic(name)
            if meta is not None:
                view[name] = (meta.topic_id, len(meta.partitions))
        return view

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, rack_id: str | None,
                  subscribed: list[str] | None, client_id: str, client_host: str) -> HeartbeatResult:
        group = self.groups.get(group_id)
        if group is None:
            if member_epoch != INITIAL_EPOCH:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                       f"Member {member_id} is not a member of group {group_id}.")
            group = self.groups[group_id] = ShareGroup(group_id)
        names = group.subscribed_topics() | set(subscribed or ())
        result = group.heartbeat(member_id, member_epoch, rack_id=rack_id, subscribed=subscribed,
                                 client_id=client_id, client_host=client_host, topics=self.topic_view(names),
                                 max_size=self.config.get_int("group.share.max.size"))
        if result.error == ErrorCode.NONE and member_epoch == -1:
            self._member_gone(group_id, member_id)
        elif result.error == ErrorCode.NONE:
            self._arm_session_timer(group_id, member_id)
        return result

    def attach(self, coordinator: GroupCoordinator) -> None:
        """A share group lives with its group coordinator, as Kafka's does: its records are written
        to the group's ``__consumer_offsets`` partition, it is rebuilt when that partition is
        loaded here, and dropped here when the partition moves away."""
        self.coordinator = coordinator
        coordinator.hand_over(self.loaded, self.unloaded)

    def loaded(self, partition: int, records: list[Record]) -> None:
        for group_id, group in share_records.load(records).items():
            self.groups[group_id] = group
            for member_id in group.members:  # restored members must go on heartbeating
                self._arm_session_timer(group_id, member_id)

    def unloaded(self, partition: int) -> None:
        """Membership only: this broker's share partitions and sessions serve on (their members
        heartbeat to the new coordinator)."""
        coordinator = self.coordinator
        assert coordinator is not None
        for group_id in [g for g in self.groups if coordinator.partition_for(g) == partition]:
            for member_id in self.groups.pop(group_id).members:
                timer = self._member_timers.pop((group_id, member_id), None)
                if timer is not None:
                    timer.cancel()

    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        """NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ... for a group not served here (yet)."""
        return self.coordinator.status_error(group_id) if self.coordinator is not None else None

    async def write_membership(self, group_id: str) -> ErrorCode:
        """Write what changed in the group; the answer to the request that changed it waits for this,
        and the write finishes even if that request's client goes away."""
        coordinator = self.coordinator
        if coordinator is None:
            return ErrorCode.NONE
        group = self.groups.get(group_id)
        return await self.append(group_id, share_records.changes(group) if group is not None else [])

    async def append(self, group_id: str, records: list[Record]) -> ErrorCode:
        coordinator = self.coordinator
        assert coordinator is not None
        return await coordinator.detached(coordinator.append_in_order(coordinator.partition_for(group_id), records))

    def _arm_session_timer(self, group_id: str, member_id: str) -> None:
        key = (group_id, member_id)
        old = self._member_timers.pop(key, None)
        if old is not None:
            old.cancel()
        delay = self.settings.session_timeout_ms(group_id) / 1000
        self._member_timers[key] = asyncio.get_running_loop().call_later(delay, self._session_expired, group_id,
                                                                          member_id)

    def _session_expired(self, group_id: str, member_id: str) -> None:
        self._member_timers.pop((group_id, member_id), None)
        group = self.groups.get(group_id)
        if group is not None and group.remove(member_id) is not None:
            self._member_gone(group_id, member_id)
            if self.coordinator is not None:
                self.coordinator.spawn(self.write_membership(group_id))

    def _member_gone(self, group_id: str, member_id: str) -> None:
        """A member that left or timed out. Its share sessions live on, as Kafka's share-partition
        leaders keep them (they never hear of membership): a closing consumer's final
        ShareAcknowledge may arrive after its leaving heartbeat and must still be applied. What it
        holds goes back when its session ends (final epoch, its connection closing) or its
        acquisition locks time out."""
        timer = self._member_timers.pop((group_id, member_id), None)
        if timer is not None:
            timer.cancel()

    def holds(self, group_id: str) -> bool:
        """Whether a share group has this id: the classic and consumer protocols' APIs refuse it."""
        return group_id in self.groups

    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)
