"""Topic deletion (Kafka's TopicDeletionManager): a topic marked under /admin/delete_topics waits
until every replica's broker is live, then every broker stops serving it, every replica deletes it,
and its znodes go."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from grete.broker.cluster.controller_core import ControllerCore, ControllerMoved
from grete.broker.cluster.state import ControllerContext, TopicPartition
from grete.coordinator.zookeeper import zk_layout as zk
from grete.coordinator.zookeeper.zk_client import MultiOpError, NoNodeError, Op, ZookeeperError

log = logging.getLogger(__name__)


class TopicDeletion:
    def __init__(self, core: ControllerCore) -> None:
        self.core = core

    @property
    def ctx(self) -> ControllerContext:
        return self.core.ctx

    async def on_deletions(self, children: list[str]) -> None:
        """``children`` is what the watch saw when it fired: events queue, so some of its markers may
        be gone by now (a deletion completed meanwhile). Each topic is handled on its own: one that
        fails is logged and the others go on."""
        if not self.core.active:
            return
        for topic in children:
            try:
                await self._on_deletion(topic)
            except (ControllerMoved, ZookeeperError):
                raise  # the controller cannot act any more: _run_events resigns or waits for the session
            except Exception:
                log.exception("controller: marking %s for deletion failed", topic)
        await self.resume()

    async def _on_deletion(self, topic: str) -> None:
        if topic not in self.ctx.assignments or not self.core.settings.delete_topic_enable:
            if not self.core.settings.delete_topic_enable:
                log.info("controller: delete.topic.enable is false; not deleting %s", topic)
            await self._delete_marker(topic)
        else:
            self.ctx.deleting.add(topic)

    async def _delete_marker(self, topic: str) -> None:
        """Drop /admin/delete_topics/<topic>; one already gone is fine (Kafka's deleteTopicDeletions
        deletes at any version and ignores NONODE)."""
        try:
            await self.core.fenced([Op("delete", zk.delete_topic_path(topic))])
        except MultiOpError as exc:
            if not isinstance(exc.error, NoNodeError):
                raise

    async def resume(self) -> None:
        for topic in sorted(self.ctx.deleting):
            if topic not in self.ctx.assignments:
                continue
            partitions = [tp for tp in self.ctx.partitions() if tp[0] == topic]
            replicas = {r for tp in partitions for r in self.ctx.replicas(tp)}
            if not replicas <= set(self.ctx.live):
                log.info("controller: deleting %s waits for broker(s) %s", topic, sorted(replicas - set(self.ctx.live)))
                continue
            self._start(topic, partitions, replicas)

    def _start(self, topic: str, partitions: list[TopicPartition], replicas: set[int]) -> None:
        """UpdateMetadata with leader -2 to all (brokers stop serving it), StopReplica(delete) to
        each replica; once every replica has answered, the znodes go."""
        self.core.send_update_metadata(self.ctx.live, [], deleting=partitions)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        remaining = set(replicas)

        def answered(broker_id: int) -> Callable[[object], None]:
            def on_response(_response: object) -> None:
                remaining.discard(broker_id)
                if not remaining and not done.done():
                    done.set_result(None)
            return on_response
        for broker_id in sorted(replicas):
            tps = [tp for tp in partitions if broker_id in self.ctx.replicas(tp)]
            self.core.send_stop_replica(broker_id, tps, delete=True, on_done=answered(broker_id))
        if not replicas:
            done.set_result(None)
        # Waited for on its own task: the controller's events go on meanwhile.
        asyncio.ensure_future(self._finish(topic, done))

    async def _finish(self, topic: str, done: asyncio.Future[None]) -> None:
        await done
        self.core.enqueue(lambda: self._complete(topic))

    async def _complete(self, topic: str) -> None:
        if not self.core.active or topic not in self.ctx.deleting:
            return
        await self.core.zk.delete(zk.topic_path(topic), recursive=True)
        await self.core.zk.delete(zk.config_path("topics", topic))
        await self._delete_marker(topic)
        self.core.forget_topic(topic)
        self.ctx.deleting.discard(topic)
        log.info("controller: deleted topic %s", topic)
