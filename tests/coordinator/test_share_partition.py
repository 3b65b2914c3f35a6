"""Share partitions (KIP-932): acquisition, acknowledgement, delivery-count limit, lock expiry, SPSO."""

from __future__ import annotations

import uuid

from grete.coordinator.share.share_group import ShareGroup, ShareMember, simple_assign
from grete.coordinator.share.share_partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    REJECT,
    RELEASE,
    RENEW,
    Acquired,
    BatchSpan,
    SharePartition,
)
from grete.protocol.errors import ErrorCode

LOCK = 30_000


def sp(limit: int = 5) -> SharePartition:
    return SharePartition(0, limit, 2000)


def test_two_members_never_share_a_record() -> None:
    p = sp()
    a = p.acquire("a", [BatchSpan(0, 4)], 500, now_ms=0, lock_ms=LOCK, record_limit=False)
    b = p.acquire("b", [BatchSpan(0, 4), BatchSpan(5, 9)], 500, now_ms=0, lock_ms=LOCK, record_limit=False)
    assert a == [Acquired(0, 4, 1)] and b == [Acquired(5, 9, 1)]


def test_release_redelivers_reject_archives_accept_moves_the_start() -> None:
    p = sp()
    p.acquire("a", [BatchSpan(0, 5)], 500, now_ms=0, lock_ms=LOCK, record_limit=False)
    assert p.acknowledge("a", 0, 5, [RELEASE, REJECT, ACCEPT, ACCEPT, ACCEPT, ACCEPT], now_ms=0,
                         lock_ms=LOCK) == ErrorCode.NONE
    assert [(r.first, r.last, r.state) for r in p.in_flight()] == [(0, 0, AVAILABLE), (1, 1, ARCHIVED), (2, 5, ACKNOWLEDGED)]
    assert p.acquire("b", [], 500, now_ms=0, lock_ms=LOCK, record_limit=False) == [Acquired(0, 0, 2)]
    assert p.acknowledge("b", 0, 0, [ACCEPT], now_ms=0, lock_ms=LOCK) == ErrorCode.NONE
    assert p.start == 6 and p.in_flight() == []


def test_only_the_owner_acknowledges_acquired_records() -> None:
    p = sp()
    p.acquire("a", [BatchSpan(0, 2)], 500, now_ms=0, lock_ms=LOCK, record_limit=False)
    assert p.acknowledge("b", 0, 2, [ACCEPT], now_ms=0, lock_ms=LOCK) == ErrorCode.INVALID_RECORD_STATE
    assert p.acknowledge("a", 0, 3, [ACCEPT], now_ms=0, lock_ms=LOCK) == ErrorCode.INVALID_RECORD_STATE
    assert p.acknowledge("a", 0, 2, [ACCEPT, ACCEPT], now_ms=0, lock_ms=LOCK) == ErrorCode.INVALID_REQUEST
    assert p.acknowledge("a", 0, 2, [ACCEPT], now_ms=0, lock_ms=LOCK) == ErrorCode.NONE
    assert p.acknowledge("a", 0, 2, [ACCEPT], now_ms=0, lock_ms=LOCK) == ErrorCode.INVALID_RECORD_STATE


def test_delivery_count_limit_archives() -> None:
    p = sp(limit=2)
    p.acquire("a", [BatchSpan(0, 0)], 500, now_ms=0, lock_ms=LOCK, record_limit=False)
    p.acknowledge("a", 0, 0, [RELEASE], now_ms=0, lock_ms=LOCK)
    assert p.acquire("a", [], 500, now_ms=0, lock_ms=LOCK, record_limit=False) == [Acquired(0, 0, 2)]
    p.acknowledge("a", 0, 0, [RELEASE], now_ms=0, lock_ms=LOCK)
    assert p.acquire("a", [], 500, now_ms=0, lock_ms=LOCK, record_limit=False) == []
    assert p.start == 1


