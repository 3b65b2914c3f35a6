"""A handler that raises: Kafka answers that request with UNKNOWN_SERVER_ERROR (the API's own error
response) and keeps the connection; an acks=0 produce, which has no answer, closes it."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from grete.broker.requests import registry
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ProduceRequest,
    ProduceResponse,
)
from grete.testing._wire import Wire

LIST_GROUPS, PRODUCE = 16, 0


def _failing(monkeypatch: pytest.MonkeyPatch, api_key: int, *, later: bool) -> None:
    def fn(ctx: Any, request: Any) -> Any:
        if not later:
            raise RuntimeError("injected handler failure")

        async def fail() -> Any:
            raise RuntimeError("injected handler failure")
        return fail()

    handler = registry.handlers()[api_key]
    monkeypatch.setitem(registry._HANDLERS, api_key, dataclasses.replace(handler, fn=fn))


def _produce(acks: int) -> ProduceRequest:
    return ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name="t", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=b"")])])


@pytest.mark.parametrize("later", [False, True], ids=["raises", "its-coroutine-raises"])
def test_a_failing_handler_answers_unknown_server_error_and_keeps_the_connection(
        grete_broker, monkeypatch, caplog, later):
    _failing(monkeypatch, LIST_GROUPS, later=later)
    wire = Wire(grete_broker.host, grete_broker.port)
    try:
        with caplog.at_level(logging.ERROR, logger="grete.broker"):
            answer = wire.call(ListGroupsRequest(), ListGroupsResponse, 4)
        assert answer.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
        assert wire.call(ApiVersionsRequest(), ApiVersionsResponse, 3).error_code == 0
    finally:
        wire.close()
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and "injected handler failure" in str(tracebacks[0].exc_info[1])


def test_a_failing_produce_answers_each_partition_or_closes_if_acks_0(grete_broker, monkeypatch):
    _failing(monkeypatch, PRODUCE, later=True)
    wire = Wire(grete_broker.host, grete_broker.port)
    try:
        answer = wire.call(_produce(acks=1), ProduceResponse, 9)
        [topic] = answer.responses
        assert (topic.name, [(p.index, p.error_code) for p in topic.partition_responses]) == \
            ("t", [(0, ErrorCode.UNKNOWN_SERVER_ERROR)])
        assert wire.call(ApiVersionsRequest(), ApiVersionsResponse, 3).error_code == 0
        wire.send(_produce(acks=0), 9)  # no answer to carry the error: Kafka closes
        assert wire.sock.recv(1) == b""
    finally:
        wire.close()
