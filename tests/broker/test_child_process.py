"""Child brokers die with the process that started them, not with the thread: Linux delivers the
parent-death signal when the forking *thread* ends, so a broker started from a background thread
(a test restarting one while it watches the port) was stopped as soon as that thread returned."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from grete.broker.child_process import describe_exit, spawn

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_a_child_started_from_a_thread_outlives_the_thread(tmp_path: Path) -> None:
    started: list[subprocess.Popen[bytes]] = []
    thread = threading.Thread(target=lambda: started.append(spawn(SLEEPER, tmp_path / "child.log")))
    thread.start()
    thread.join()
    child = started[0]
    try:
        # The signal, had it been asked for this thread, arrives as the thread exits.
        with pytest.raises(subprocess.TimeoutExpired):
            code = child.wait(2.0)
            pytest.fail(f"the child ended ({describe_exit(code)}) when the thread that started it returned")
    finally:
        child.kill()
        child.wait()
