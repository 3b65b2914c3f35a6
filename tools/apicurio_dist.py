"""Apicurio Registry (a schema registry that keeps its state in a Kafka topic), from Maven Central.

Apicurio publishes its application as a Quarkus "fast-jar" tarball attached to
``io.apicurio:apicurio-registry-app`` (classifier ``all``, type ``tar.gz``): ``quarkus-run.jar``
with ``lib/``, ``app/`` and ``quarkus/`` beside it. ``fetch`` copies that tarball through Maven
into the shared Maven repository of tools.kafka_dist and unpacks it into
``$GRETE_CACHE/apicurio/<version>/app`` (default ``~/.cache/grete``); a stamp makes the second run
a no-op. The application is built for Java 21, so :func:`java` looks for a JDK of at least 21
(``$APICURIO_JAVA_HOME``, ``$JAVA_HOME``, ``java`` on the PATH, then ``/usr/lib/jvm/*``).

    python -m tools.apicurio_dist fetch [--quiet]
    python -m tools.apicurio_dist command <bootstrap> <http-port> <management-port>
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tools.kafka_dist import DEPENDENCY_PLUGIN, cache_root

VERSION = "3.3.3"
ARTIFACT = f"io.apicurio:apicurio-registry-app:{VERSION}:tar.gz:all"
MIN_JAVA = 21
# A small heap and the serial collector, as the other JVMs the tests start on two shared cores;
# C1 only: the registry serves a handful of requests, and C2's compiles slow its start.
JVM_OPTIONS = ("-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


def dist_dir(version: str = VERSION) -> Path:
    return cache_root() / "apicurio" / version


def app_dir(version: str = VERSION) -> Path:
    return dist_dir(version) / "app"


def _stamp(version: str) -> Path:
    return dist_dir(version) / "app.stamp"


def is_fetched(version: str = VERSION) -> bool:
    return _stamp(version).is_file() and (app_dir(version) / "quarkus-run.jar").is_file()


def fetch(version: str = VERSION, quiet: bool = True) -> Path:
    """The unpacked application (``quarkus-run.jar`` inside), fetched first unless already there."""
    if is_fetched(version):
        return app_dir(version)
    if shutil.which("mvn") is None:
        raise RuntimeError("mvn is not installed (apt-get install maven)")
    out = dist_dir(version)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="apicurio.", dir=out) as work:
        cmd = ["mvn", "-B", "-Dstyle.color=never", f"-Dmaven.repo.local={cache_root() / 'm2'}",
               f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact={ARTIFACT.replace(VERSION, version)}",
               f"-DoutputDirectory={work}"]
        if quiet:
            cmd.insert(1, "-q")
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, cwd=work)
        if done.returncode != 0:
            raise RuntimeError(f"mvn failed for {ARTIFACT} ({done.returncode}):\n{done.stdout[-4000:]}")
        tarballs = list(Path(work).glob("*.tar.gz"))
        if len(tarballs) != 1:
            raise RuntimeError(f"expected one tarball from mvn, found {tarballs}")
        # Unpacked beside the final place and swapped in, so an interrupted fetch never looks complete.
        staging = Path(work) / "app"
        with tarfile.open(tarballs[0]) as tar:
            tar.extractall(staging, filter="data")
        if app_dir(version).exists():
            shutil.rmtree(app_dir(version))
        staging.rename(app_dir(version))
    _stamp(version).write_text(ARTIFACT + "\n")
    return app_dir(version)


def java_major(java: Path) -> int | None:
    """The feature release of the JDK ``java`` belongs to, from its ``release`` file or ``-version``."""
    release = java.resolve().parent.parent / "release"
    try:
        text = release.read_text()
    except OSError:
        done = subprocess.run([str(java), "-version"], stdin=subprocess.DEVNULL, capture_output=True, text=True)
        text = done.stderr
    match = re.search(r'(?:^JAVA_VERSION=|version )"(\d+)', text, re.MULTILINE)
    return int(match.group(1)) if match else None


def java(minimum: int = MIN_JAVA) -> Path:
    """A ``java`` of release ``minimum`` or newer."""
    candidates: list[Path] = []
    for home in (os.environ.get("APICURIO_JAVA_HOME"), os.environ.get("JAVA_HOME")):
        if home:
            candidates.append(Path(home) / "bin" / "java")
    on_path = shutil.which("java")
    if on_path:
        candidates.append(Path(on_path))
    candidates += sorted(Path("/usr/lib/jvm").glob("*/bin/java"), reverse=True)
    for candidate in candidates:
        if candidate.is_file() and (java_major(candidate) or 0) >= minimum:
            return candidate
    raise RuntimeError(f"no Java {minimum}+ found (looked at {', '.join(map(str, candidates)) or 'nothing'});"
                       f" Apicurio Registry {VERSION} needs it")


def properties(bootstrap: str, http_port: int, management_port: int) -> dict[str, str]:
    """kafkasql storage on ``bootstrap`` (its default topics: kafkasql-journal, kafkasql-snapshots),
    the REST API and the management interface (health) on 127.0.0.1."""
    return {
        "apicurio.storage.kind": "kafkasql",
        "apicurio.kafkasql.bootstrap.servers": bootstrap,
        "quarkus.http.host": "127.0.0.1",
        "quarkus.http.port": str(http_port),
        "quarkus.management.host": "127.0.0.1",
        "quarkus.management.port": str(management_port),
        # One line per request otherwise; the tests read the log for the Kafka clients' story.
        "quarkus.http.access-log.enabled": "false",
        # Why a start waits on the broker: the consumer's ListOffsets retries (with the error code)
        # are logged at DEBUG only, and a start that gives up shows only a timeout.
        'quarkus.log.category."org.apache.kafka.clients.consumer.internals.OffsetFetcher".level': "DEBUG",
    }


def command(bootstrap: str, http_port: int, management_port: int, extra: dict[str, str] | None = None,
            version: str = VERSION) -> list[str]:
    """The command line that runs the registry (fetched first if needed)."""
    app = fetch(version)
    props = {**properties(bootstrap, http_port, management_port), **(extra or {})}
    return [str(java()), *JVM_OPTIONS, *(f"-D{k}={v}" for k, v in props.items()),
            "-jar", str(app / "quarkus-run.jar")]


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.apicurio_dist")
    sub = parser.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help=f"fetch and unpack Apicurio Registry {VERSION}")
    f.add_argument("--quiet", action="store_true")
    c = sub.add_parser("command", help="print the command line that runs the registry")
    c.add_argument("bootstrap")
    c.add_argument("http_port", type=int)
    c.add_argument("management_port", type=int)
    args = parser.parse_args(argv)
    if args.cmd == "fetch":
        path = fetch(quiet=args.quiet)
        if not args.quiet:
            print(path)
        return 0
    print(" ".join(command(args.bootstrap, args.http_port, args.management_port)))
    return 0


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
