"""The clients: idempotent acks=all writers, a transactional writer, and the catch-up reader.
Stock confluent-kafka (librdkafka) clients only; everything they are told is recorded."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.jepsen.checker import Read, Txn, Write


def _quiet(extra: dict[str, Any]) -> dict[str, Any]:
    return {"log_level": 0, "logger": _NullLogger(), **extra}


class _NullLogger:
    def log(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def __getattr__(self, _name: str) -> Any:
        return self.log


class IdempotentWriter(threading.Thread):
    """Writes ``"<name>-<seq>"`` to partition ``seq % partitions``, acks=all, idempotent, about
    ``rate`` records a second, at most ``window`` unresolved. A fatal producer error (librdkafka
    gives up on the idempotent session) ends that producer: its unresolved writes stay unknown and
    a new producer continues under a new name (order is only promised within one producer)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, name: str, writes: dict[str, Write],
                 ack_times: list[float], stop: threading.Event, rate: float = 100.0, window: int = 200) -> None:
        super().__init__(daemon=True, name=f"writer-{name}")
        self.bootstrap, self.topic, self.partitions, self.base = bootstrap, topic, partitions, name
        self.writes, self.ack_times, self.stop_event = writes, ack_times, stop
        self.rate, self.window = rate, window
        self.generation = 0
        self.fatal: list[str] = []

    def _producer(self, fatal: threading.Event) -> Producer:
        def on_error(err: KafkaError) -> None:
            if err.fatal():
                self.fatal.append(f"{self.base}g{self.generation}: {err}")
                fatal.set()
        return Producer(_quiet({
            "bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
            "max.in.flight.requests.per.connection": 5, "linger.ms": 5, "compression.type": "none",
            "message.timeout.ms": 30000, "request.timeout.ms": 10000, "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 500, "error_cb": on_error}))

    def _delivered(self, err: KafkaError | None, message: Any) -> None:
        write = self.writes[message.value().decode()]
        if err is None:
            # An ack may carry no offset (librdkafka reports none for a batch the broker already had:
            # DUPLICATE_SEQUENCE_NUMBER is success without an offset).
            offset = message.offset()
            write.status, write.offset, write.acked_at = "ok", -1 if offset is None else offset, time.monotonic()
            self.ack_times.append(write.acked_at)
        else:
            write.status, write.error = "fail", err.name()

    def run(self) -> None:
        while not self.stop_event.is_set():
            fatal = threading.Event()
            producer = self._producer(fatal)
            name = f"{self.base}g{self.generation}"
            seq = 0
            interval = 1.0 / self.rate
            next_at = time.monotonic()
            while not self.stop_event.is_set() and not fatal.is_set():
                try:
                    if self._step(producer, name, seq, next_at):
                        seq += 1
                        next_at += interval
                except KafkaException as exc:  # a fatal error raised through poll: a new producer
                    self.fatal.append(f"{name}: {exc.args[0]}")
                    fatal.set()
            try:
                producer.flush(0 if fatal.is_set() else 20)
            except (KafkaException, SystemError):
                pass  # librdkafka raises its fatal error from flush (through the delivery callback)
            self.generation += 1

    def _step(self, producer: Producer, name: str, seq: int, next_at: float) -> bool:
        """One record sent when the window and the rate allow; whether it was."""
        if len(producer) >= self.window or time.monotonic() < next_at:
            producer.poll(0.005)
            return False
        value = f"{name}-{seq}"
        partition = seq % self.partitions
        self.writes[value] = Write(value, name, seq, partition)
        try:
            producer.produce(self.topic, value=value.encode(), partition=partition, on_delivery=self._delivered)
        except BufferError:
            self.writes.pop(value)
            producer.poll(0.05)
            return False
        producer.poll(0)
        return True


class TransactionalWriter(threading.Thread):
    """Transactions of 2-5 records over the topic's partitions, each meant to commit or to abort
    (chosen by ``rng``; the intent is in the values). The outcome is recorded only when certain:
    ``committed`` when commit_transaction returned, ``aborted`` when abort_transaction returned."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, transactional_id: str, txns: list[Txn],
                 stop: threading.Event, rng: random.Random) -> None:
        super().__init__(daemon=True, name="txn-writer")
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.transactional_id, self.txns, self.stop_event, self.rng = transactional_id, txns, stop, rng
        self.errors: list[str] = []

    def _producer(self) -> Producer | None:
        while not self.stop_event.is_set():
            producer = Producer(_quiet({
                "bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id,
                "transaction.timeout.ms": 15000, "compression.type": "none", "linger.ms": 5,
                "message.timeout.ms": 15000, "request.timeout.ms": 10000}))
            try:
                producer.init_transactions(30)
                return producer
            except KafkaException as exc:
                self.errors.append(f"init_transactions: {exc.args[0]}")
                time.sleep(0.5)
        return None

    def _finish(self, producer: Producer, txn: Txn) -> bool:
        """Commit or abort as intended; False when the producer must be replaced."""
        op = producer.commit_transaction if txn.intent == "c" else producer.abort_transaction
        for attempt in range(10):
            if attempt >= 1 and self.stop_event.is_set():
                return False
            try:
                op(20)
                # What was done, not what was meant: a commit that failed abortably and was then
                # aborted is an aborted transaction (the checker wrongly called such a one lost
                # when this read the intent).
                txn.outcome = "committed" if op == producer.commit_transaction else "aborted"
                return True
            except KafkaException as exc:
                err = exc.args[0]
                txn.error = str(err)
                if err.fatal():
                    return False
                if err.txn_requires_abort():
                    if op == producer.abort_transaction:
                        return False
                    op = producer.abort_transaction  # now the outcome is aborted, if this works
                    continue
                if not err.retriable():
                    return False
                time.sleep(0.2)
        return False

    def run(self) -> None:
        producer = self._producer()
        number = 0
        while producer is not None and not self.stop_event.is_set():
            number += 1
            intent = "c" if self.rng.random() < 0.6 else "a"
            count = self.rng.randint(2, 5)
            txn = Txn(number, intent, [(i % self.partitions, f"t{number}-{intent}-{i}") for i in range(count)])
            self.txns.append(txn)
            try:
                producer.begin_transaction()
                for partition, value in txn.values:
                    producer.produce(self.topic, value=value.encode(), partition=partition)
                ok = self._finish(producer, txn)
            except KafkaException as exc:
                txn.error = str(exc.args[0])
                ok = False
            except BufferError:
                ok = False
            if not ok:
                self.errors.append(f"t{number}: {txn.error}")
                try:
                    producer.flush(0)
                except KafkaException:
                    pass  # a fatal producer raises here too
                producer = self._producer()  # init_transactions fences the old one and ends its transaction
            time.sleep(0.02)
        if self.txns and self.txns[-1].outcome == "unknown":
            self._fence()

    def _fence(self) -> None:
        """A last init_transactions, so that no transaction of this id stays open (it would hold
        the last stable offset, and the read_committed catch-up read, until it timed out)."""
        for _ in range(3):
            producer = Producer(_quiet({"bootstrap.servers": self.bootstrap,
                                        "transactional.id": self.transactional_id}))
            try:
                producer.init_transactions(30)
                return
            except KafkaException as exc:
                self.errors.append(f"final init_transactions: {exc.args[0]}")


def _high_watermark(consumer: Consumer, topic: str, partition: int, timeout: float = 30.0) -> int:
    """Retried: right after healing, leadership may still move (preferred-leader rebalancing)
    and the client's metadata lags (NOT_LEADER_OR_FOLLOWER)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            high: int = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
            return high
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
            try:  # "Local: Unknown partition": the client does not know the topic yet; ask for it
                consumer.list_topics(topic, timeout=5)
            except KafkaException:
                pass


def read_topic(bootstrap: str, topic: str, partitions: int, isolation: str, timeout: float = 60.0
               ) -> tuple[dict[int, Read], dict[int, int], list[str]]:
    """Every partition from its beginning to its high watermark (as it was when the read started):
    (reads, high watermarks, problems)."""
    consumer = Consumer(_quiet({"bootstrap.servers": bootstrap, "group.id": f"jepsen-reader-{isolation}",
                                "enable.auto.commit": False, "isolation.level": isolation,
                                "enable.partition.eof": True, "auto.offset.reset": "earliest",
                                "fetch.wait.max.ms": 100}))
    problems: list[str] = []
    try:
        ends = {}
        for p in range(partitions):
            ends[p] = _high_watermark(consumer, topic, p)
        reads: dict[int, Read] = {p: [] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout
        while len(done) < partitions and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.5):
                p = message.partition()
                err = message.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if message.offset() >= ends[p]:
                            done.add(p)
                    else:
                        problems.append(f"p{p}: {err}")
                    continue
                reads[p].append((message.offset(), message.value().decode(errors="replace")))
                if message.offset() + 1 >= ends[p]:
                    done.add(p)
        # read_committed skips aborted records and markers: the last data record may be below the end.
        for p in set(range(partitions)) - done:
            position = consumer.position([TopicPartition(topic, p)])[0].offset
            if position >= ends[p]:
                done.add(p)
            else:
                problems.append(f"{isolation} read of p{p} stopped at {position} of {ends[p]}")
        return reads, ends, problems
    finally:
        consumer.close()