def test_lock_expiry_and_renew() -> None:
    p = sp()
    p.acquire("a", [BatchSpan(0, 1)], 500, now_ms=0, lock_ms=LOCK, record_limit=False)
    assert p.acknowledge("a", 1, 1, [RENEW], now_ms=20_000, lock_ms=LOCK) == ErrorCode.NONE
    assert p.expire_locks(LOCK) is True
    assert [(r.first, r.last, r.state) for r in p.in_flight()] == [(0, 0, AVAILABLE), (1, 1, ACQUIRED)]
    assert p.next_deadline() == 50_000
    assert p.release_member("a") is True and p.has_available()


def test_record_limit_splits_a_batch() -> None:
    p = sp()
    assert p.acquire("a", [BatchSpan(0, 9)], 3, now_ms=0, lock_ms=LOCK, record_limit=True) == [Acquired(0, 2, 1)]
    assert p.acquire("b", [BatchSpan(0, 9)], 500, now_ms=0, lock_ms=LOCK, record_limit=False) == [Acquired(3, 9, 1)]


def test_control_batches_and_gaps_are_never_delivered() -> None:
    p = sp()
    got = p.acquire("a", [BatchSpan(0, 1), BatchSpan(2, 2, archived=True), BatchSpan(5, 6)], 500, now_ms=0,
                    lock_ms=LOCK, record_limit=False)
    assert got == [Acquired(0, 1, 1), Acquired(5, 6, 1)]
    p.acknowledge("a", 0, 1, [ACCEPT], now_ms=0, lock_ms=LOCK)
    assert p.start == 5


def test_heartbeat_epochs_and_fencing() -> None:
    t = uuid.uuid4()
    topics = {"t": (t, 1)}
    g = ShareGroup("g")
    a = g.heartbeat("a", 0, rack_id=None, subscribed=["t"], client_id="c", client_host="h", topics=topics, max_size=10)
    assert a.error == ErrorCode.NONE and a.member is not None and a.member.epoch == 2  # a new group is at 1
    assert a.member.assignment == {t: [0]} and a.send_assignment
    b = g.heartbeat("b", 0, rack_id=None, subscribed=["t"], client_id="c", client_host="h", topics=topics, max_size=10)
    assert b.member is not None and b.member.assignment == {t: [0]} and b.member.epoch == 3
    stale = g.heartbeat("a", 0 + 3 + 1, rack_id=None, subscribed=None, client_id="c", client_host="h", topics=topics, max_size=10)
    assert stale.error == ErrorCode.FENCED_MEMBER_EPOCH
    again = g.heartbeat("a", 2, rack_id=None, subscribed=None, client_id="c", client_host="h", topics=topics, max_size=10)
    assert again.member is not None and again.member.epoch == 3 and again.send_assignment
    unknown = g.heartbeat("z", 4, rack_id=None, subscribed=None, client_id="c", client_host="h", topics=topics, max_size=10)
    assert unknown.error == ErrorCode.UNKNOWN_MEMBER_ID
    full = g.heartbeat("c", 0, rack_id=None, subscribed=["t"], client_id="c", client_host="h", topics=topics, max_size=2)
    assert full.error == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_simple_assignor_spreads_partitions() -> None:
    t = uuid.uuid4()
    two = [ShareMember("a", subscribed=["t"]), ShareMember("b", subscribed=["t"])]
    assert simple_assign(two, {"t": (t, 4)}) == {"a": {t: [0, 2]}, "b": {t: [1, 3]}}
    assert simple_assign(two, {"t": (t, 1)}) == {"a": {t: [0]}, "b": {t: [0]}}
    three = [*two, ShareMember("c", subscribed=["t"])]
    assert simple_assign(three, {"t": (t, 2)}) == {"a": {t: [0, 1]}, "b": {t: [0]}, "c": {t: [1]}}


