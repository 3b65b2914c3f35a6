"""Client quotas: a librdkafka producer over its producer_byte_rate is slowed to the quota (within
10% once the quota window is full) and is told so through throttle_time_ms (KIP-219); partition
mutations over controller_mutation_rate are refused THROTTLING_QUOTA_EXCEEDED (KIP-599)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import CreateTopicsRequest, DeleteTopicsRequest
from tools.kafka_admin import alter_client_quotas, call

QUOTA = 300_000  # bytes/s
# Kafka measures over quota.window.num (11) windows of 1 s and stretches a young sensor's span to
# 10 s: a new client may send ten seconds' worth at once, and the rate then saws up and down as
# whole samples leave the window. It is judged over two full windows after the first.
WARM_UP_S = 11.0
RUN_S = WARM_UP_S + 22.0
VALUE = b"q" * 1000


@pytest.mark.slow  # half a minute: the quota's 11 s window filled, then 22 s measured
def test_producer_slowed_to_its_byte_rate(broker, fresh_topic):
    client = f"quota-{uuid.uuid4().hex[:8]}"
    alter_client_quotas(broker.bootstrap, {"client-id": client}, {"producer_byte_rate": QUOTA})
    throttles: list[int] = []
    delivered: list[tuple[float, int]] = []
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": client, "linger.ms": 5,
                             "batch.size": 16384,  # requests well under the quota
                             "queue.buffering.max.kbytes": 2048,
                             "throttle_cb": lambda event: throttles.append(int(event.throttle_time * 1000))})

        def acked(err, msg):  # type: ignore[no-untyped-def]
            assert err is None, err
            delivered.append((time.monotonic(), len(msg.value())))

        start = time.monotonic()
        while time.monotonic() - start < RUN_S:
            try:
                producer.produce(fresh_topic, VALUE, on_delivery=acked)
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
        producer.flush(30)
    finally:
        alter_client_quotas(broker.bootstrap, {"client-id": client}, {"producer_byte_rate": None})
    steady = [size for at, size in delivered if WARM_UP_S <= at - start <= RUN_S]
    rate = sum(steady) / (RUN_S - WARM_UP_S)
    print(f"steady rate {rate:.0f} B/s, quota {QUOTA}, throttles seen {len(throttles)}, max {max(throttles, default=0)} ms")
    assert 0.9 * QUOTA <= rate <= 1.1 * QUOTA, f"{rate:.0f} B/s against a quota of {QUOTA} B/s"
    assert throttles and max(throttles) > 0, "no throttle_time_ms reported"


def create_topics(bootstrap: str, client: str, topics: dict[str, int]) -> Any:
    request = CreateTopicsRequest(timeout_ms=30_000, validate_only=False, topics=[
        CreateTopicsRequest.CreatableTopic(name=name, num_partitions=count, replication_factor=1,
                                           assignments=[], configs=[]) for name, count in topics.items()])
    return call(bootstrap, request, 7, client_id=client)


def test_partition_mutations_throttled(broker):
    """KIP-599 at 1 mutation/s: a full bucket holds 11 (quota.window.num x 1 s); a strict client
    (CreateTopics v6+) may take it below zero once, then is refused THROTTLING_QUOTA_EXCEEDED with
    the time the bucket needs to refill to zero."""
    client = f"mutations-{uuid.uuid4().hex[:8]}"
    names = [f"{client}-{i}" for i in range(3)]
    alter_client_quotas(broker.bootstrap, {"client-id": client}, {"controller_mutation_rate": 1.0})
    try:
        first = create_topics(broker.bootstrap, client, {names[0]: 10})
        assert first.topics[0].error_code == 0 and first.throttle_time_ms == 0
        second = create_topics(broker.bootstrap, client, {names[1]: 5})  # 1 token left: allowed, now -4
        assert second.topics[0].error_code == 0
        third = create_topics(broker.bootstrap, client, {names[2]: 1})
        assert third.topics[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        assert 3000 <= third.throttle_time_ms <= 4000, third.throttle_time_ms
    finally:
        alter_client_quotas(broker.bootstrap, {"client-id": client}, {"controller_mutation_rate": None})
        call(broker.bootstrap, DeleteTopicsRequest(topic_names=names[:2], timeout_ms=30_000), 4)
