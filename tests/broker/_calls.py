"""Counting the calls a test expects a short cut to avoid."""

from __future__ import annotations

from typing import Any

import pytest


def counted(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """Replace ``module.name`` by a wrapper that counts its calls; the count is ``[n]``."""
    count = [0]
    original = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return count
