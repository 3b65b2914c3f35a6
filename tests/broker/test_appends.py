"""The replica layer's append path called directly, without a handler: an acks=all append waits in
the delayed produce until the ISR has it or its timeout passes, and a transactional batch whose
coordinator is on another broker is parked until that coordinator answers."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from grete.broker.config import BrokerConfig
from grete.broker.replica.appends import Appends, Replicating, Verifying, delayed_produce
from grete.broker.replica.partition import Partition
from grete.broker.replica.txn_verification import TopicPartition
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ProduceResponse
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.record import Record, build_batch
from grete.storage.config import LogConfig
from grete.storage.log import Log

PRODUCE_VERSION = 11
ADD_VERSION = 12  # KIP-890 part 2: the batch adds its partition to the transaction


class Hosted:
    def __init__(self, *partitions: Partition) -> None:
        self.partitions = {(p.topic, p.index): p for p in partitions}

    def partition(self, topic: str, index: int) -> Partition:
        found = self.partitions.get((topic, index))
        if found is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return found


class Counted:
    def __init__(self) -> None:
        self.appended: list[tuple[str, int, int]] = []
        self.failed: list[tuple[str, int]] = []

    def produced(self, topic: str, records: int, nbytes: int) -> None:
        self.appended.append((topic, records, nbytes))

    def produce_failed(self, topic: str, nbytes: int) -> None:
        self.failed.append((topic, nbytes))


class Verifier:
    """The coordinator on broker 2: refuses the partitions in ``refuse``."""

    def __init__(self, refuse: dict[TopicPartition, ErrorCode]) -> None:
        self.refuse = refuse
        self.asked: list[tuple[int, str, list[TopicPartition], bool]] = []

    async def verify(self, coordinator: int, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition], *, add: bool) -> dict[TopicPartition, ErrorCode]:
        self.asked.append((coordinator, transactional_id, partitions, add))
        return {tp: e for tp, e in self.refuse.items() if tp in partitions}

    def close(self) -> None:
        pass


class Elsewhere:
    """Transactions whose coordinator is on broker 2."""

    node_id = 1
    config = BrokerConfig({"node.id": "1"})

    def __init__(self, verifier: Verifier) -> None:
        self.txn_verifier = verifier

    @property
    def txn_coordinator(self) -> Any:
        raise AssertionError("no local coordinator is asked")

    def coordinates_transactions_of(self, transactional_id: str | None) -> bool:
        return False

    def txn_coordinator_node(self, transactional_id: str) -> int | None:
        return 2


def leader(tmp_path: Path, index: int, isr: list[int]) -> Partition:
    topic_id = uuid.uuid4()
    log = Log.open(tmp_path / f"t-{index}", LogConfig(), topic_id=topic_id, clean_shutdown=True)
    partition = Partition("t", index, topic_id, log, -1, is_leader=False, replicated=True, broker_id=1)
    partition.make_leader(0, 0, 1, (1, 2), isr, now_ms=1000)
    return partition


def records(n: int = 1, **kw: Any) -> bytearray:
    return build_batch([Record(i, 0, None, b"v") for i in range(n)], **kw)


def appends(*partitions: Partition, refuse: dict[TopicPartition, ErrorCode] | None = None) -> tuple[Appends, Counted]:
    metrics = Counted()
    return Appends(Hosted(*partitions), Elsewhere(Verifier(refuse or {})), metrics), metrics


def test_delayed_produce_completes_once_the_isr_has_the_batch(tmp_path: Path) -> None:
    asyncio.run(_completes(tmp_path))


async def _completes(tmp_path: Path) -> None:
    p = leader(tmp_path, 0, isr=[1, 2])
    path, metrics = appends(p)
    replicating: list[Replicating] = []
    answer = path.append_records(PRODUCE_VERSION, "t", 0, records(3), -1, int(time.time() * 1000), replicating)
    assert answer.error_code == 0 and answer.base_offset == 0
    assert replicating == [(answer, p, 3)] and metrics.appended == [("t", 3, len(records(3)))]
    waiting = asyncio.ensure_future(path.await_replication(replicating, 5000))
    await asyncio.sleep(0)  # one loop step: parked on the partition
    assert not waiting.done()
    p.update_follower(2, 3, 1001)
    await waiting
    assert answer.error_code == 0 and answer.base_offset == 0


def test_delayed_produce_times_out_for_partitions_the_isr_did_not_reach(tmp_path: Path) -> None:
    asyncio.run(_times_out(tmp_path))


async def _times_out(tmp_path: Path) -> None:
    caught_up, behind = leader(tmp_path, 0, isr=[1, 2]), leader(tmp_path, 1, isr=[1, 2])
    path, _ = appends(caught_up, behind)
    replicating: list[Replicating] = []
    now = int(time.time() * 1000)
    first = path.append_records(PRODUCE_VERSION, "t", 0, records(), -1, now, replicating)
    second = path.append_records(PRODUCE_VERSION, "t", 1, records(), -1, now, replicating)
    caught_up.update_follower(2, 1, 1001)
    await path.await_replication(replicating, 50)
    assert (first.error_code, first.base_offset) == (0, 0)
    assert (second.error_code, second.base_offset, second.log_start_offset) == (ErrorCode.REQUEST_TIMED_OUT, -1, -1)
    assert behind.log_end_offset == 1  # appended all the same: the timeout only answers


def test_delayed_produce_outcome_per_partition(tmp_path: Path) -> None:
    asyncio.run(_outcomes(tmp_path))


async def _outcomes(tmp_path: Path) -> None:
    p = leader(tmp_path, 0, isr=[1, 2])
    p.append(RecordBatch(records()), 1000)
    assert await delayed_produce([(p, 1)], 20) == [ErrorCode.REQUEST_TIMED_OUT]
    p.update_follower(2, 1, 1001)
    assert await delayed_produce([(p, 1)], 20) == [ErrorCode.NONE]


def test_transactional_batch_waits_for_the_coordinator_on_another_broker(tmp_path: Path) -> None:
    asyncio.run(_verified(tmp_path))


async def _verified(tmp_path: Path) -> None:
    confirmed, refused = leader(tmp_path, 0, isr=[1]), leader(tmp_path, 1, isr=[1])
    path, metrics = appends(confirmed, refused, refuse={("t", 1): ErrorCode.INVALID_TXN_STATE})
    replicating: list[Replicating] = []
    verifying: list[Verifying] = []
    now = int(time.time() * 1000)
    txn = records(2, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    answers = [path.append_records(PRODUCE_VERSION, "t", i, txn, -1, now, replicating, "tx", verifying)
               for i in (0, 1)]
    assert [v.answer for v in verifying] == answers and confirmed.log_end_offset == 0  # parked, not appended
    assert await path.append_verified(PRODUCE_VERSION, "tx", -1, verifying, replicating)  # one refused
    assert (answers[0].error_code, answers[0].base_offset, confirmed.log_end_offset) == (0, 0, 2)
    assert (answers[1].error_code, answers[1].error_message) == (ErrorCode.INVALID_TXN_STATE,
                                                                 "Partition was not added to the transaction")
    assert refused.log_end_offset == 0 and metrics.failed == [("t", len(txn))]


class Busy(Verifier):
    """A coordinator still completing the producer's previous transaction for its first ``busy``
    answers (CONCURRENT_TRANSACTIONS), then adding the partitions."""

    def __init__(self, busy: int) -> None:
        super().__init__({})
        self.busy = busy

    async def verify(self, coordinator: int, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition], *, add: bool) -> dict[TopicPartition, ErrorCode]:
        await super().verify(coordinator, transactional_id, producer_id, producer_epoch, partitions, add=add)
        busy = len(self.asked) <= self.busy
        return dict.fromkeys(partitions, ErrorCode.CONCURRENT_TRANSACTIONS) if busy else {}


def _adding(tmp_path: Path, busy: int) -> tuple[Busy, Partition, ProduceResponse.PartitionProduceResponse, Any]:
    p = leader(tmp_path, 0, isr=[1])
    verifier = Busy(busy)
    path = Appends(Hosted(p), Elsewhere(verifier), Counted())
    verifying: list[Verifying] = []
    txn = records(1, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    answer = path.append_records(ADD_VERSION, "t", 0, txn, -1, int(time.time() * 1000), [], "tx", verifying)
    return verifier, p, answer, path.append_verified(ADD_VERSION, "tx", -1, verifying, [])


def test_a_partition_added_while_the_previous_transaction_completes_is_asked_again(tmp_path: Path) -> None:
    """Transaction version 2 (Produce v12 adds its partition): the coordinator answers
    CONCURRENT_TRANSACTIONS while it writes the producer's previous markers; the leader asks again
    (every add.partitions.to.txn.retry.backoff.ms, 20) before the producer is told, as Kafka does."""
    verifier, p, answer, appending = _adding(tmp_path, busy=2)
    assert not asyncio.run(appending)
    assert [add for *_, add in verifier.asked] == [True, True, True]
    assert (answer.error_code, answer.base_offset, p.log_end_offset) == (0, 0, 1)


def test_the_retries_stop_after_add_partitions_to_txn_retry_backoff_max_ms(tmp_path: Path) -> None:
    verifier, p, answer, appending = _adding(tmp_path, busy=1000)
    started = time.monotonic()
    assert asyncio.run(appending)
    assert time.monotonic() - started < 1.0 and 2 <= len(verifier.asked) <= 6  # 100 ms in steps of 20
    assert (answer.error_code, p.log_end_offset) == (ErrorCode.CONCURRENT_TRANSACTIONS, 0)
