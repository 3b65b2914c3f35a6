"""Client-metrics subscriptions on the single node: kept in the metadata file across a restart, an
empty set deleting one. (The wire answers are compared with Kafka 4.3.1 in
compat-tests/wire/test_wire_client_metrics.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from grete.broker.metrics.client_metrics_configs import validate
from grete.coordinator.kraft.local import open_local_store
from grete.protocol.errors import ErrorCode, KafkaError


def test_subscriptions_survive_a_restart_and_an_empty_set_deletes(tmp_path: Path) -> None:
    store = open_local_store(tmp_path, 1)
    asyncio.run(store.set_client_metrics("a", validate({"metrics": " x. , y. ", "interval.ms": "500"})))
    asyncio.run(store.set_client_metrics("b", {"match": "client_id=c"}))
    again = open_local_store(tmp_path, 1)
    assert again.client_metrics_names() == ["a", "b"]
    assert again.client_metrics("a") == {"metrics": "x.,y.", "interval.ms": "500"}
    asyncio.run(again.set_client_metrics("b", {}))
    assert open_local_store(tmp_path, 1).client_metrics_names() == ["a"]
    assert again.client_metrics("b") == {}


@pytest.mark.parametrize("match", ["client_id=(?<name>x)", "client_software_name=java.*", "client_source_port=80"])
def test_java_regex_forms_are_accepted(match: str) -> None:
    assert validate({"match": match}) == {"match": match}


def test_a_regex_java_cannot_compile_is_refused() -> None:
    with pytest.raises(KafkaError) as refused:
        validate({"match": "client_id=(a"})
    assert (refused.value.code, refused.value.message) == (ErrorCode.INVALID_CONFIG,
                                                           "Illegal client matching pattern: client_id=(a")
