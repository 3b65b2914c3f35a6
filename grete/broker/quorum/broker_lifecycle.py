"""A KRaft broker's standing with the controller quorum (Kafka's BrokerLifecycleManager).

The broker registers (BrokerRegistration: its listeners, rack, log dirs and the feature levels it
can run) and is given an epoch; it is fenced until it has replayed the metadata log up to its own
registration and says in a heartbeat that it is caught up; then the controller unfences it and may
make it a leader. Heartbeats go every ``broker.heartbeat.interval.ms``, and also at once when the
broker catches up (so a starting broker is unfenced as soon as it can be, not a whole interval
later). A heartbeat answered BROKER_ID_NOT_REGISTERED or STALE_BROKER_EPOCH (the controller no
longer knows this registration) registers again. A clean stop asks to shut down (controlled
shutdown): the controller moves this broker's leaderships away, then answers ``should_shut_down``.
Every heartbeat names the broker's failed log dirs, and a dir's failure sends one at once.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)

log = logging.getLogger(__name__)

REGISTRATION_VERSION = 4  # v4 lists every feature, those with level 0 too
HEARTBEAT_VERSION = 2  # v2 carries the cordoned log dirs (KIP-1066)
RETRY_BACKOFF_S = 0.1

Call = Callable[[Message, int], Awaitable[Message]]


@dataclass(frozen=True)
class Registration:
    """What the broker registers with, fixed for the life of the process."""

    broker_id: int
    cluster_id: str
    incarnation_id: uuid.UUID
    listeners: list[BrokerRegistrationRequest.Listener]
    features: list[BrokerRegistrationRequest.Feature]
    rack: str | None
    log_dirs: list[uuid.UUID]

    def request(self, previous_epoch: int) -> BrokerRegistrationRequest:
        return BrokerRegistrationRequest(
            broker_id=self.broker_id, cluster_id=self.cluster_id, incarnation_id=self.incarnation_id,
            listeners=list(self.listeners), features=list(self.features), rack=self.rack,
            is_migrating_zk_broker=False, log_dirs=list(self.log_dirs), previous_broker_epoch=previous_epoch)


class BrokerLifecycle:
    def __init__(self, registration: Registration, call: Call, applied_offset: Callable[[], int],
                 heartbeat_interval_ms: int, previous_epoch: int = -1,
                 cordoned: Callable[[], list[uuid.UUID]] = list,
                 offline: Callable[[], list[uuid.UUID]] = list) -> None:
        self.registration = registration
        self._cordoned = cordoned  # the ids of this broker's cordoned log dirs, read at each heartbeat
        self._offline = offline  # the ids of its failed log dirs, read at each heartbeat (KIP-858)
        # The epoch this broker's last process had if it stopped cleanly (its log dirs'
        # clean-shutdown files), told to the controller: not a clean stop, it leaves every ELR.
        self._previous_epoch = previous_epoch
        self._call = call
        self._applied_offset = applied_offset  # the last metadata offset this broker has applied
        self._interval_s = heartbeat_interval_ms / 1000
        self.broker_epoch = -1
        self.fenced = True
        self.unfenced = asyncio.Event()  # set while the controller has this broker unfenced
        self._reported_offset = -1  # the metadata offset the last heartbeat carried
        self._timer: asyncio.TimerHandle | None = None
        self._sending: asyncio.Task[None] | None = None
        self._want_shut_down = False
        self._shut_down = asyncio.Event()
        self._closed = False

    # --- registration ---------------------------------------------------------------------------
    async def register(self) -> None:
        """Register with the active controller (retried until it answers), then start heartbeats."""
        previous = self.broker_epoch if self.broker_epoch >= 0 else self._previous_epoch
        while not self._closed:
            try:
                response = await self._call(self.registration.request(previous), REGISTRATION_VERSION)
            except KafkaError as exc:
                log.info("broker registration: %s; retrying", exc)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            assert isinstance(response, BrokerRegistrationResponse)
            if response.error_code == ErrorCode.NONE:
                self.broker_epoch = response.broker_epoch
                log.info("registered broker %d with the controller quorum (broker epoch %d)",
                         self.registration.broker_id, self.broker_epoch)
                self._set_fenced(True)
                self._heartbeat_soon(0)
                return
            error = ErrorCode(response.error_code)
            if error in (ErrorCode.INCONSISTENT_CLUSTER_ID, ErrorCode.UNSUPPORTED_VERSION,
                         ErrorCode.DUPLICATE_BROKER_REGISTRATION):
                # As Kafka's broker: logged and tried again (a duplicate goes once the other's
                # session expires; the others need an operator).
                log.error("broker registration refused: %s", error.name)
                await asyncio.sleep(self._interval_s)
            else:
                await asyncio.sleep(RETRY_BACKOFF_S)

    # --- heartbeats -------------------------------------------------------------------------------
    def metadata_advanced(self) -> None:
        """The broker applied more metadata: a fenced broker that has now caught up with its own
        registration says so at once."""
        if (self.fenced and self.broker_epoch >= 0 and self._reported_offset < self.broker_epoch
                and self._applied_offset() >= self.broker_epoch):
            self._heartbeat_soon(0)

    def dir_failed(self) -> None:
        """A log dir failed: the controller hears of it now, not a heartbeat interval later, so the
        leaderships of the replicas in it move at once (Kafka's propagateDirectoryFailure)."""
        if self.broker_epoch >= 0:
            self._heartbeat_soon(0)

    def _heartbeat_soon(self, delay_s: float) -> None:
        if self._closed:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._heartbeat_due)

    def _heartbeat_due(self) -> None:
        self._timer = None
        if self._sending is None or self._sending.done():
            self._sending = asyncio.ensure_future(self._heartbeat())
        # else: one in flight; its answer schedules the next

    async def _heartbeat(self) -> None:
        offset = self._applied_offset()
        request = BrokerHeartbeatRequest(broker_id=self.registration.broker_id, broker_epoch=self.broker_epoch,
                                         current_metadata_offset=offset, want_fence=False,
                                         want_shut_down=self._want_shut_down, cordoned_log_dirs=self._cordoned(),
                                         offline_log_dirs=self._offline())
        try:
            response = await self._call(request, HEARTBEAT_VERSION)
        except KafkaError as exc:
            log.info("broker heartbeat: %s", exc)
            self._heartbeat_soon(RETRY_BACKOFF_S)
            return
        assert isinstance(response, BrokerHeartbeatResponse)
        self._reported_offset = offset
        error = ErrorCode(response.error_code)
        if error in (ErrorCode.BROKER_ID_NOT_REGISTERED, ErrorCode.STALE_BROKER_EPOCH):
            log.warning("broker heartbeat: %s; registering again", error.name)
            self._set_fenced(True)
            await self.register()
            return
        if error != ErrorCode.NONE:
            log.info("broker heartbeat: %s", error.name)
            self._heartbeat_soon(RETRY_BACKOFF_S)
            return
        self._set_fenced(response.is_fenced)
        if response.should_shut_down:
            self._shut_down.set()
            return
        # While shutting down, or fenced but caught up, the next answer is what the broker waits
        # for: ask again soon rather than a whole interval later.
        soon = self._want_shut_down or (response.is_fenced and response.is_caught_up)
        self._heartbeat_soon(RETRY_BACKOFF_S if soon else self._interval_s)
        self.metadata_advanced()

    def _set_fenced(self, fenced: bool) -> None:
        if fenced != self.fenced:
            log.info("broker %d is %s by the controller quorum", self.registration.broker_id,
                     "fenced" if fenced else "unfenced")
        self.fenced = fenced
        if fenced:
            self.unfenced.clear()
        else:
            self.unfenced.set()

    # --- stop -------------------------------------------------------------------------------------
    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask to shut down and wait until the controller agrees (it first moves this broker's
        leaderships away); False if it did not within ``timeout_s``."""
        if self.broker_epoch < 0 or self._closed:
            return False
        self._want_shut_down = True
        self._heartbeat_soon(0)
        try:
            async with asyncio.timeout(timeout_s):
                await self._shut_down.wait()
        except TimeoutError:
            log.warning("controlled shutdown of broker %d did not complete in %.0f s; stopping anyway",
                        self.registration.broker_id, timeout_s)
            return False
        log.info("controlled shutdown of broker %d succeeded", self.registration.broker_id)
        return True

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._sending is not None:
            self._sending.cancel()
