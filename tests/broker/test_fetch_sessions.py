"""The fetch session cache's eviction rules (Kafka's FetchSessionCacheShard), with a clock the test
sets; the wire behaviour is in compat-tests/wire/test_fetch_sessions.py (run against Kafka too)."""

from __future__ import annotations

import uuid

from grete.broker.replica.fetch_sessions import (
    EVICTION_MS,
    INVALID_SESSION_ID,
    SHARDS,
    CachedPartition,
    FetchSessionCache,
    Key,
    next_epoch,
    plan,
)
from grete.protocol.messages import FetchRequest


def parts(n: int) -> dict[Key, CachedPartition]:
    return {("t", i): CachedPartition("t", uuid.UUID(int=0), FetchRequest.FetchPartition(partition=i))
            for i in range(n)}


def one_slot_per_shard() -> FetchSessionCache:
    return FetchSessionCache(SHARDS)  # one session per shard; new sessions go to the shards in turn


def fill(cache: FetchSessionCache, size: int, now: int, privileged: bool = False) -> list[int]:
    ids = [cache.create(privileged, parts(size), False, now) for _ in range(SHARDS)]
    assert INVALID_SESSION_ID not in ids
    return ids


def test_ids_fall_in_their_shards_range_and_are_found():
    cache = FetchSessionCache(1000)
    ids = [cache.create(False, parts(1), False, 0) for _ in range(2 * SHARDS)]
    width = (2**31 - 1) // SHARDS
    assert [i // width for i in ids] == list(range(SHARDS)) * 2
    assert all(cache.get(i) is not None for i in ids) and len(cache) == 2 * SHARDS
    assert cache.remove(ids[0]) is not None and cache.get(ids[0]) is None


def test_fewer_slots_than_shards_means_no_sessions():
    # Kafka divides the slots among 8 shards: 7 slots leave every shard with none.
    cache = FetchSessionCache(7)
    assert cache.create(False, parts(3), False, 0) == INVALID_SESSION_ID
    assert FetchSessionCache(0).create(True, parts(3), False, 0) == INVALID_SESSION_ID


def test_a_full_shard_refuses_while_its_sessions_are_young():
    cache = one_slot_per_shard()
    fill(cache, 1, now=0)
    assert cache.create(False, parts(100), False, 1_000) == INVALID_SESSION_ID
    assert cache.evictions == 0


def test_a_session_unused_for_longer_than_the_eviction_time_is_evicted_first():
    cache = one_slot_per_shard()
    ids = fill(cache, 50, now=0)
    for sid in ids[1:]:
        session = cache.get(sid)
        assert session is not None
        cache.touch(session, EVICTION_MS)  # used recently; the first shard's session is not
    new = cache.create(False, parts(1), False, EVICTION_MS + 1)  # goes to shard 0, whose session is stale
    assert new != INVALID_SESSION_ID and cache.get(ids[0]) is None and cache.evictions == 1


def test_a_larger_session_evicts_a_smaller_one_only_if_it_was_created_long_enough_ago():
    cache = one_slot_per_shard()
    ids = fill(cache, 5, now=0)
    late = EVICTION_MS + 10
    for sid in ids:
        session = cache.get(sid)
        assert session is not None
        cache.touch(session, late)  # evictable by size from now: created more than 120 s ago
    assert cache.create(False, parts(4), False, late + 1) == INVALID_SESSION_ID  # smaller: no
    assert cache.create(False, parts(6), False, late + 2) != INVALID_SESSION_ID  # larger: evicts
    assert cache.evictions == 1


def test_a_follower_evicts_a_young_consumer_session_but_not_the_reverse():
    cache = one_slot_per_shard()
    fill(cache, 10, now=0)
    assert cache.create(True, parts(1), False, 1_000) != INVALID_SESSION_ID  # privileged beats any consumer
    followers = FetchSessionCache(SHARDS)
    fill(followers, 1, now=0, privileged=True)
    assert followers.create(False, parts(1000), False, 1_000) == INVALID_SESSION_ID


def test_epochs_wrap_to_one():
    assert next_epoch(0) == 1 and next_epoch(41) == 42 and next_epoch(2**31 - 1) == 1 and next_epoch(-1) == -1


def _incremental(session_id: int, epoch: int, named: list[int] = (), forgotten: list[int] = ()) -> FetchRequest:
    return FetchRequest(replica_id=2, session_id=session_id, session_epoch=epoch, topics=[
        FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(partition=i, fetch_offset=5)
                                                       for i in named])] if named else [],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(topic="t", partitions=list(forgotten))] if forgotten else [])


def test_an_incremental_fetch_reuses_the_sessions_groups_until_its_partitions_change():
    cache = FetchSessionCache(1000)
    session_id = cache.create(True, parts(3), False, 0)
    resolve = lambda topic_id: None  # noqa: E731 (names, not ids, before v13)
    first = plan(cache, _incremental(session_id, 1), 12, True, resolve, 0)
    again = plan(cache, _incremental(session_id, 2), 12, True, resolve, 0)
    assert again.groups is first.groups and [p.partition for p in first.groups[0][2]] == [0, 1, 2]
    changed = plan(cache, _incremental(session_id, 3, named=[1]), 12, True, resolve, 0)
    assert changed.groups is not first.groups and changed.groups[0][2][1].fetch_offset == 5
    forgot = plan(cache, _incremental(session_id, 4, forgotten=[0]), 12, True, resolve, 0)
    assert [p.partition for p in forgot.groups[0][2]] == [1, 2]
