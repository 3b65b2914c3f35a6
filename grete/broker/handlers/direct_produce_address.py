"""DirectProduceAddress (32000, grete's own): write access to partitions' direct produce regions.

Offered only when ``direct.transports`` is set (docs/direct.md). The caller first opens a session
on the notification endpoint; grants are tied to it. Exclusive: a region of the caller's own and
no other direct producer on the partition; shared: the partition's shared region, space reserved
with fetch-and-add on its ordering word.
"""

from __future__ import annotations

from grete.broker.direct.service import DirectService
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import DataPlane
from grete.broker.security.authz import Op, Res, allowed
from grete.direct.layout import HEADER_BYTES
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, DirectProduceAddressRequest, DirectProduceAddressResponse
from grete.protocol.topics import INTERNAL_TOPICS

Topic = DirectProduceAddressResponse.DirectProduceTopicResponse
Answer = DirectProduceAddressResponse.DirectProducePartitionResponse


@api(ApiKey.DIRECT_PRODUCE_ADDRESS, 0, 0)
def handle(ctx: RequestContext[DataPlane], request: DirectProduceAddressRequest) -> DirectProduceAddressResponse:
    service = ctx.broker.direct
    assert isinstance(service, DirectService)  # the connection refuses this API when it is off
    topics = []
    for topic in request.topics:
        answers = []
        for part in topic.partitions:
            try:
                if request.transport not in service.transports:
                    raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                                     f"direct transport {request.transport!r} is not offered "
                                     f"(direct.transports={','.join(service.transports)})")
                if ctx.broker.authorizer is not None and not allowed(ctx, Op.WRITE, Res.TOPIC, topic.name):
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if topic.name in INTERNAL_TOPICS:
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {topic.name}")
                region = service.grant(request.session_id, topic.name, part.index, part.exclusive)
            except KafkaError as exc:
                answers.append(Answer(index=part.index, error_code=exc.code, error_message=exc.message,
                                      region_id=-1, region_key=-1, region_address="", data_offset=0,
                                      data_length=0, exclusive=part.exclusive))
                continue
            answers.append(Answer(index=part.index, error_code=0, region_id=region.id, region_key=region.key,
                                  region_address=service.region_address(region, request.transport),
                                  data_offset=HEADER_BYTES,
                                  data_length=region.data_length,
                                  exclusive=region.exclusive_session is not None))
        topics.append(Topic(name=topic.name, partitions=answers))
    return DirectProduceAddressResponse(throttle_time_ms=0, endpoint=service.endpoint_for(request.transport),
                                        topics=topics)
