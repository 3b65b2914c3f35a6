"""A reader that outlives a log's close (a parked fetch the broker's stop wakes after the log
manager closed every log) gets KAFKA_STORAGE_ERROR for that log; the directory stays online and
no failure is announced: the broker's stop must not look like a failed disk."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from grete.protocol.errors import ErrorCode
from grete.storage import LogConfig, LogManager
from grete.storage.failure import KafkaStorageException

from ._batches import append

CONFIG = LogConfig(segment_bytes=64 * 1024, segment_index_bytes=64 * 1024)


def test_a_read_after_shutdown_does_not_take_the_dir_offline(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    mgr = LogManager([tmp_path / "d0"], CONFIG)
    announced: list[Path] = []
    mgr.on_dir_offline(lambda d, _error, _partitions: announced.append(d))
    mgr.startup(cluster_id="AAAAAAAAAAAAAAAAAAAAAA", node_id=1)
    lg = mgr.create_log("t", 0)
    for _ in range(3):
        append(lg, [b"record" * 20])
    caplog.set_level(logging.ERROR)
    mgr.shutdown()
    with pytest.raises(KafkaStorageException) as err:
        lg.read(0, 1 << 20)
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert mgr.offline_dirs == {} and not mgr.all_dirs_offline
    assert announced == []
    assert not [r for r in caplog.records if "offline" in r.getMessage()]
