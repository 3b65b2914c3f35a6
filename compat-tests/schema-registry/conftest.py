"""Fixtures of compat-tests/schema-registry: Apicurio Registry (tools/apicurio_dist.py, fetched from
Maven Central on first use, skipped with the reason when that or a Java 21+ is not to be had), and the
brokers compat-tests/connect uses: ``fresh_broker`` (a new single node of the session's target each
time) and ``cluster_target`` (compat-tests/cluster's 3-broker cluster, grete's, or Kafka 3.9.2 in
ZooKeeper mode with ``--target=kafka-3.9``)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from apicurio_registry import Registry

from tools import apicurio_dist

CONNECT_DIR = Path(__file__).resolve().parent.parent / "connect"


def _connect_conftest() -> ModuleType:
    """compat-tests/connect/conftest.py under a name of its own (every folder's is ``conftest``)."""
    spec = importlib.util.spec_from_file_location("compat_connect_conftest", CONNECT_DIR / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_connect = _connect_conftest()
fresh_broker = _connect.fresh_broker
cluster_target = _connect.cluster_target


@pytest.fixture(scope="session")
def apicurio() -> Path:
    """The unpacked registry; skips when Maven Central or a Java 21+ is not reachable here."""
    try:
        app = apicurio_dist.fetch()
        apicurio_dist.java()
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"Apicurio Registry {apicurio_dist.VERSION} unavailable: {exc}")
    return app


@pytest.fixture
def make_registry(apicurio: Path, tmp_path: Path) -> Iterator[Callable[..., Registry]]:
    """``make_registry(bootstrap, **properties)``: a registry not yet started (``properties`` are
    more of its settings, e.g. ``{"apicurio.kafkasql.topic": ...}``); every one is stopped at the end."""
    made: list[Registry] = []

    def make(bootstrap: str, properties: dict[str, str] | None = None) -> Registry:
        made.append(Registry(bootstrap, tmp_path / f"registry-{len(made)}", dict(properties or {})))
        return made[-1]
    yield make
    for registry in made:
        registry.stop()
