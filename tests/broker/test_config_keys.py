"""Configuration read by key: every key the code reads is one the broker defines, read as its type,
and a value is parsed once, then again after a dynamic change."""

from __future__ import annotations

import ast
from pathlib import Path

from grete.broker.config import BROKER_CONFIGS, TOPIC_CONFIGS, BrokerConfig, ConfigDef, ConfigType

GRETE = Path(__file__).resolve().parents[2] / "grete"
GENERATED = ("protocol/messages/", "protocol/metadata/")
INTEGERS = {ConfigType.INT, ConfigType.LONG, ConfigType.SHORT}
TYPED_READS = {"get_int": INTEGERS, "get_bool": {ConfigType.BOOLEAN}, "get_list": {ConfigType.LIST},
               "get_str": None}


def _definition(key: str) -> ConfigDef | None:
    if key in BROKER_CONFIGS:
        return BROKER_CONFIGS[key]
    return TOPIC_CONFIGS[key][0] if key in TOPIC_CONFIGS else None


def _reads() -> list[tuple[str, int, str, str]]:
    """(file, line, accessor, key) of every config read by a literal key in grete/."""
    found = []
    for path in sorted(GRETE.rglob("*.py")):
        rel = path.relative_to(GRETE).as_posix()
        if rel.startswith(GENERATED):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in TYPED_READS and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                found.append((rel, node.lineno, node.func.attr, node.args[0].value))
    return found


def test_every_key_read_is_defined_and_read_as_its_type() -> None:
    reads = _reads()
    assert len(reads) > 100  # the scan sees the code's reads
    wrong = []
    for rel, line, accessor, key in reads:
        definition = _definition(key)
        types = TYPED_READS[accessor]
        if definition is None:
            wrong.append(f"{rel}:{line} {accessor}({key!r}): no such config")
        elif types is not None and definition.type not in types:
            wrong.append(f"{rel}:{line} {accessor}({key!r}): a {definition.type.name} config")
    assert not wrong, "\n".join(wrong)


def test_a_value_is_parsed_once_and_again_after_a_dynamic_change() -> None:
    config = BrokerConfig({"num.partitions": "3", "log.retention.hours": "2"})
    assert config.get_int("num.partitions") == 3
    assert config.get_int("log.retention.ms") == 2 * 3_600_000  # a coarser unit's value, converted
    config.set_dynamic({"num.partitions": "5"}, {"log.retention.ms": "1000"})
    assert config.get_int("num.partitions") == 5
    assert config.get_int("log.retention.ms") == 1000
    proposed = config.with_dynamic({}, {})
    assert proposed.get_int("num.partitions") == 3
    assert config.get_int("num.partitions") == 5  # a proposal leaves the config in force alone
