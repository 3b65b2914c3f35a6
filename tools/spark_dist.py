"""Spark's Kafka connector jars from Maven Central, cached once, for ``spark.jars``.

PySpark ships Spark itself but not the Kafka connector. ``spark.jars.packages`` would resolve it with
Ivy on every JVM start (slow, and network each time), so instead this resolves
``org.apache.spark:spark-sql-kafka-0-10_2.13:<pyspark version>`` and its runtime closure the same
way tools/kafka_dist.py resolves Kafka: a throwaway pom and ``mvn dependency:copy-dependencies``
into ``$GRETE_CACHE/spark/<version>/jars`` (default ``~/.cache/grete``), with a stamp file so a
second run is a no-op. Jars whose artifact pyspark already ships (hadoop-client-*, slf4j, lz4, ...)
are left out, so the classpath never holds two versions of one library.

    python -m tools.spark_dist fetch [--quiet] [<version>]
    python -m tools.spark_dist jars [<version>]          # comma-separated, for --conf spark.jars=...
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import sys
import time
from pathlib import Path

from tools.kafka_dist import Artifact, cache_root, resolve_into

CONNECTOR = "spark-sql-kafka-0-10_2.13"
TOKEN_PROVIDER = "spark-token-provider-kafka-0-10_2.13"
# The big Hadoop client jars are in pyspark/jars already; excluding them keeps Maven from
# downloading ~50 MB we would throw away. The token provider is resolved on its own (see FALLBACK).
EXCLUDED: tuple[str, ...] = (
    "org.apache.hadoop:hadoop-client-runtime",
    "org.apache.hadoop:hadoop-client-api",
    f"org.apache.spark:{TOKEN_PROVIDER}",
)
# pyspark version -> (connector version, token-provider version) where Central lacks the exact ones.
# The Maven Central reachable from the test machines has no Spark 4.3.0 artifacts at all, and no
# token provider after 4.0.0 (checked 2026-11: 4.2.0/4.1.x/4.0.1+ give 404). The connector's classes
# load and run under pyspark 4.3.0 (compat-tests/spark is the proof); the token provider only
# matters for delegation tokens, which none of this uses. Drop the entry once Central has 4.3.0.
FALLBACK: dict[str, tuple[str, str]] = {
    "4.3.0": ("4.2.0", "4.0.0"),
}
CENTRAL = "https://repo.maven.apache.org/maven2"
# Spark's parent pom lists a Google Cloud mirror of Central first, which is not reachable from the
# test machines; routing every repository to Central keeps resolution on the one host we can reach.
SETTINGS_XML = (
    '<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0"><mirrors><mirror>'
    f'<id>central-only</id><mirrorOf>*</mirrorOf><url>{CENTRAL}</url>'
    "</mirror></mirrors></settings>\n"
)


def pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def pyspark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def resolved_versions(version: str) -> tuple[str, str]:
    """(connector, token provider) versions used for this pyspark version."""
    return FALLBACK.get(version, (version, version))


def artifacts(version: str) -> list[Artifact]:
    conn, token = resolved_versions(version)
    return [
        Artifact("org.apache.spark", CONNECTOR, conn, exclusions=EXCLUDED),
        # Alone: its own dependencies are Spark core and kafka-clients, which we have.
        Artifact("org.apache.spark", TOKEN_PROVIDER, token, exclusions=("*:*",)),
    ]


def _dependency(a: Artifact) -> str:
    exclusions = "".join(
        f"<exclusion><groupId>{g}</groupId><artifactId>{n}</artifactId></exclusion>"
        for g, n in (ex.split(":") for ex in a.exclusions)
    )
    return (f"    <dependency><groupId>{a.group}</groupId><artifactId>{a.artifact}</artifactId>"
            f"<version>{a.version}</version><exclusions>{exclusions}</exclusions></dependency>")


def pom_xml(version: str) -> str:
    return "\n".join([
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<project xmlns="http://maven.apache.org/POM/4.0.0">',
        "  <modelVersion>4.0.0</modelVersion>",
        "  <groupId>grete.testing</groupId>",
        "  <artifactId>spark-kafka-dist</artifactId>",
        f"  <version>{version}</version>",
        "  <packaging>pom</packaging>",
        "  <dependencies>",
        *(_dependency(a) for a in artifacts(version)),
        "  </dependencies>",
        "</project>",
        "",
    ])


def dist_dir(version: str) -> Path:
    return cache_root() / "spark" / version


def jars_dir(version: str) -> Path:
    return dist_dir(version) / "jars"


def _stamp(version: str) -> Path:
    return dist_dir(version) / "jars.stamp"


def _pom_hash(version: str) -> str:
    return hashlib.sha256(pom_xml(version).encode()).hexdigest()


def is_fetched(version: str) -> bool:
    stamp = _stamp(version)
    return stamp.is_file() and stamp.read_text().strip() == _pom_hash(version)


def _artifact_name(jar: str) -> str:
    """'spark-sql-kafka-0-10_2.13-4.2.0.jar' -> 'spark-sql-kafka-0-10_2.13' (version: '-<n>.<n>')."""
    return re.split(r"-\d+\.\d", jar.removesuffix(".jar"), maxsplit=1)[0]


def _drop_shipped(jars: Path, shipped: Path) -> None:
    """Remove jars whose artifact pyspark already has, whatever the version (pyspark's wins)."""
    have = {_artifact_name(p.name) for p in shipped.glob("*.jar")}
    for jar in jars.glob("*.jar"):
        if _artifact_name(jar.name) in have:
            jar.unlink()


def fetch(version: str | None = None, quiet: bool = True) -> Path:
    """Resolve the connector into jars/ unless the stamp says it is there already. Returns jars/."""
    v = version or pyspark_version()
    out = jars_dir(v)
    if is_fetched(v):
        return out
    if shutil.which("mvn") is None:
        raise RuntimeError("mvn is not installed (apt-get install maven)")
    dist = dist_dir(v)
    dist.mkdir(parents=True, exist_ok=True)
    resolve_into(out, pom_xml(v), f"{CONNECTOR}:{v}", quiet=quiet, settings_xml=SETTINGS_XML,
                 prune=lambda staging: _drop_shipped(staging, pyspark_jars_dir()))
    _stamp(v).write_text(_pom_hash(v) + "\n")
    return out


def jar_paths(version: str | None = None) -> list[str]:
    """Absolute paths of the connector's jars (fetched first if needed)."""
    jars = sorted(str(p) for p in fetch(version).glob("*.jar"))
    if not any(CONNECTOR in j for j in jars):
        raise RuntimeError(f"{CONNECTOR} missing from {jars_dir(version or pyspark_version())}")
    return jars


def spark_jars(version: str | None = None) -> str:
    """The value for the ``spark.jars`` setting."""
    return ",".join(jar_paths(version))


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.spark_dist")
    sub = parser.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="resolve the connector jars into the cache")
    f.add_argument("version", nargs="?", help="Spark version (default: the installed pyspark's)")
    f.add_argument("--quiet", action="store_true", help="say nothing when everything is cached")
    j = sub.add_parser("jars", help="print the spark.jars value")
    j.add_argument("version", nargs="?")
    a = parser.parse_args(argv)
    v = a.version or pyspark_version()
    if a.cmd == "jars":
        print(spark_jars(v))
        return 0
    t0 = time.monotonic()
    was = is_fetched(v)
    out = fetch(v, quiet=True)
    if not (was and a.quiet):
        state = "cached" if was else f"fetched in {time.monotonic() - t0:.1f}s"
        print(f"spark-sql-kafka {v}: {state} -> {out}", file=sys.stderr if a.quiet else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
