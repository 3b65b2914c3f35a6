"""Fetch sessions (KIP-227): the broker remembers what a fetcher asked for, so that its next Fetch
names only the partitions that changed and the answer carries only the partitions with news.

Kafka's rules, as its FetchManager / FetchSessionCache apply them:

- A request with epoch 0 (INITIAL) is a full fetch that asks for a session; epoch -1 (FINAL) is a full
  fetch without one (and closes the session it names). A full fetch naming a session closes it.
- Any other epoch is incremental: the named session must exist (else FETCH_SESSION_ID_NOT_FOUND),
  its epoch must be the one sent (else INVALID_FETCH_SESSION_EPOCH), and it must use topic ids iff
  the request version does (v13+; else FETCH_SESSION_TOPIC_ID_ERROR). The request's partitions are
  added or updated, ``forgotten_topics_data`` removed; a session left empty is closed and the fetch
  answered sessionless. The answer lists only partitions with records, a changed high watermark or
  log start offset, an error, a preferred read replica or a diverging epoch.
- The cache is split into 8 shards of ``max.incremental.fetch.session.cache.slots`` / 8 entries
  (Kafka 3.8+); new sessions go to the shards in turn, a session id falls in its shard's id range.
  A full shard makes room by evicting the least recently used session if it was idle for more than
  120 s, else the least valuable evictable one: a session created more than 120 s ago with fewer
  partitions (or not privileged when a follower asks). Otherwise the fetch gets no session (id 0).

The event loop owns the cache: no locks.
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from grete.protocol.codec import ZERO_UUID
from grete.protocol.errors import ErrorCode

if TYPE_CHECKING:  # the Fetch codec loads with the first Fetch, not at start-up
    from grete.protocol.messages import FetchRequest

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
SHARDS = 8  # Kafka's NumFetchSessionCacheShards
INT_MAX = 2**31 - 1
TOPIC_IDS_VERSION = 13

# A partition of a session: (topic id, index) from v13, (topic name, index) before.
Key = tuple[uuid.UUID | str, int]


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: 1 after the initial epoch, wrapping to 1 after INT_MAX."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT_MAX else epoch + 1


class CachedPartition:
    """One partition of a session: the last request parameters for it (``request``, updated in place)
    and what the fetcher was last told (high watermark, log start offset)."""

    __slots__ = ("topic", "topic_id", "request", "high_watermark", "log_start_offset")

    def __init__(self, topic: str | None, topic_id: uuid.UUID, request: FetchRequest.FetchPartition,
                 high_watermark: int = -1, log_start_offset: int = -1) -> None:
        self.topic = topic  # None: a topic id this broker does not know (yet)
        self.topic_id = topic_id
        self.request = request
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset

    def must_respond(self, data: Any, records_size: int) -> bool:
        """Kafka's CachedPartition.maybeUpdateResponseData (updating): is ``data`` news to the fetcher?"""
        respond = records_size > 0 or data.preferred_read_replica >= 0 or data.diverging_epoch.epoch >= 0
        if self.high_watermark != data.high_watermark:
            respond = True
            self.high_watermark = data.high_watermark
        if self.log_start_offset != data.log_start_offset:
            respond = True
            self.log_start_offset = data.log_start_offset
        if data.error_code != 0:
            self.high_watermark = -1  # sent again once the error is gone
            respond = True
        return respond


class FetchSession:
    __slots__ = ("id", "privileged", "partitions", "uses_topic_ids", "creation_ms", "last_used_ms", "epoch",
                 "cached_size", "by_all", "by_privileged", "groups")

    def __init__(self, session_id: int, privileged: bool, partitions: dict[Key, CachedPartition],
                 uses_topic_ids: bool, now_ms: int) -> None:
        self.id = session_id
        self.privileged = privileged  # a follower's session
        self.partitions = partitions  # in fetch order; a partition that returned records moves last
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        # Set at each touch, as Kafka's evictable trees are: size then, and who may evict it.
        self.cached_size = -1
        self.by_all = False
        self.by_privileged = False
        # What an incremental fetch reads, as plan() last built it from ``partitions``; None once
        # they change (added, updated, forgotten, reordered) or a topic id was still unknown.
        self.groups: tuple[list[Group], list[list[CachedPartition]]] | None = None

    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size, self.id)

    def update(self, added: Iterable[tuple[Key, CachedPartition]], forgotten: Iterable[Key]) -> None:
        for key, new in added:
            self.groups = None
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = new
            else:
                cached.request = new.request
        for key in forgotten:
            self.groups = None
            self.partitions.pop(key, None)


