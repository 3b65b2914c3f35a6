"""AlterReplicaLogDirs (34): v1-2, move a partition's replica to another of this broker's log dirs.

Each (dir, partition) is answered as Kafka's ReplicaManager.alterReplicaLogDirs answers it:
LOG_DIR_NOT_FOUND for a path that is not one of ``log.dirs`` (compared as absolute paths),
KAFKA_STORAGE_ERROR for an offline dir or partition, REPLICA_NOT_AVAILABLE for a partition this
broker does not host; otherwise the move starts (a ``-future`` log filled in the background while
the partition keeps serving, then swapped in) and the answer is NONE. v0 is not offered: Kafka 4
removed it too.
"""

from __future__ import annotations

import os
from pathlib import Path

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import DataPlane
from grete.broker.security.authz import Op, cluster_allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, ApiKey

TopicResult = AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult
PartitionResult = AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult


@api(ApiKey.ALTER_REPLICA_LOG_DIRS, 0, 2, advertised_min=1)
def handle(ctx: RequestContext[DataPlane], request: AlterReplicaLogDirsRequest) -> AlterReplicaLogDirsResponse:
    configured = {Path(os.path.abspath(d)): d for d in ctx.broker.log_dirs}
    results: dict[str, list[PartitionResult]] = {}
    for wanted in request.dirs:
        target = configured.get(Path(os.path.abspath(wanted.path)))
        for topic in wanted.topics:
            for index in topic.partitions:
                code = _move(ctx, topic.name, index, target, wanted.path)
                results.setdefault(topic.name, []).append(PartitionResult(partition_index=index, error_code=code))
    return AlterReplicaLogDirsResponse(results=[TopicResult(topic_name=name, partitions=parts)
                                                for name, parts in results.items()])


def _move(ctx: RequestContext[DataPlane], topic: str, index: int, target: Path | None, asked: str) -> int:
    try:
        if not cluster_allowed(ctx, Op.ALTER):
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        if target is None:
            raise KafkaError(ErrorCode.LOG_DIR_NOT_FOUND, f"Log dir {asked} is not found in the config.")
        ctx.broker.replicas.alter_log_dir(topic, index, target)
    except KafkaError as exc:
        return exc.code
    return ErrorCode.NONE
