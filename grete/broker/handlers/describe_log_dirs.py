"""DescribeLogDirs (35): v1-5, each log dir with the partitions it holds and their sizes.

A replica being moved by AlterReplicaLogDirs also appears in its destination dir as a future
replica (``is_future_key``), with ``offset_lag`` the offsets it still has to copy. v4 adds the file
system's total and usable bytes (``os.statvfs``), v5 whether the dir is cordoned
(``cordoned.log.dirs``: it takes no new replica). An offline dir (its I/O failed), or one that cannot
be read, is answered with KAFKA_STORAGE_ERROR and no partitions, as Kafka answers it.
"""

from __future__ import annotations

import os
from pathlib import Path

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import DataPlane
from grete.broker.security.authz import Op, cluster_allowed
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, DescribeLogDirsRequest, DescribeLogDirsResponse

Result = DescribeLogDirsResponse.DescribeLogDirsResult


@api(ApiKey.DESCRIBE_LOG_DIRS, 0, 5, advertised_min=1)
def handle(ctx: RequestContext[DataPlane], request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    if not cluster_allowed(ctx, Op.DESCRIBE):
        # Kafka: an empty answer (v3+ with CLUSTER_AUTHORIZATION_FAILED).
        return DescribeLogDirsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED if ctx.version >= 3 else 0,
                                       results=[])
    wanted = None if request.topics is None else {
        (t.topic, p) for t in request.topics for p in t.partitions}
    by_dir: dict[Path, dict[str, list[DescribeLogDirsResponse.DescribeLogDirsPartition]]] = {}
    for (topic, index), partition in sorted(ctx.broker.partitions.items()):
        if wanted is not None and (topic, index) not in wanted:
            continue
        by_dir.setdefault(_absolute(partition.log_dir), {}).setdefault(topic, []).append(
            DescribeLogDirsResponse.DescribeLogDirsPartition(
                partition_index=index, partition_size=partition.size_bytes, offset_lag=0, is_future_key=False))
    for (topic, index), (target, lag) in sorted(ctx.broker.replicas.moving().items()):
        if wanted is not None and (topic, index) not in wanted:
            continue
        future = ctx.broker.log_manager.get_future_log(topic, index)
        by_dir.setdefault(_absolute(target), {}).setdefault(topic, []).append(
            DescribeLogDirsResponse.DescribeLogDirsPartition(
                partition_index=index, partition_size=int(future.size_bytes) if future is not None else 0,
                offset_lag=lag, is_future_key=True))
    offline = {_absolute(d) for d in ctx.broker.log_manager.offline_dirs}
    cordoned = {_absolute(d) for d in ctx.broker.log_manager.cordoned}
    results = [_describe_dir(_absolute(d), by_dir.get(_absolute(d), {}), _absolute(d) in offline)
               for d in ctx.broker.log_dirs]
    for result in results:
        result.is_cordoned = Path(result.log_dir) in cordoned
    return DescribeLogDirsResponse(error_code=0, results=results)


def _describe_dir(directory: Path, topics: dict[str, list[DescribeLogDirsResponse.DescribeLogDirsPartition]],
                  offline: bool) -> Result:
    try:
        if offline:
            raise OSError("offline")
        stats = os.statvfs(directory)
    except OSError:
        return Result(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=str(directory), topics=[],
                      total_bytes=-1, usable_bytes=-1)
    return Result(error_code=0, log_dir=str(directory),
                  topics=[DescribeLogDirsResponse.DescribeLogDirsTopic(name=name, partitions=parts)
                          for name, parts in sorted(topics.items())],
                  total_bytes=stats.f_blocks * stats.f_frsize, usable_bytes=stats.f_bavail * stats.f_frsize)


def _absolute(directory: Path) -> Path:
    """Kafka reports each dir's absolute path (symlinks kept, as File.getAbsolutePath does)."""
    return Path(os.path.abspath(directory))
