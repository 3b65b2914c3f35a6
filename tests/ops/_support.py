"""Shared by tests/ops: the repository's docker/ files, loaded the way the image uses them."""

from __future__ import annotations

import importlib.util
import subprocess
import time
from pathlib import Path
from types import ModuleType

from confluent_kafka import Consumer, Producer

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"


def entrypoint() -> ModuleType:
    """docker/entrypoint.py as a module (it is a script in the image, not part of the package)."""
    spec = importlib.util.spec_from_file_location("grete_entrypoint", DOCKER / "entrypoint.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module



def wait_serving(proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "serving on" in line:
            return
        if proc.poll() is not None:
            raise AssertionError(f"exited with {proc.returncode}: {line}{proc.stdout.read()}")
    raise AssertionError("the broker did not report that it was serving")


def round_trip(bootstrap: str, topic: str, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=b"k", value=b"one record")
    assert producer.flush(20) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ops", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                assert msg.value() == b"one record"
                break
        else:
            raise AssertionError("the record was not consumed")
        metadata = consumer.list_topics(topic, timeout=10)
        assert len(metadata.topics[topic].partitions) == partitions  # KAFKA_NUM_PARTITIONS applied
    finally:
        consumer.close()
