"""Connections closed for bad input are logged, but not one line each: after the first few, a count
per kind in one summary line per window, from a timer that runs only when something was held back."""

from __future__ import annotations

import logging
import re
import socket
import threading

from grete.broker.network.log_limit import FIRST

BAD_FRAMES = 200
SUMMARY = re.compile(r"\.\.\. and ([\d,]+) more malformed requests from 127\.0\.0\.1 in the last \d+ s")


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        self.held_back = 0
        self.all_counted = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        self.lines.append(line)
        if summary := SUMMARY.fullmatch(line):
            self.held_back += int(summary[1].replace(",", ""))
            if self.held_back == BAD_FRAMES - FIRST:
                self.all_counted.set()


def test_repeated_malformed_requests_are_counted_not_logged_each(grete_broker):
    limiter = grete_broker.broker.bad_input
    limiter.window_s = 1.0  # Kafka has no setting for it; 10 s by default, shorter to keep the test short
    lines = _Lines()
    logger = logging.getLogger("grete.broker.network.connection")
    logger.addHandler(lines)
    try:
        for _ in range(BAD_FRAMES):
            with socket.create_connection((grete_broker.host, grete_broker.port), timeout=5) as sock:
                sock.sendall(b"\xff\xff\xff\xff")  # a negative size: Kafka closes the connection
                assert sock.recv(1) == b""
        assert lines.all_counted.wait(10), lines.lines
    finally:
        logger.removeHandler(lines)
    assert all("negative frame size" in line for line in lines.lines[:FIRST])
    summaries = lines.lines[FIRST:]
    # One line per window at most: a slow run may span a few windows, never a line per frame.
    assert summaries and all(SUMMARY.fullmatch(line) for line in summaries) and len(summaries) <= 10
    # Nothing is left armed on a broker that has gone quiet again.
    assert grete_broker.call(lambda: [k.timer for k in limiter._kinds.values()]) == [None]
