"""Broker tests run a real broker in-process (grete.testing's pytest plugin: ``grete_broker``)."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
