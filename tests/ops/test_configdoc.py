"""docs/operations.md's configuration reference matches grete/broker/config.py."""

from __future__ import annotations

from grete.broker.config import BROKER_CONFIGS, TOPIC_CONFIGS
from tools import configdoc

from ._support import entrypoint


def test_generated_section_is_up_to_date():
    current = configdoc.DOC.read_text(encoding="utf-8")
    assert configdoc.splice(current, configdoc.section()) == current, \
        "docs/operations.md is out of date: run python -m tools.configdoc"


def test_every_key_has_one_row():
    section = configdoc.section()
    for key in [*BROKER_CONFIGS, *TOPIC_CONFIGS]:
        rows = [line for line in section.splitlines() if line.startswith(f"| `{key}` |")]
        assert len(rows) == (2 if key in BROKER_CONFIGS and key in TOPIC_CONFIGS else 1), key


def test_environment_column_is_what_the_entrypoint_reads():
    ep = entrypoint()
    for key in BROKER_CONFIGS:
        assert ep.env_key(configdoc.env_name(key)) == key
        assert ep.key_env(key) == configdoc.env_name(key)


def test_check_mode_reports_a_stale_section(tmp_path, capsys):
    doc = tmp_path / "operations.md"
    stale = configdoc.DOC.read_text(encoding="utf-8").replace("| `num.partitions` |", "| `num.partition` |")
    doc.write_text(stale, encoding="utf-8")
    assert configdoc.main(["--check", "--doc", str(doc)]) == 1
    assert configdoc.main(["--doc", str(doc)]) == 0
    assert configdoc.main(["--check", "--doc", str(doc)]) == 0
    assert doc.read_text(encoding="utf-8") == configdoc.DOC.read_text(encoding="utf-8")
