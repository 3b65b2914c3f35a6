"""What ConsumerGroupHeartbeat carries in and out, its validation (Kafka's
throwIfConsumerGroupHeartbeatRequestIsInvalid, with Kafka 4.3.1's messages), regexes as RE2J takes
them, and the member-epoch check of offset commits."""

from __future__ import annotations

import base64
import re
import uuid
from dataclasses import dataclass

from grete.coordinator.groups.consumer_assignors import Assignment
from grete.coordinator.groups.consumer_state import ConsumerGroup
from grete.coordinator.groups.modern_state import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    GroupRequestError,
    check_identity,
    invalid_request,
)
from grete.protocol.errors import ErrorCode

CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeat:
    """A ConsumerGroupHeartbeat request, decoded (None: unchanged since the last heartbeat)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: list[str] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    owned: Assignment | None
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


_LOOKAROUNDS = ("(?=", "(?!", "(?<=", "(?<!")
# Python's wording -> RE2J's, for the mistakes users make most.
_RE2J_WORDING = {"unterminated character set": "missing closing ]",
                 "missing ), unterminated subpattern": "missing closing )",
                 "unbalanced parenthesis": "unexpected )"}


def regex_problem(pattern: str) -> str | None:
    """Why RE2J would refuse ``pattern`` (Kafka compiles regexes with it), or None. RE2 has no
    look-arounds and no back-references, which Python's ``re`` would accept."""
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if not in_class and pattern[i + 1:i + 2] in tuple("123456789"):
                return "invalid escape sequence"
            i += 2
            continue
        if c == "[":
            in_class = True
        elif c == "]":
            in_class = False
        elif not in_class and pattern.startswith(_LOOKAROUNDS, i):
            return "invalid or unsupported Perl syntax"
        i += 1
    try:
        re.compile(pattern)
    except re.error as exc:
        return _RE2J_WORDING.get(exc.msg, exc.msg)
    return None


def full_match(pattern: str, name: str) -> bool:
    """RE2J's ``matches``: the whole topic name must match."""
    return re.fullmatch(pattern, name) is not None


def new_member_id() -> str:
    """What Kafka's clients generate (a random UUID, URL-safe base64 without padding)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def validate_commit(cg: ConsumerGroup, member_id: str, epoch: int, api_version: int | None,
                    transactional: bool = False) -> ErrorCode | None:
    """ConsumerGroup.validateOffsetCommit: a negative epoch commits as an admin only while the
    group has no members; otherwise the member's current epoch, over OffsetCommit v9+ (a member
    using the classic protocol commits with its generation, any version: ILLEGAL_GENERATION)."""
    if epoch < 0 and not cg.members:
        return None
    member = cg.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    classic = member.classic is not None
    if not transactional and not classic and api_version is not None and api_version < 9:
        return ErrorCode.UNSUPPORTED_VERSION
    if epoch != member.member_epoch:
        return ErrorCode.ILLEGAL_GENERATION if transactional or classic else ErrorCode.STALE_MEMBER_EPOCH
    return None


def validate_request(req: ConsumerHeartbeat, assignors: tuple[str, ...]) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, with its messages."""
    check_identity(req.group_id, req.instance_id, req.rack_id)
    if req.version >= 1 and not req.member_id:
        raise invalid_request("MemberId can't be empty.")
    epoch = req.member_epoch
    if epoch > 0 or epoch == LEAVE_EPOCH:
        if not req.member_id:
            raise invalid_request("MemberId can't be empty.")
    elif epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise invalid_request("RebalanceTimeoutMs must be provided in first request.")
        if req.owned is None or req.owned:
            raise invalid_request("TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise invalid_request("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                          "(re-)joining.")
    elif epoch == STATIC_LEAVE_EPOCH:
        if not req.member_id:
            raise invalid_request("MemberId can't be empty.")
        if req.instance_id is None:
            raise invalid_request("InstanceId can't be null.")
    else:
        raise invalid_request("MemberEpoch is invalid.")
    if req.server_assignor is not None and req.server_assignor not in assignors:
        raise GroupRequestError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                             f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                             f"{', '.join(assignors)}.")
    if req.subscribed_topic_regex:
        problem = regex_problem(req.subscribed_topic_regex)
        if problem is not None:
            raise GroupRequestError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                                 f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid "
                                 f"regular expression: {problem}.")
