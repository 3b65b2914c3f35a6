"""Where grete's C modules (the direct path's, the TLS record reader) are compiled and how they are loaded.

Each module is compiled once per source text (its name carries a digest of the source and of the
Python version) into ``${GRETE_CACHE:-~/.cache/grete}/direct/``, on first use: a checkout, an
editable install and a wheel install all run the C that is in their tree, never a stale build.
Builders work in private temporary directories and rename the result into place, so concurrent
first uses never load a half-written module.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import io
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any


def cache_dir() -> Path:
    return Path(os.environ.get("GRETE_CACHE", Path.home() / ".cache" / "grete")) / "direct"


def versioned_name(prefix: str, source: str) -> str:
    digest = hashlib.sha256((source + sys.version).encode()).hexdigest()[:16]
    return f"{prefix}_{digest}"


def find(directory: Path, name: str) -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = directory / (name + suffix)
        if path.is_file():
            return path
    return None


def build_once(directory: Path, name: str, compile_into: Callable[[Path], Path]) -> Path:
    """``directory``/``name``'s compiled module, made by ``compile_into(tmpdir)`` unless present."""
    found = find(directory, name)
    if found is not None:
        return found
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        built = compile_into(Path(tmp))
        target = directory / built.name
        os.replace(built, target)  # atomic: a concurrent builder's copy is identical
    return target


def load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_extension(tmp: Path, module: str, source: Path, link_args: Sequence[str] = ()) -> Path:
    """Compile ``source`` into the extension module ``module`` in ``tmp``; its path."""
    # setuptools drives the compiler (as it does for cffi's atomics): needed to build, not to load
    from setuptools import Distribution, Extension  # type: ignore[import-untyped, unused-ignore]

    extension = Extension(module, [str(source)], extra_compile_args=["-O2"], extra_link_args=list(link_args))
    dist = Distribution({"ext_modules": [extension]})
    dist.verbose = 0
    command: Any = dist.get_command_obj("build_ext")
    command.build_lib = command.build_temp = str(tmp)
    with contextlib.redirect_stdout(io.StringIO()):
        dist.run_command("build_ext")
    [output] = command.get_outputs()
    return Path(output)