def test_share_snapshot_records_round_trip_and_updates_overlay() -> None:
    from grete.broker.groups.share_store import overlay
    from grete.coordinator.share.share_format import (
        SNAPSHOT,
        UPDATE,
        ShareKey,
        ShareState,
        StateBatch,
        decode_key,
        decode_value,
        encode_key,
        encode_value,
        java_string_hash,
        partition_for,
    )
    key = ShareKey("g", uuid.UUID(int=7), 3)
    assert decode_key(encode_key(SNAPSHOT, key)) == (SNAPSHOT, key)
    snap = ShareState(SNAPSHOT, 4, 10, 0, 2, 100, 200, [StateBatch(10, 14, AVAILABLE, 1), StateBatch(15, 19, ARCHIVED, 5)])
    assert decode_value(SNAPSHOT, encode_value(snap)) == snap
    update = ShareState(UPDATE, 4, 12, leader_epoch=2, batches=[StateBatch(13, 13, ACKNOWLEDGED, 1)])
    assert decode_value(UPDATE, encode_value(update)) == update
    merged = overlay(snap, update)
    assert (merged.start_offset, [(b.first_offset, b.last_offset, b.delivery_state) for b in merged.batches]) == (
        12, [(12, 12, AVAILABLE), (13, 13, ACKNOWLEDGED), (14, 14, AVAILABLE), (15, 19, ARCHIVED)])
    assert java_string_hash("hello") == 99162322 and java_string_hash("polygenelubricants") == -(1 << 31)
    assert 0 <= partition_for(key, 50) < 50
    restored = SharePartition.restore(12, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                           for b in merged.batches], 5, 2000)
    assert restored.acquire("a", [], 500, now_ms=0, lock_ms=LOCK, record_limit=False) == [
        Acquired(12, 12, 2), Acquired(14, 14, 2)]


def test_delivery_complete_count_is_what_the_lag_leaves_out() -> None:
    p = sp()
    p.acquire("a", [BatchSpan(0, 4)], 500, now_ms=0, lock_ms=LOCK, record_limit=False)
    assert p.delivery_complete_count() == 0
    assert p.acknowledge("a", 0, 3, [ACCEPT, ACCEPT, RELEASE, REJECT], now_ms=0, lock_ms=LOCK) == ErrorCode.NONE
    # 0-1 accepted move the SPSO to 2; 3 (archived) is complete past it, 2 (released) and 4 (acquired) are not
    assert (p.start, p.delivery_complete_count()) == (2, 1)


def test_share_coordinator_keys() -> None:
    from grete.coordinator.share.share_format import ShareKey, parse_coordinator_key
    from grete.storage.files import uuid_to_kafka
    topic_id = uuid.UUID(int=12345)
    text = uuid_to_kafka(topic_id)
    assert parse_coordinator_key(f"grp:{text}:3") == ShareKey("grp", topic_id, 3)
    # as Kafka 4.3.1 takes them (Java's split, trim and parseInt)
    assert parse_coordinator_key(f" grp :{text}:-1::") == ShareKey("grp", topic_id, -1)
    assert parse_coordinator_key(f"grp:{text}:+2") == ShareKey("grp", topic_id, 2)
    for bad in ("", "grp", f"grp:{text}", f":{text}:0", f" :{text}:0", f"grp:{text}:x", f"grp:{text}: 1",
                "grp:zz:0", f"grp:{text[:-1]}:0", f"a:b:{text}:0", f"grp:{text}:2147483648"):
        assert parse_coordinator_key(bad) is None, bad


def test_share_auto_offset_reset_values() -> None:
    from grete.coordinator.share.share_reset import parse_reset
    assert parse_reset("earliest") == ("earliest", 0) and parse_reset("latest") == ("latest", 0)
    assert parse_reset("by_duration:PT1H") == ("by_duration", 3_600_000)
    assert parse_reset("by_duration:p1dt2h3m4.5s") == ("by_duration", 93_784_500)  # Java's Duration.parse
    assert parse_reset("by_duration:PT0S") == ("by_duration", 0)
    for bad in ("Earliest", "bogus", "BY_DURATION:PT1H", "by_duration:", "by_duration:P", "by_duration:PT",
                "by_duration:P1DT", "by_duration:-PT1H", "by_duration:PT-1S", "by_duration:1h"):
        assert parse_reset(bad) is None, bad
