"""SIGKILL a process appending in a loop, many times; every restart must recover a clean log."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grete.protocol.records.record import absolute_records
from grete.storage import LogConfig, LogManager

ROOT = Path(__file__).resolve().parents[2]


def verify(root: Path) -> int:
    mgr = LogManager([root], LogConfig(segment_bytes=64 * 1024, index_interval_bytes=1024))
    logs = mgr.startup(cluster_id="crash", node_id=1)
    log = logs.get(("crash", 0))
    if log is None:
        return 0
    expected = 0
    for batch in log.batches():
        assert batch.crc_ok() and batch.base_offset == expected
        for r in absolute_records(batch):
            assert r.value is not None and r.value.split(b"|")[0] == str(r.offset).encode()
        expected = batch.next_offset
    assert expected == log.log_end_offset
    # Reads through the rebuilt indexes land on the right batch everywhere.
    for offset in range(0, expected, max(1, expected // 50)):
        res = log.read(offset, 1)
        assert res.first_offset <= offset
    if random.random() < 0.3:  # sometimes leave it clean, mostly not
        mgr.shutdown()
    return expected


KILLS = 12


@pytest.mark.slow
def test_sigkill_loop_recovers_every_time(tmp_path: Path) -> None:
    rnd = random.Random(7)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(KILLS):  # a count, not a duration: the same kill points on a fast or a loaded machine
        child = subprocess.Popen([sys.executable, "-m", "tests.storage._crash_child", str(tmp_path)],
                                 cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(rnd.uniform(0.3, 1.2))
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate()
        assert child.returncode == -signal.SIGKILL, err.decode()[-2000:]
        flushed = [int(x) for x in out.decode().split()]
        end = verify(tmp_path)
        if flushed:
            assert end >= flushed[-1], f"lost flushed data: end {end} < flushed {flushed[-1]}"
