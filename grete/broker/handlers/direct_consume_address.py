"""DirectConsumeAddress (32001, grete's own): where a direct consumer reads partitions from.

Offered only when ``direct.transports`` is set (docs/direct.md). For each partition: the segment
file holding the offset, the batch position to start at, and the slot of the consumer's slot
region the broker keeps up to date for that file; read_committed also gets the aborted
transactions from the offset up to the last stable offset, as Fetch gives them.
"""

from __future__ import annotations

from grete.broker.direct.consume import position_of
from grete.broker.direct.service import DirectService
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import DataPlane
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, DirectConsumeAddressRequest, DirectConsumeAddressResponse

Response = DirectConsumeAddressResponse
Topic = Response.DirectConsumeTopicResponse
Answer = Response.DirectConsumePartitionResponse
Aborted = Response.AbortedTransaction
LATEST, EARLIEST = -1, -2


@api(ApiKey.DIRECT_CONSUME_ADDRESS, 0, 0)
def handle(ctx: RequestContext[DataPlane], request: DirectConsumeAddressRequest) -> DirectConsumeAddressResponse:
    service = ctx.broker.direct
    assert isinstance(service, DirectService)  # the connection refuses this API when it is off
    try:
        if request.transport not in service.transports:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"direct transport {request.transport!r} is not offered")
        if request.isolation_level not in (0, 1):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"isolation level {request.isolation_level}")
        if request.consumer_key < 0 and not request.topics:
            # The first call of a client: only the endpoint, to open its session on.
            return Response(throttle_time_ms=0, error_code=0, endpoint=service.endpoint_for(request.transport), consumer_key=-1,
                            slots_address="", slots_length=0, topics=[])
        consumer = service.consumer(request.consumer_key, request.session_id)
    except KafkaError as exc:
        return Response(throttle_time_ms=0, error_code=exc.code, endpoint=service.endpoint_for(request.transport), consumer_key=-1,
                        slots_address="", slots_length=0, topics=[])
    topics = []
    for topic in request.topics:
        answers = []
        for part in topic.partitions:
            try:
                if ctx.broker.authorizer is not None and not allowed(ctx, Op.READ, Res.TOPIC, topic.name):
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                partition = ctx.broker.partition(topic.name, part.index)
                offset = part.offset
                if offset == EARLIEST:
                    offset = partition.log_start_offset
                elif offset == LATEST:
                    offset = (partition.last_stable_offset if request.isolation_level == 1
                              else partition.high_watermark)
                slot_index, slot = service.watch(consumer, topic.name, part.index, partition, offset)
            except KafkaError as exc:
                answers.append(Answer(index=part.index, error_code=exc.code, error_message=exc.message,
                                      segment_address="", offset=-1, base_offset=-1, position=0,
                                      last_stable_offset=-1, slot=-1))
                continue
            lso = partition.last_stable_offset
            aborted = []
            if request.isolation_level == 1:
                aborted = [Aborted(producer_id=pid, first_offset=first)
                           for pid, first in partition.aborted_transactions(offset, lso)]
            answers.append(Answer(index=part.index, error_code=0, segment_address=service.segment_address(slot.segment, request.transport),
                                  offset=offset, base_offset=slot.segment.base_offset,
                                  position=position_of(slot.segment, offset), last_stable_offset=lso,
                                  slot=slot_index, aborted_transactions=aborted))
        topics.append(Topic(name=topic.name, partitions=answers))
    service.forget(consumer, list(request.forgotten))
    live = service.consumers.get(consumer.key)
    return Response(throttle_time_ms=0, error_code=0, endpoint=service.endpoint_for(request.transport),
                    consumer_key=consumer.key if live else -1,
                    slots_address=service.slots_address(consumer, request.transport) if live else "",
                    slots_length=consumer.shm.length if live else 0, topics=topics)
