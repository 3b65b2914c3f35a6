"""The traffic pipeline (pipelines/traffic) end to end on one broker: every input window is written,
and the output equals the reference computed from the input."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from pipelines.traffic.__main__ import create_topics, parser, run

# Publishing, the job's micro-batches and the Spark batch reads of the check: minutes on a busy box.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SECONDS = 4
WINDOWS_PER_SECOND = 128  # 200 pairs/s over 19 lanes: copies 0-9 of the 12 sites, copy 10 of 8 sites


@pytest.mark.long  # two minutes of Spark: by hand (-m long); tests/pipelines runs the pipeline by default
def test_run_writes_every_input_window_once_and_right(spark: Any, broker: Any, tmp_path: Path) -> None:
    run_id = uuid.uuid4().hex[:8]
    names = [f"traffic-{kind}-{run_id}" for kind in ("flow", "speed", "out")]
    args = parser().parse_args(["run", "--bootstrap", broker.bootstrap, "--flow-topic", names[0],
                                "--speed-topic", names[1], "--output-topic", names[2],
                                "--duration", str(SECONDS), "--checkpoint", str(tmp_path / "ckpt")])
    assert sorted(create_topics(args)) == sorted(names)
    report, ok = run(spark, args)
    assert ok, report
    assert report["expected_windows"] == report["output_windows"] == SECONDS * WINDOWS_PER_SECOND, report
    assert report["missing_windows"] == report["input_duplicates"] == 0
