"""Polling for a condition in tests that drive real clients (which offer no completion hook)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(cond: Callable[[], bool], timeout: float, step: Callable[[], object] | None = None,
               what: str = "condition") -> None:
    """Call ``step`` (e.g. a client's poll) until ``cond()`` holds; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if step is not None:
            step()
        if cond():
            return
        if step is None:
            time.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout}s")
