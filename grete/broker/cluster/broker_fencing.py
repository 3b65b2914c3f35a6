"""Brokers whose process is seen dead (liveness.py), acted on before their ZooKeeper sessions expire:
the active controller fences a dead broker's registration; any other broker that sees the active
controller's process die deletes /controller so that a new one is elected."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from grete.broker.cluster.controller_core import ControllerCore
from grete.broker.cluster.liveness import ProcessWatch
from grete.broker.cluster.state import ControllerContext
from grete.coordinator.zookeeper import zk_layout as zk
from grete.coordinator.zookeeper.zk_client import MultiOpError, Op

log = logging.getLogger(__name__)


class BrokerFencing:
    def __init__(self, core: ControllerCore, on_broker_failure: Callable[[list[int]], Awaitable[None]],
                 on_brokers: Callable[[list[str]], Awaitable[None]]) -> None:
        self.core = core
        self._on_broker_failure = on_broker_failure
        self._on_brokers = on_brokers
        # Registrations (broker id -> epoch) whose process was seen dead: treated as gone until the
        # znode goes (session expiry) or its port answers again. Kept across elections: the broker
        # that saw the controller die may be the next controller.
        self.fenced: dict[int, int] = {}
        self._watches: dict[int, tuple[int, ProcessWatch]] = {}

    def forget_gone(self, registered: dict[int, zk.BrokerInfo]) -> None:
        """Fences of registrations that are gone are forgotten."""
        for broker_id, epoch in list(self.fenced.items()):
            if broker_id not in registered or registered[broker_id].epoch != epoch:
                del self.fenced[broker_id]

    @property
    def ctx(self) -> ControllerContext:
        return self.core.ctx

    def watch(self, targets: dict[int, zk.BrokerInfo]) -> None:
        """Watch the processes of ``targets`` (not this broker's own), and no others."""
        if not self.core.settings.detect_process_death:
            targets = {}
        for broker_id, (epoch, watch) in list(self._watches.items()):
            if broker_id not in targets or targets[broker_id].epoch != epoch:
                watch.close()
                del self._watches[broker_id]
        for broker_id, info in targets.items():
            endpoint = info.endpoint(self.core.settings.inter_broker_listener)
            if broker_id == self.core.broker_id or broker_id in self._watches or endpoint is None:
                continue
            self._watches[broker_id] = (info.epoch, ProcessWatch(
                endpoint.host, endpoint.port, self._event(self._on_process_death, broker_id, info.epoch),
                self._event(self._on_process_back, broker_id, info.epoch)))

    def _event(self, handler: Callable[[int, int], Awaitable[None]], broker_id: int, epoch: int) -> Callable[[], None]:
        def enqueue() -> None:
            self.core.enqueue(lambda: handler(broker_id, epoch))
        return enqueue

    async def watch_controller(self) -> None:
        """Not the controller: watch the active one's process."""
        if self.core.active:
            return
        controller = self.core.active_controller_id
        info = await self.core.read_broker(controller) if controller >= 0 else None
        if not self.core.active and controller == self.core.active_controller_id:
            self.watch({controller: info} if info is not None else {})

    async def _on_process_death(self, broker_id: int, epoch: int) -> None:
        if self.core.active:
            if (info := self.ctx.live.get(broker_id)) is None or info.epoch != epoch:
                return
            log.warning("controller: broker %d's connection ended and its port refuses connections: its "
                        "process is gone; fencing registration epoch %d now, not at its session's expiry",
                        broker_id, epoch)
            self.fenced[broker_id] = epoch
            await self._on_broker_failure([broker_id])
        elif broker_id == self.core.active_controller_id:
            log.warning("broker %d: the controller's (broker %d) connection ended and its port refuses "
                        "connections: its process is gone; electing a new controller now", self.core.broker_id, broker_id)
            self.fenced[broker_id] = epoch
            await self._unseat_controller(broker_id)

    async def _unseat_controller(self, broker_id: int) -> None:
        """Delete /controller if ``broker_id`` still holds it, fenced by /controller_epoch's version:
        read before /controller, it changes with every election, so a controller elected since can
        never be unseated by this evidence."""
        epoch_found = await self.core.zk.get(zk.CONTROLLER_EPOCH)
        found = await self.core.zk.get(zk.CONTROLLER)
        if epoch_found is None or found is None or zk.decode_controller(found[0]) != broker_id:
            return
        try:
            await self.core.zk.multi([Op("check", zk.CONTROLLER_EPOCH, version=epoch_found[1].version),
                                      Op("delete", zk.CONTROLLER, version=found[1].version)])
        except MultiOpError:
            pass  # another broker was quicker, or an election happened: nothing to do

    async def _on_process_back(self, broker_id: int, epoch: int) -> None:
        """A fenced broker's port answers again under the same registration (a listener that was
        closed, not a dead process): it joins again as a broker that started."""
        if self.fenced.get(broker_id) != epoch:
            return
        del self.fenced[broker_id]
        log.info("broker %d answers again (registration epoch %d): no longer fenced", broker_id, epoch)
        if self.core.active:
            await self._on_brokers(await self.core.zk.children(zk.BROKER_IDS))
