"""KIP-1066 on a KRaft cluster: a broker's heartbeat (v2) names its cordoned log dirs; the active
controller records a change only when they change (BrokerRegistrationChangeRecord v3, kept in a
snapshot's RegisterBrokerRecord v4), and a broker whose every log dir is cordoned is still live but
gets no new replica."""

from __future__ import annotations

import asyncio
import uuid

from grete.broker.cluster.placement import assign_replicas
from grete.broker.quorum.brokers import Registrations
from grete.protocol.messages import BrokerHeartbeatRequest
from grete.protocol.metadata import BrokerRegistrationChangeRecord, RegisterBrokerRecord
from tests.broker.test_quorum_partitions import Quorum

DIR_A, DIR_B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)


def test_cordoned_dirs_come_with_heartbeats_and_keep_a_broker_out_of_placement() -> None:
    async def run() -> None:
        q = Quorum()
        for broker in (1, 2, 3):
            await q.broker(broker)
        registration = q.registry.brokers[2]
        registration.log_dirs = [DIR_A, DIR_B]
        epoch = registration.epoch

        def beat(cordoned: list[uuid.UUID] | None) -> BrokerHeartbeatRequest:
            return BrokerHeartbeatRequest(broker_id=2, broker_epoch=epoch, current_metadata_offset=q.offset,
                                          cordoned_log_dirs=cordoned)

        offset = q.offset
        assert (await q.registry.heartbeat(beat([DIR_A]))).error_code == 0
        assert q.offset == offset + 1 and q.registry.brokers[2].cordoned_dirs == [DIR_A]
        assert [b.cordoned for b in q.registry.live()] == [False, False, False]  # one dir of two: still placed
        await q.registry.heartbeat(beat([DIR_A]))
        await q.registry.heartbeat(beat(None))  # v0-1 say nothing about them
        assert q.offset == offset + 1  # unchanged: nothing written
        await q.registry.heartbeat(beat([DIR_B, DIR_A]))
        live = q.registry.live()
        assert [(b.id, b.cordoned) for b in live] == [(1, False), (2, True), (3, False)]
        usable = [b for b in live if not b.cordoned]
        assert all(2 not in replicas for replicas in assign_replicas(usable, 6, 2).values())

        # a snapshot keeps them; a reloaded registry places nothing on broker 2 either
        again = Registrations()
        for record in q.registry.records():
            assert not isinstance(record, BrokerRegistrationChangeRecord)
            again.apply(record, 0)
        assert isinstance(q.registry.records()[1], RegisterBrokerRecord)
        assert [b.cordoned for b in again.live()] == [False, True, False]

        await q.registry.heartbeat(beat([]))
        assert not any(b.cordoned for b in q.registry.live())

    asyncio.run(run())
