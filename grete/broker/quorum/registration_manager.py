"""A controller registers with the active controller (Kafka's ControllerRegistrationManager):
ControllerRegistration with its controller listeners and the feature ranges it supports, once per
process (a new incarnation each start), retried until the active controller takes it.

The active controller writes it as a RegisterControllerRecord; a Kafka 4.3.1 controller lists the
registered controllers in DescribeCluster on its controller listener (what ``--bootstrap-controller``
tools use to reach the active controller) and checks a feature upgrade against their ranges, so a
grete controller in a quorum a Kafka controller leads registers as Kafka's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable

from grete.broker.cluster.requests import PROTOCOL_IDS
from grete.broker.config import BrokerConfig
from grete.broker.network.listeners import security_protocol
from grete.broker.quorum.addresses import controller_endpoints
from grete.broker.quorum.controller_channel import ControllerChannel, QuorumLeader
from grete.broker.quorum.driver import RaftDriver
from grete.broker.requests import features as feature_specs
from grete.broker.requests import release_versions as rv
from grete.coordinator.kraft.raft_log import RaftBatch
from grete.coordinator.kraft.voters import KRAFT_VERSION_RANGE
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import (
    BrokerRegistrationRequest,
    ControllerRegistrationRequest,
    ControllerRegistrationResponse,
)

log = logging.getLogger(__name__)

REGISTRATION_VERSION = 0
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 5.0


def supported_features() -> list[BrokerRegistrationRequest.Feature]:
    """The feature levels this node can run, as it registers them: every metadata.version from
    Kafka's minimum to the latest production one, and each KRaft feature's range."""
    def feature(name: str, low: int, high: int) -> BrokerRegistrationRequest.Feature:
        return BrokerRegistrationRequest.Feature(name=name, min_supported_version=low, max_supported_version=high)
    found = [feature(rv.METADATA_VERSION, rv.METADATA_VERSIONS[0].level, rv.LATEST_PRODUCTION.level),
             feature(rv.KRAFT_VERSION, *KRAFT_VERSION_RANGE)]
    found += [feature(spec.name, spec.min_level, spec.max_level) for spec in feature_specs.SUPPORTED]
    return found


class ControllerRegistrar:
    def __init__(self, config: BrokerConfig, driver: RaftDriver, loaded: Callable[[], bool]) -> None:
        """``loaded``: whether this node's metadata holds the quorum's bootstrap records (its
        metadata.version). Kafka's manager registers only then, and a controller must not see a
        registration before them (a Kafka controller halts on a record ahead of metadata.version)."""
        self.request = ControllerRegistrationRequest(
            controller_id=config.node_id, incarnation_id=uuid.uuid4(), zk_migration_ready=False,
            listeners=[ControllerRegistrationRequest.Listener(
                name=e.listener, host=e.host, port=e.port,
                security_protocol=PROTOCOL_IDS.get(security_protocol(config, e.listener), 0))
                for e in controller_endpoints(config)],
            features=[ControllerRegistrationRequest.Feature(name=f.name, min_supported_version=f.min_supported_version,
                                                            max_supported_version=f.max_supported_version)
                      for f in supported_features()])
        self.channel = ControllerChannel(config.node_id, QuorumLeader(driver),
                                         timeout_s=max(30.0, config.get_int("controller.quorum.request.timeout.ms") / 1000))
        self._task: asyncio.Task[None] | None = None
        self._loaded = loaded
        self._ready = asyncio.Event()
        driver.commit_listeners.append(self._committed)

    def _committed(self, _batch: RaftBatch) -> None:
        if not self._ready.is_set() and self._loaded():
            self._ready.set()

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._register())

    async def _register(self) -> None:
        if not self._loaded():
            await self._ready.wait()
        backoff = RETRY_BACKOFF_S
        while True:
            try:
                answer = await self.channel.call(self.request, REGISTRATION_VERSION)
                assert isinstance(answer, ControllerRegistrationResponse)
                error = ErrorCode(answer.error_code)
                if error is ErrorCode.NONE:
                    log.info("registered controller %d with the active controller", self.request.controller_id)
                    return
                log.warning("controller registration refused: %s %s", error.name, answer.error_message or "")
            except KafkaError as exc:
                log.debug("controller registration: %s", exc)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.channel.close()