class _Shard:
    def __init__(self, number: int, max_entries: int, id_range: int, eviction_ms: int) -> None:
        self.number = number
        self.max_entries = max_entries
        self.id_range = id_range
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}  # least recently used first (touch moves to the end)
        self.evictions = 0

    def new_id(self) -> int:
        low, high = max(1, self.number * self.id_range), (self.number + 1) * self.id_range
        while True:
            candidate = random.randrange(low, high)
            if candidate not in self.sessions:
                return candidate

    def touch(self, session: FetchSession, now_ms: int) -> None:
        self.sessions.pop(session.id, None)
        self.sessions[session.id] = session
        session.last_used_ms = now_ms
        session.cached_size = len(session.partitions)
        old_enough = now_ms - session.creation_ms > self.eviction_ms
        session.by_privileged = not session.privileged or old_enough
        session.by_all = old_enough

    def try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if not self.sessions:
            return False
        oldest = next(iter(self.sessions.values()))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self._evict(oldest)
            return True
        candidates = [s for s in self.sessions.values() if (s.by_privileged if privileged else s.by_all)]
        if not candidates:
            return False
        least = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < least.evictable_key():
            return False
        self._evict(least)
        return True

    def _evict(self, session: FetchSession) -> None:
        del self.sessions[session.id]
        self.evictions += 1


