"""A small tmpfs for a log dir that fills up for real (the tests run as root; elsewhere they skip)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Producer


@contextmanager
def small_disk(where: Path, size: str) -> Iterator[Path]:
    """``where`` mounted as a tmpfs of ``size`` ("8m") for the block; the test skips if it cannot be."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill_until_halted(producer: Producer, topic: str, value: bytes, process: subprocess.Popen[bytes], log_path: Path,
                      *, timeout: float, limit_s: float, batch: int = 10,
                      delivered: Callable[[object, object], None] | None = None) -> None:
    """Produce ``value`` to ``topic`` until the broker logs that every log dir has failed (within
    ``timeout``), then give its process ``limit_s`` to exit (producer callbacks served meanwhile)."""
    deadline = time.monotonic() + timeout
    while "every log dir has failed" not in log_path.read_text(errors="replace"):
        assert time.monotonic() < deadline, "the disk filled up and the broker did not say so"
        try:
            for _ in range(batch):
                producer.produce(topic, value, callback=delivered)
        except BufferError:
            pass
        producer.poll(0.05)
    failed_at = time.monotonic()
    while process.poll() is None and time.monotonic() - failed_at < limit_s:
        producer.poll(0.1)
