"""One consume-transform-produce worker for the exactly-once checker (run as a child process).

    python -m tests.eos.worker BOOTSTRAP INPUT OUTPUT GROUP TXN_ID PARTITIONS JOURNAL SEED

It reads its input partitions (manual assignment, read_committed), and for each polled batch opens a
transaction, writes ``out:<p>:<seq>:<tag>`` to the same partition of OUTPUT for every ``in:<p>:<seq>``,
sends the consumed positions to the transaction, then commits, or on a coin flip aborts and rewinds
to the group's committed offsets. ``<tag>`` names the transaction (``<run>.<n>``) so the checker can
tell which transaction a record came from.

The journal (one JSON object per line, appended with O_APPEND) records intent *before* each outcome
call, so a SIGKILL at any point leaves a line for every transaction that could have committed:
``{"tag", "begin"}``, ``{"tag", "commit", "offsets"}``, ``{"tag", "abort"}``, then after a commit
returns ``{"tag", "committed"}``; ``{"done": true}`` when all input is processed. Every line also
carries ``"t"``, the wall-clock time it was written.
GRETE_EOS_DEBUG=eos,protocol (librdkafka debug contexts) logs the producer's requests to stderr.
Exit status 0 means every input record was consumed and committed; anything else is a crash to be
restarted by the driver (the same transactional.id fences the previous incarnation).
"""

from __future__ import annotations

import faulthandler
import json
import os
import random
import signal
import sys
import time
import uuid
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

ABORT_PROBABILITY = 0.2
MAX_BATCH = 15
IN_TXN_PAUSE = 0.05  # seconds spent inside each transaction, so kills often land mid-transaction
OP_TIMEOUT = 10.0  # per client call; a crash (exit, restart) is the answer to a timeout


class Journal:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, **entry: Any) -> None:
        # One write() per line: a SIGKILL cannot leave half a line behind in the page cache.
        # "t" (wall clock) lets the audit line entries up with the broker's log.
        entry["t"] = round(time.time(), 3)
        os.write(self.fd, (json.dumps(entry, sort_keys=True) + "\n").encode())


def transform(value: bytes, tag: str) -> bytes:
    return value.replace(b"in:", b"out:", 1) + b":" + tag.encode()


class Worker:
    def __init__(self, argv: list[str]) -> None:
        (self.bootstrap, self.input, self.output, self.group, self.txn_id, parts, journal,
         seed) = argv
        self.partitions = [int(p) for p in parts.split(",")]
        self.journal = Journal(journal)
        self.rng = random.Random(int(seed))
        self.run = uuid.uuid4().hex[:8]
        self.count = 0
        # No re-bootstrap: after a quick broker restart librdkafka 2.16's re-bootstrap left the group
        # coordinator on a decommissioned broker handle ("Handle is terminating in state INIT: 2
        # refcnts"), and send_offsets_to_transaction hung past its timeout (see README, stalls).
        common = {"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 10000,
                  "metadata.recovery.strategy": "none"}
        self.consumer = Consumer({**common, "group.id": self.group, "isolation.level": "read_committed",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "enable.partition.eof": True})
        debug = {"debug": os.environ["GRETE_EOS_DEBUG"]} if os.environ.get("GRETE_EOS_DEBUG") else {}
        self.producer = Producer({**common, "transactional.id": self.txn_id, "linger.ms": 5,
                                  "transaction.timeout.ms": 10000, **debug})
        self.ends: dict[int, int] = {}

    def start(self) -> None:
        # Fences the previous incarnation and finishes (aborts) any transaction it left open.
        self.producer.init_transactions(OP_TIMEOUT)
        self.consumer.assign([TopicPartition(self.input, p) for p in self.partitions])
        self.rewind()
        for p in self.partitions:
            _low, high = self.consumer.get_watermark_offsets(TopicPartition(self.input, p), timeout=OP_TIMEOUT)
            self.ends[p] = high

    def rewind(self) -> None:
        """Seek every input partition to the group's committed offset (the start if none)."""
        tps = self.consumer.committed([TopicPartition(self.input, p) for p in self.partitions], timeout=OP_TIMEOUT)
        for tp in tps:
            tp.offset = tp.offset if tp.offset >= 0 else 0
            self.consumer.seek(tp)

    def positions(self) -> dict[int, int]:
        # A partition with nothing consumed yet has no position (negative): it sends no offset.
        return {tp.partition: tp.offset for tp in
                self.consumer.position([TopicPartition(self.input, p) for p in self.partitions])
                if tp.offset >= 0}

    def finished(self) -> bool:
        tps = self.consumer.committed([TopicPartition(self.input, p) for p in self.partitions], timeout=OP_TIMEOUT)
        return all(tp.offset >= self.ends[tp.partition] for tp in tps)

    def poll_batch(self) -> list[Message]:
        got: list[Message] = []
        for m in self.consumer.consume(num_messages=self.rng.randint(1, MAX_BATCH), timeout=0.5):
            err = m.error()
            if err is None:
                got.append(m)
            elif err.code() != KafkaError._PARTITION_EOF:
                raise KafkaException(err)
        return got

    def one_transaction(self, batch: list[Message]) -> None:
        self.count += 1
        tag = f"{self.run}.{self.count}"
        self.journal.write(tag=tag, begin=True)
        self.producer.begin_transaction()
        for m in batch:
            self.producer.produce(self.output, value=transform(m.value(), tag), partition=m.partition())
        self.producer.poll(0)
        time.sleep(IN_TXN_PAUSE * self.rng.random() * 2)
        offsets = self.positions()
        if self.rng.random() < ABORT_PROBABILITY:
            self.journal.write(tag=tag, abort=True)
            self.producer.abort_transaction(OP_TIMEOUT)
            self.rewind()
            return
        self.producer.send_offsets_to_transaction(
            [TopicPartition(self.input, p, o) for p, o in offsets.items()],
            self.consumer.consumer_group_metadata(), OP_TIMEOUT)
        self.journal.write(tag=tag, commit=True, offsets={str(p): o for p, o in offsets.items()})
        self.producer.commit_transaction(OP_TIMEOUT)
        self.journal.write(tag=tag, committed=True)

    def loop(self, deadline: float) -> int:
        while time.monotonic() < deadline:
            batch = self.poll_batch()
            if batch:
                try:
                    self.one_transaction(batch)
                except KafkaException as exc:
                    if not self.recover(exc):
                        return 3
            elif self.finished():
                self.journal.write(done=True, run=self.run)
                return 0
        return 4

    def recover(self, exc: KafkaException) -> bool:
        """An abortable error (e.g. the broker restarted): abort, rewind, carry on. Fatal: exit."""
        err = exc.args[0]
        print(f"worker {self.txn_id}: {err}", file=sys.stderr, flush=True)
        # A retriable commit failure leaves the outcome open; crashing is the simple safe answer
        # (the next incarnation's init_transactions settles it).
        if not isinstance(err, KafkaError) or err.fatal() or not err.txn_requires_abort():
            return False
        try:
            self.producer.abort_transaction(OP_TIMEOUT)
            self.rewind()
        except KafkaException as again:
            print(f"worker {self.txn_id}: abort failed: {again}", file=sys.stderr, flush=True)
            return False
        return True


def main(argv: list[str]) -> int:
    # The driver sends SIGUSR1 to a worker that stopped making progress: the stack shows where.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    w = Worker(argv)
    try:
        w.start()
        return w.loop(time.monotonic() + 300)
    except KafkaException as exc:
        print(f"worker {w.txn_id}: {exc}", file=sys.stderr, flush=True)
        return 5


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