class FetchSessionCache:
    """Every fetch session of this broker, in Kafka's shards."""

    def __init__(self, max_entries: int, eviction_ms: int = EVICTION_MS, shards: int = SHARDS) -> None:
        id_range = INT_MAX // shards
        self._shards = [_Shard(n, max_entries // shards, id_range, eviction_ms) for n in range(shards)]
        self._turn = itertools.cycle(self._shards)

    def _shard_of(self, session_id: int) -> _Shard | None:
        number = session_id // self._shards[0].id_range
        return self._shards[number] if 0 < session_id and number < len(self._shards) else None

    def get(self, session_id: int) -> FetchSession | None:
        shard = self._shard_of(session_id)
        return None if shard is None else shard.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        shard = self._shard_of(session_id)
        return None if shard is None else shard.sessions.pop(session_id, None)

    def touch(self, session: FetchSession, now_ms: int) -> None:
        shard = self._shard_of(session.id)
        if shard is not None:
            shard.touch(session, now_ms)

    def create(self, privileged: bool, partitions: dict[Key, CachedPartition], uses_topic_ids: bool,
               now_ms: int) -> int:
        """A new session in the next shard, if it has room or makes some; its id, or 0."""
        shard = next(self._turn)
        if len(shard.sessions) >= shard.max_entries and not shard.try_evict(privileged, len(partitions), now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(shard.new_id(), privileged, partitions, uses_topic_ids, now_ms)
        shard.touch(session, now_ms)
        return session.id

    def __len__(self) -> int:
        return sum(len(s.sessions) for s in self._shards)

    def __iter__(self) -> Iterator[FetchSession]:
        for shard in self._shards:
            yield from shard.sessions.values()

    @property
    def evictions(self) -> int:
        return sum(s.evictions for s in self._shards)

    def partitions_cached(self) -> int:
        return sum(len(s.partitions) for s in self)


class SessionError(Exception):
    """The request names a session it cannot use: answered with ``code`` at the top level, session 0."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


# What one pass of a Fetch reads: (topic name or None if its id is unknown, topic id, partitions).
Group = tuple[str | None, uuid.UUID, list["FetchRequest.FetchPartition"]]
Resolve = Callable[[uuid.UUID], str | None]


class FetchPlan:
    """What a Fetch reads and how its answer is shaped (Kafka's FetchContext): ``session`` set for an
    incremental fetch (``cached`` parallel to ``groups``), ``create`` for a full fetch asking for one."""

    __slots__ = ("groups", "cached", "session", "create", "uses_topic_ids", "privileged")

    def __init__(self, groups: list[Group], *, cached: list[list[CachedPartition]] | None = None,
                 session: FetchSession | None = None, create: bool = False, uses_topic_ids: bool = False,
                 privileged: bool = False) -> None:
        self.groups = groups
        self.cached = cached
        self.session = session
        self.create = create
        self.uses_topic_ids = uses_topic_ids
        self.privileged = privileged


def requested_groups(request: FetchRequest, uses_topic_ids: bool, resolve: Resolve) -> list[Group]:
    if not uses_topic_ids:
        return [(t.topic, ZERO_UUID, t.partitions) for t in request.topics]
    return [(resolve(t.topic_id), t.topic_id, t.partitions) for t in request.topics]


def sessionless(request: FetchRequest, version: int, resolve: Resolve) -> FetchPlan:
    uses = version >= TOPIC_IDS_VERSION
    return FetchPlan(requested_groups(request, uses, resolve), uses_topic_ids=uses)


def plan(cache: FetchSessionCache, request: FetchRequest, version: int, privileged: bool, resolve: Resolve,
         now_ms: int) -> FetchPlan:
    """Kafka's FetchManager.newContext. Raises :class:`SessionError` for a session it cannot use."""
    uses = version >= TOPIC_IDS_VERSION
    epoch = request.session_epoch
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if request.session_id != INVALID_SESSION_ID:
            cache.remove(request.session_id)  # a full fetch closes the session it names
        return FetchPlan(requested_groups(request, uses, resolve), create=epoch == INITIAL_EPOCH,
                         uses_topic_ids=uses, privileged=privileged)
    session = cache.get(request.session_id)
    if session is None:
        raise SessionError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if session.epoch != epoch:
        raise SessionError(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    if session.uses_topic_ids != uses:
        raise SessionError(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
    groups = requested_groups(request, uses, resolve)
    session.update(((_key(uses, name, topic_id, p.partition), CachedPartition(name, topic_id, p))
                    for name, topic_id, parts in groups for p in parts),
                   _forgotten(request, uses))
    if not session.partitions:
        cache.remove(session.id)
        return FetchPlan(groups, uses_topic_ids=uses, privileged=privileged)
    cache.touch(session, now_ms)
    session.epoch = next_epoch(session.epoch)
    read, cached = session.groups or _groups(session, uses, resolve)
    return FetchPlan(read, cached=cached, session=session, uses_topic_ids=uses, privileged=privileged)


def _groups(session: FetchSession, uses_topic_ids: bool,
            resolve: Resolve) -> tuple[list[Group], list[list[CachedPartition]]]:
    """The session's partitions in fetch order, grouped by topic (and their cached state); kept on
    the session until its partitions change, unless a topic id is still unknown."""
    read: list[Group] = []
    cached: list[list[CachedPartition]] = []
    last: CachedPartition | None = None
    complete = True
    for cp in session.partitions.values():
        if cp.topic is None and uses_topic_ids:
            cp.topic = resolve(cp.topic_id)  # a topic id unknown when it was added may be known now
            complete = complete and cp.topic is not None
        if last is None or cp.topic_id != last.topic_id or cp.topic != last.topic:
            read.append((cp.topic, cp.topic_id, []))
            cached.append([])
        read[-1][2].append(cp.request)
        cached[-1].append(cp)
        last = cp
    session.groups = (read, cached) if complete else None
    return read, cached


def _key(uses_topic_ids: bool, name: str | None, topic_id: uuid.UUID, index: int) -> Key:
    return (topic_id, index) if uses_topic_ids else (name or "", index)


def _forgotten(request: FetchRequest, uses_topic_ids: bool) -> Iterator[Key]:
    for t in request.forgotten_topics_data:
        for index in t.partitions:
            yield (t.topic_id, index) if uses_topic_ids else (t.topic, index)


def finish(cache: FetchSessionCache, fetch_plan: FetchPlan, topics: list[Any],
           records_size: Callable[[Any], int], now_ms: int) -> tuple[int, list[Any]]:
    """The answer's session id and topics (FetchableTopicResponse, parallel to the plan's groups):
    a full fetch may open a session; an incremental one keeps only the partitions with news."""
    if fetch_plan.session is not None:
        assert fetch_plan.cached is not None
        session = fetch_plan.session
        kept = []
        for topic, cached in zip(topics, fetch_plan.cached, strict=True):
            parts = []
            for data, cp in zip(topic.partitions, cached, strict=True):
                if data is None:  # found unchanged without a read (the handler's quiet check)
                    continue
                size = records_size(data.records)
                if cp.must_respond(data, size):
                    parts.append(data)
                    if size > 0:  # served: to the back of the line, so the others get their turn
                        key = _key(session.uses_topic_ids, cp.topic, cp.topic_id, cp.request.partition)
                        session.partitions[key] = session.partitions.pop(key)
                        session.groups = None
            if parts:
                topic.partitions = parts
                kept.append(topic)
        return session.id, kept
    if not fetch_plan.create:
        return INVALID_SESSION_ID, topics
    partitions: dict[Key, CachedPartition] = {}
    for (name, topic_id, reqs), topic in zip(fetch_plan.groups, topics, strict=True):
        for req, data in zip(reqs, topic.partitions, strict=True):
            partitions[_key(fetch_plan.uses_topic_ids, name, topic_id, req.partition)] = CachedPartition(
                name, topic_id, req, data.high_watermark, data.log_start_offset)
    return cache.create(fetch_plan.privileged, partitions, fetch_plan.uses_topic_ids, now_ms), topics
