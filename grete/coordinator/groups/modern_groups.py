"""What the consumer-group (KIP-848) and streams-group (KIP-1071) coordinators share: the frame of a
heartbeat, a member joining (dynamic or static) or known and its epoch check, leaving, removal, the
session and rebalance timers, the offset-fetch epoch check and describe (Kafka's GroupMetadataManager
does these the same way for both kinds). Each kind says what differs through the hooks below: its
state, its member, what its requests carry and how it answers.

Everything happens within one call on the event loop, so each group has one owner; an answer waits
for the records of what changed (``persist``), written in the order the changes were made.
"""

from __future__ import annotations

import functools
from enum import IntEnum
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from grete.coordinator.groups.coordinator_records import Record
from grete.coordinator.groups.group_context import (
    GROUP_WRITE_ERRORS,
    GroupContext,
    arm_member_timers,
    cancel,
    log,
)
from grete.coordinator.groups.group_state import Group, GroupState
from grete.coordinator.groups.modern_state import (
    JOIN_EPOCH,
    REVOKING,
    STATIC_LEAVE_EPOCH,
    GroupRequestError,
    ModernGroupState,
    ModernMember,
)
from grete.coordinator.groups.offsets_format import encode_group_key
from grete.protocol.errors import ErrorCode


class MemberRequest(Protocol):
    """What every kind's heartbeat carries about the member sending it."""

    @property
    def group_id(self) -> str: ...
    @property
    def member_id(self) -> str: ...
    @property
    def member_epoch(self) -> int: ...
    @property
    def instance_id(self) -> str | None: ...


S = TypeVar("S", bound=ModernGroupState[Any, Any])
M = TypeVar("M", bound=ModernMember[Any])
Q = TypeVar("Q", bound=MemberRequest)
R = TypeVar("R")


