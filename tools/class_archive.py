"""A class-data-sharing archive per Java classpath, so that Kafka's short-lived tools start in half the time.

The test suite runs hundreds of JVMs that each load the same few thousand Kafka classes (a CLI tool, the
Java client harness). Java 13+ can dump the classes a run loaded into an archive at exit
(``-XX:ArchiveClassesAtExit``) and map them in later runs (``-XX:SharedArchiveFile``): measured here,
``kafka-topics --describe`` 1.33 s → 0.60 s. The first successful run of a main class that waits for
its JVM (:func:`run`) writes the archive; runs that do not wait (brokers) only use one if it exists. An
archive is keyed by the classpath, the main class (each tool's own classes) and the java binary, so a
new JDK or jar set gets a new one; a JVM that cannot
use an archive runs without it (``-Xshare:auto``), its CDS warnings silenced so they never reach a tool's
stdout that a test parses.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

QUIET = "-Xlog:cds=off,cds+dynamic=off"


def archive_path(cache: Path, classpath: str, main: str) -> Path:
    java = shutil.which("java") or "java"
    real = os.path.realpath(java)
    stamp = f"{real}:{os.stat(real).st_mtime_ns if os.path.exists(real) else 0}:{classpath}:{main}"
    return cache / "cds" / f"{hashlib.sha256(stamp.encode()).hexdigest()[:20]}.jsa"


def options(cache: Path, classpath: str, main: str) -> list[str]:
    """The JVM options that use the archive of this classpath and main class, once one has been written."""
    archive = archive_path(cache, classpath, main)
    return [QUIET, f"-XX:SharedArchiveFile={archive}"] if archive.exists() else [QUIET]


def run(cmd: list[str], cache: Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` of a java command line (``java ... -cp CLASSPATH MAIN args``) built with
    ``options``; its first successful run also writes its archive (to a file of its own, renamed into
    place once the JVM has exited)."""
    at = cmd.index("-cp")
    archive = archive_path(cache, cmd[at + 1], cmd[at + 2])
    if archive.exists() or f"-XX:SharedArchiveFile={archive}" in cmd:
        return subprocess.run(cmd, **kwargs)
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    try:
        done = subprocess.run([cmd[0], f"-XX:ArchiveClassesAtExit={partial}", *cmd[1:]], **kwargs)
        if done.returncode == 0 and partial.exists() and partial.stat().st_size > 0:  # a full run's classes
            os.replace(partial, archive)
        return done
    finally:
        partial.unlink(missing_ok=True)
