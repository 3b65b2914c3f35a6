"""A handler's Later (requests/context.py): the pipeline runs its steps when it settles, directly,
and a failure is answered as a failed coroutine is (UNKNOWN_SERVER_ERROR, the connection kept), a
CloseConnection passed on; it can be awaited as well."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from grete.broker.metrics.broker_metrics import BrokerMetrics
from grete.broker.requests.context import CloseConnection, Later, RequestContext, Session
from grete.broker.requests.pipeline import Pipeline
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, MetadataRequest, MetadataResponse


def _run(later: Later) -> Later:
    handler: Any = SimpleNamespace(name="Metadata", fn=lambda ctx, request: later)
    broker: Any = SimpleNamespace(faults=None)
    ctx = RequestContext(broker, ApiKey.METADATA, 9, 7, "c", Session("PLAINTEXT", "PLAINTEXT", "127.0.0.1"))
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")])
    result = Pipeline(BrokerMetrics()).run(None, ctx, handler, request)
    assert isinstance(result, Later)
    return result


def _outcome(later: Later) -> list[tuple[Any, BaseException | None]]:
    seen: list[tuple[Any, BaseException | None]] = []
    later.then(lambda value, error: seen.append((value, error)))
    return seen


def test_the_answer_passes_the_pipeline_when_settled_and_not_before() -> None:
    pending = Later()
    seen = _outcome(_run(pending))
    assert seen == []
    answer = MetadataResponse(brokers=[], topics=[])
    pending.settle(answer)
    assert seen == [(answer, None)]
    pending.settle(MetadataResponse(brokers=[], topics=[]))  # only the first counts
    assert len(seen) == 1


def test_a_failure_is_answered_with_unknown_server_error() -> None:
    pending = Later()
    seen = _outcome(_run(pending))
    pending.settle(None, RuntimeError("boom"))
    [(response, error)] = seen
    assert error is None and [t.error_code for t in response.topics] == [ErrorCode.UNKNOWN_SERVER_ERROR]


def test_close_connection_is_passed_on_and_a_later_can_be_awaited() -> None:
    pending = Later()
    seen = _outcome(_run(pending))
    pending.settle(None, CloseConnection("closed"))
    assert isinstance(seen[0][1], CloseConnection)

    async def awaited() -> Any:
        later = Later()
        asyncio.get_running_loop().call_soon(later.settle, "answer")
        return await later

    assert asyncio.run(awaited()) == "answer"