class ModernGroups(Generic[S, M, Q, R]):
    """One kind of modern group over the shared ``GroupContext``."""

    kind: ClassVar[str]  # "consumer" or "streams", as Kafka's messages name the kind
    held: ClassVar[str]  # what a member holds: "partitions" or "tasks"
    session_key: ClassVar[str]  # the group config overriding the session timeout
    heartbeat_key: ClassVar[str]  # the group config overriding the heartbeat interval
    stable: ClassVar[IntEnum]  # the kind's MemberState.STABLE
    # Kafka's consumer groups refuse a heartbeat naming an instance id the group does not know.
    unknown_instance_refused: ClassVar[bool] = False

    def __init__(self, ctx: GroupContext) -> None:
        self.ctx = ctx

    # =============================================================== what each kind says

    def _state(self, group: Group) -> S | None:
        raise NotImplementedError

    def _enabled(self) -> bool:
        """Whether group.coordinator.rebalance.protocols names this kind."""
        raise NotImplementedError

    def _answer(self, error: ErrorCode, message: str | None = None) -> R:
        raise NotImplementedError

    def _validate(self, req: Q) -> None:
        raise NotImplementedError

    def _beat(self, req: Q) -> R:
        """The heartbeat proper, once validated and the coordinator ready."""
        raise NotImplementedError

    def _changes(self, state: S) -> list[Record]:
        """The records of what changed in the group since the last call."""
        raise NotImplementedError

    def _new_member(self, member_id: str, req: Q) -> M:
        raise NotImplementedError

    def replace_static(self, state: S, old: M, member_id: str) -> M:
        raise NotImplementedError

    def _max_size(self) -> int:
        raise NotImplementedError

    def _reported(self, req: Q) -> frozenset[Any] | None:
        """What the member says it holds (None: not said)."""
        raise NotImplementedError

    def _defaults(self) -> tuple[int, int]:
        """The broker's session timeout and heartbeat interval for this kind."""
        raise NotImplementedError

    def _left(self, member: M, req: Q) -> R:
        raise NotImplementedError

    def _removed(self, group: Group, state: S, member: M) -> None:
        """After a member was removed, what else this kind updates."""

    def _revoking(self, member: M) -> bool:
        return member.state == REVOKING

    def _loaded_session_ms(self, group: Group, member: M) -> int:
        return self.session_timeout_ms(group.group_id)

    # ====================================================================== configuration

    def _setting(self, group_id: str, key: str, default: int) -> int:
        value = self.ctx.group_overrides(group_id).get(key)
        return int(value) if value is not None else default

    def session_timeout_ms(self, group_id: str) -> int:
        return self._setting(group_id, self.session_key, self._defaults()[0])

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self._setting(group_id, self.heartbeat_key, self._defaults()[1])

    # ========================================================================== heartbeat

    async def heartbeat(self, req: Q) -> R:
        """The state changes at once; the answer waits until the records saying so are written (a
        failed write answers with Kafka's mapping of the log's error)."""
        if not self._enabled():
            return self._answer(ErrorCode.UNSUPPORTED_VERSION,
                                f"The {self.kind} protocol is not in group.coordinator.rebalance.protocols.")
        try:
            self._validate(req)
            status = self.ctx.status_error(req.group_id)
            if status is not None:
                return self._answer(status)
            result = self._beat(req)
        except GroupRequestError as exc:
            return self._answer(exc.error, exc.message)
        error = await self.ctx.detached(self.persist(req.group_id))
        return result if error is ErrorCode.NONE else self._answer(error)

    async def persist(self, group_id: str) -> ErrorCode:
        """Append the group's changed records, in the order the changes were made: each write waits
        for the one before it on the same partition."""
        group = self.ctx.groups.get(group_id)
        state = self._state(group) if group is not None else None
        records = self._changes(state) if state is not None else []
        return await self.ctx.append_in_order(self.ctx.partition_for(group_id), records)

    def _take_empty_classic(self, group_id: str) -> None:
        """An empty classic group (offsets only) becomes this kind; its classic record goes, so a
        restart cannot bring the classic group back."""
        self.ctx.spawn(self.ctx.append(self.ctx.partition_for(group_id),
                                       [(encode_group_key(group_id), None)], GROUP_WRITE_ERRORS))

    def _join(self, state: S, member_id: str, req: Q) -> tuple[M, bool]:
        """The joining member (epoch 0) and whether it is new (a new group epoch)."""
        if req.instance_id is not None:
            owner_id = state.static_members.get(req.instance_id)
            if owner_id is not None and owner_id != member_id:
                old = state.members[owner_id]
                if old.member_epoch != STATIC_LEAVE_EPOCH:
                    raise GroupRequestError(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        f"Static member {member_id} with instance id {req.instance_id} cannot join the group "
                        f"because the instance id is owned by {owner_id} member.")
                return self.replace_static(state, old, member_id), False
        member: M | None = state.members.get(member_id)
        if member is not None:
            # A known member rejoining holds nothing now (its heartbeat says so): start it over.
            state.release(member)
            member.member_epoch, member.state = JOIN_EPOCH, self.stable
            return member, False
        limit = self._max_size()
        if len(state.members) >= limit:
            raise GroupRequestError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                    f"The {self.kind} group has reached its maximum capacity of {limit} members.")
        member = self._new_member(member_id, req)
        state.members[member_id] = member
        if req.instance_id is not None:
            state.static_members[req.instance_id] = member_id
        return member, True

    def _known_member(self, state: S, req: Q) -> M:
        if req.instance_id is not None:
            owner_id = state.static_members.get(req.instance_id)
            if owner_id is None and self.unknown_instance_refused:
                raise GroupRequestError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
            if owner_id is not None and owner_id != req.member_id:
                raise GroupRequestError(ErrorCode.FENCED_INSTANCE_ID,
                                        f"Static member {req.member_id} with instance id {req.instance_id} was "
                                        f"fenced by member {owner_id}.")
        member: M | None = state.members.get(req.member_id)
        if member is None:
            raise GroupRequestError(ErrorCode.UNKNOWN_MEMBER_ID,
                                    f"Member {req.member_id} is not a member of group {state.group_id}.")
        self._check_epoch(member, req)
        return member

    def _check_epoch(self, member: M, req: Q) -> None:
        """Kafka's throwIf...MemberEpochIsInvalid: an older epoch passes only if it is the previous
        one and the member holds no more than it is assigned (its last answer was lost)."""
        received, known = req.member_epoch, member.member_epoch
        reported = self._reported(req)
        if received > known:
            relation = "greater"
        elif received < known and (received != member.previous_member_epoch or reported is None
                                   or not reported <= member.assigned):
            relation = "smaller"
        else:
            return
        raise GroupRequestError(ErrorCode.FENCED_MEMBER_EPOCH,
                                f"The {self.kind} group member has a {relation} member epoch ({received}) than the "
                                f"one known by the group coordinator ({known}). The member must abandon all its "
                                "partitions and rejoin.")

    # ============================================================================= leaving

    def _leave(self, group: Group, state: S, req: Q) -> R:
        member: M | None = state.members.get(req.member_id)
        if member is None:
            raise GroupRequestError(ErrorCode.UNKNOWN_MEMBER_ID,
                                    f"Member {req.member_id} is not a member of group {state.group_id}.")
        if req.instance_id is not None and state.static_members.get(req.instance_id) != member.member_id:
            raise GroupRequestError(ErrorCode.FENCED_INSTANCE_ID,
                                    f"Static member {req.member_id} with instance id {req.instance_id} was fenced "
                                    f"by member {state.static_members.get(req.instance_id)}.")
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # Gone for now, back soon: it keeps what it holds and nothing is rebalanced; the session
            # timer removes it if it does not come back in time.
            member.member_epoch = STATIC_LEAVE_EPOCH
            state.dirty.add(member.member_id)
            cancel(member.rebalance_timer)
            member.rebalance_timer = None
        else:
            self.remove_member(group, member, "the member left the group")
        return self._left(member, req)

    def remove_member(self, group: Group, member: M, reason: str) -> None:
        """Fence or remove a member: what it held is free and the group epoch rises."""
        state = self._state(group)
        if state is None or state.members.get(member.member_id) is not member:
            return
        log.info("%s group %s: removing member %s (%s)", self.kind, state.group_id, member.member_id, reason)
        self._drop(state, member)
        state.target.pop(member.member_id, None)
        state.group_epoch += 1
        state.dirty.add(member.member_id)
        self._removed(group, state, member)

    def _drop(self, state: S, member: M) -> None:
        self._cancel_timers(member)
        state.release(member)
        del state.members[member.member_id]
        if member.instance_id is not None and state.static_members.get(member.instance_id) == member.member_id:
            del state.static_members[member.instance_id]

    def _cancel_timers(self, member: M) -> None:
        cancel(member.session_timer)
        cancel(member.rebalance_timer)
        member.session_timer = member.rebalance_timer = None

    # ============================================================================== timers

    def _arm_timers(self, group: Group, member: M) -> None:
        arm_member_timers(self.ctx, member, self.session_timeout_ms(group.group_id), self._revoking(member),
                          functools.partial(self._expire, group, member), f"did not revoke {self.held} in time")

    def _expire(self, group: Group, member: M, reason: str) -> None:
        if self.ctx.live_group(group):
            self.remove_member(group, member, reason)
            self.ctx.spawn(self.persist(group.group_id))

    def arm_loaded(self, groups: list[Group]) -> None:
        """Groups just loaded from the log: their members' sessions start now (Kafka does the same),
        so members that did not survive the restart are removed in time."""
        for group in groups:
            state = self._state(group)
            for member in state.members.values() if state is not None else ():
                if member.session_timer is None:
                    member.session_timer = self.ctx.call_later(self._loaded_session_ms(group, member),
                                                               self._expire, group, member, "session timeout")

    # ============================================================================= offsets

    def validate_fetch(self, group: Group, member_id: str | None, epoch: int) -> ErrorCode | None:
        """OffsetFetch v9+: a member fetching must be one, at its current epoch."""
        state = self._state(group)
        if state is None or (member_id is None and epoch < 0):
            return None
        member = state.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.STALE_MEMBER_EPOCH if epoch != member.member_epoch else None

    # ============================================================================ describe

    def describe(self, group_id: str) -> tuple[ErrorCode, str | None, S | None]:
        """Describe of one group of this kind: a group of another kind is not found here, as in Kafka
        (the admin client then falls back to DescribeGroups for a classic group)."""
        error = self.ctx.status_error(group_id)
        if error is not None:
            return error, None, None
        group = self.ctx.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        state = self._state(group)
        if state is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a {self.kind} group.", None
        return ErrorCode.NONE, None, state
