"""aiokafka AIOKafkaAdminClient: topics, partitions and configs.

aiokafka's admin client returns raw protocol responses: errors are codes in the response, not
exceptions, so the tests check the codes Kafka defines.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka_helpers import unique

pytestmark = pytest.mark.compat

TOPIC_ALREADY_EXISTS = 36
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_CONFIG = 40
DYNAMIC_TOPIC_CONFIG = 1


async def admin_for(bootstrap: str) -> AIOKafkaAdminClient:
    a = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await a.start()
    return a


async def topic_configs(a: AIOKafkaAdminClient, topic: str) -> dict[str, tuple[str, int]]:
    """name -> (value, config_source) for every key the broker reports."""
    (resp,) = await a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    (res,) = resp.resources
    assert res[0] == 0, res
    return {e[0]: (e[1], e[3]) for e in res[4]}


def test_create_describe_delete_topic(broker) -> None:
    name = unique("aio-admin")

    async def run() -> None:
        a = await admin_for(broker.bootstrap)
        try:
            resp = await a.create_topics([NewTopic(name, 3, 1, topic_configs={"retention.ms": "3600000"})])
            assert [(t[0], t[1]) for t in resp.topic_errors] == [(name, 0)]
            (desc,) = await a.describe_topics([name])
            assert desc["error_code"] == 0
            assert sorted(p["partition"] for p in desc["partitions"]) == [0, 1, 2]
            assert all(p["leader"] >= 0 for p in desc["partitions"])
            assert name in await a.list_topics()
            assert (await topic_configs(a, name))["retention.ms"] == ("3600000", DYNAMIC_TOPIC_CONFIG)
            again = await a.create_topics([NewTopic(name, 1, 1)])
            assert [t[1] for t in again.topic_errors] == [TOPIC_ALREADY_EXISTS]
            deleted = await a.delete_topics([name])
            assert [tuple(t) for t in deleted.topic_error_codes] == [(name, 0)]
            deadline = time.monotonic() + 20
            while name in await a.list_topics():
                assert time.monotonic() < deadline, "topic still listed after delete"
                await asyncio.sleep(0.1)
            missing = await a.delete_topics([name])
            assert [t[1] for t in missing.topic_error_codes] == [UNKNOWN_TOPIC_OR_PARTITION]
        finally:
            await a.close()
    asyncio.run(run())


def test_invalid_config_refused(broker) -> None:
    name = unique("aio-admin")

    async def run() -> None:
        a = await admin_for(broker.bootstrap)
        try:
            resp = await a.create_topics([NewTopic(name, 1, 1, topic_configs={"cleanup.policy": "shred"})])
            assert [t[1] for t in resp.topic_errors] == [INVALID_CONFIG]
            assert name not in await a.list_topics()
        finally:
            await a.close()
    asyncio.run(run())


def test_create_partitions(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=2)

    async def run() -> None:
        a = await admin_for(broker.bootstrap)
        try:
            resp = await a.create_partitions({topic: NewPartitions(4)})
            assert [t[1] for t in resp.topic_errors] == [0]
            deadline = time.monotonic() + 20
            while len((await a.describe_topics([topic]))[0]["partitions"]) != 4:
                assert time.monotonic() < deadline, "new partitions not visible"
                await asyncio.sleep(0.1)
        finally:
            await a.close()
    asyncio.run(run())


def test_describe_and_alter_configs(broker, make_topic: Callable[..., str]) -> None:
    topic = make_topic(config={"retention.ms": "100000"})

    async def run() -> None:
        a = await admin_for(broker.bootstrap)
        try:
            before = await topic_configs(a, topic)
            assert before["retention.ms"] == ("100000", DYNAMIC_TOPIC_CONFIG)
            assert before["cleanup.policy"][0] == "delete"
            # aiokafka sends the legacy AlterConfigs, which replaces the topic's whole override
            # set: retention.ms falls back to the default.
            (resp,) = await a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                            {"segment.bytes": "1048576"})])
            assert [r[0] for r in resp.resources] == [0]
            # Kafka (KRaft) applies config changes asynchronously: poll until they show.
            deadline = time.monotonic() + 10
            while (after := await topic_configs(a, topic))["segment.bytes"][0] != "1048576":
                assert time.monotonic() < deadline, f"alter not visible: {after['segment.bytes']}"
                await asyncio.sleep(0.1)
            assert after["segment.bytes"] == ("1048576", DYNAMIC_TOPIC_CONFIG)
            assert after["retention.ms"][0] == "604800000"
            assert after["retention.ms"][1] != DYNAMIC_TOPIC_CONFIG
        finally:
            await a.close()
    asyncio.run(run())
