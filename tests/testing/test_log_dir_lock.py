"""In-process brokers and the log dir lock: several in one process on their own dirs, none on
another's, and a restart in the same process once the first has stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from grete.broker.config import StartupError
from grete.testing import broker


def test_one_dir_one_broker_and_a_restart_after_stop(tmp_path: Path) -> None:
    with broker(data_dir=tmp_path / "a", topics={"t": 1}), broker(data_dir=tmp_path / "b"):
        with pytest.raises(StartupError, match=f"Failed to acquire lock on file .lock in {tmp_path / 'a'}\\."):
            with broker(data_dir=tmp_path / "a"):
                pass
    with broker(data_dir=tmp_path / "a") as again:
        assert again.call(lambda: again.broker.metadata.topic("t")) is not None
