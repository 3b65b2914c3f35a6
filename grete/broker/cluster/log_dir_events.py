"""A live broker's failed log dir, as Kafka 3.9's controller handles it in ZooKeeper mode (KIP-112).

The broker writes a sequential ``/log_dir_event_notification/log_dir_event_`` znode naming itself.
The controller deletes the notifications it read and sends that broker a LeaderAndIsr for every
replica it has; the broker answers KAFKA_STORAGE_ERROR for those in a failed dir. From every
LeaderAndIsr answer (these and any other) the controller keeps which replicas of each broker are
offline that way; newly offline ones leave their ISRs and leaderships, as a dead broker's replicas
do, and UpdateMetadata lists them as offline replicas. They count as online again once their
broker starts again (a new registration).
"""

from __future__ import annotations

import logging

from grete.broker.cluster.controller_core import ControllerCore
from grete.broker.cluster.leader_election import LeaderElection
from grete.broker.cluster.state import TopicPartition
from grete.coordinator.zookeeper import zk_layout as zk
from grete.coordinator.zookeeper.zk_client import NoNodeError
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import LeaderAndIsrResponse

log = logging.getLogger(__name__)


class LogDirEvents:
    def __init__(self, core: ControllerCore, elections: LeaderElection) -> None:
        self.core = core
        self.elections = elections
        core.leader_and_isr_answered = self._answered

    async def on_notifications(self, children: list[str]) -> None:
        """The children of /log_dir_event_notification (the watch's event): each read and deleted,
        then every broker they name asked about all its replicas."""
        if not self.core.active:
            return
        brokers: set[int] = set()
        for child in children:
            path = f"{zk.LOG_DIR_EVENT_NOTIFICATION}/{child}"
            found = await self.core.zk.get(path)
            broker = zk.decode_log_dir_event(found[0]) if found is not None else None
            if broker is not None:
                brokers.add(broker)
            try:
                await self.core.zk.delete(path)
            except NoNodeError:
                pass
        for broker_id in sorted(brokers & set(self.core.ctx.live)):
            log.info("controller: broker %d reports a failed log dir; asking it which replicas are offline",
                     broker_id)
            self.core.send_leader_and_isr(broker_id, self.core.ctx.partitions_on(broker_id))

    def broker_started(self, broker_id: int) -> None:
        """A broker (re)started: its dirs are whatever its new process found (Kafka's onBrokerStartup)."""
        self.core.ctx.offline_dirs.pop(broker_id, None)

    def _answered(self, broker_id: int, response: LeaderAndIsrResponse) -> None:
        """On the broker's channel: the answer goes to the controller's event task."""
        self.core.enqueue(lambda: self._replicas_answered(broker_id, response))

    async def _replicas_answered(self, broker_id: int, response: LeaderAndIsrResponse) -> None:
        ctx = self.core.ctx
        if not self.core.active or broker_id not in ctx.live or response.error_code != ErrorCode.NONE:
            return
        offline: set[TopicPartition] = set()
        online: set[TopicPartition] = set()
        for tp, code in _partition_errors(response, {a.topic_id: t for t, a in ctx.assignments.items()}):
            if code == ErrorCode.KAFKA_STORAGE_ERROR:
                offline.add(tp)
            elif code == ErrorCode.NONE:
                online.add(tp)
        previous = ctx.offline_dirs.get(broker_id, set())
        current = (previous - online) | offline
        if current:
            ctx.offline_dirs[broker_id] = current
        else:
            ctx.offline_dirs.pop(broker_id, None)
        new = current - previous
        if new:
            log.info("controller: marking replicas %s on broker %d as offline (their log dir failed)",
                     ", ".join(f"{t}-{p}" for t, p in sorted(new)), broker_id)
            await self.elections.take_replicas_offline(set(), {broker_id: new})


def _partition_errors(response: LeaderAndIsrResponse, names: dict[object, str]) -> list[tuple[TopicPartition, int]]:
    """(partition, error) of each answered partition: by topic id from v5, by name before."""
    if response.topics:
        return [((names[t.topic_id], p.partition_index), p.error_code)
                for t in response.topics if t.topic_id in names for p in t.partition_errors]
    return [((p.topic_name, p.partition_index), p.error_code) for p in response.partition_errors]
