"""Apache Kafka's jars from Maven Central, cached, plus the command lines to run its tools.

kafka.apache.org is not reachable from the test machines, so instead of the binary tarball this
resolves the same jars through Maven: a throwaway pom lists the broker, the tools and a logging
binding; ``mvn dependency:copy-dependencies`` copies the runtime closure into
``$GRETE_CACHE/kafka/<version>/libs`` (default ``~/.cache/grete``). A stamp file holding a hash of
the pom makes the second run a no-op.

    python -m tools.kafka_dist fetch [--all | <version> ...]
    python -m tools.kafka_dist run <version> <tool> [args ...]     # e.g. run 4 kafka-topics --list ...
    python -m tools.kafka_dist classpath <version>
    python -m tools.kafka_dist layout --version 4.3.1 --dest DIR    # bin/, libs/ (with Connect), config/

``layout`` lays out a distribution as Kafka's tarball has it: ``libs/`` from a second resolution that
adds Kafka Connect and its runtime dependencies (``$GRETE_CACHE/kafka/<version>/dist-libs``; the test
classpath above stays without Connect's Jetty and Jersey), ``bin/`` scripts of our own that run each
tool's main class (the tarball's scripts are not on Maven Central; tools/kafka_dist_files.py) and
example ``config/`` files.
"""

from __future__ import annotations

import argparse
import filecmp
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools import class_archive, kafka_dist_files

# The two pinned releases. 4.4.0 was only partly on Central when this was written (no kafka-tools).
PINNED: tuple[str, ...] = ("3.9.2", "4.3.1")
ALIASES: dict[str, str] = {"3.9": "3.9.2", "4": "4.3.1", "4.3": "4.3.1"}

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
JAVA_HEAP = os.environ.get("GRETE_KAFKA_HEAP", "-Xmx512m")
# What bin/kafka-server-start.sh and bin/kafka-run-class.sh give a broker when nothing is set
# (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS): benchmarks compare against Kafka as shipped.
# Tests keep the lighter serial collector and smaller heap: they start many brokers on two cores.
KAFKA_SERVER_JVM = ("-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                    "-XX:MaxInlineLevel=15")


@dataclass(frozen=True)
class Artifact:
    group: str
    artifact: str
    version: str
    exclusions: tuple[str, ...] = ()  # "group:artifact"


def resolve_version(version: str) -> str:
    """'3.9' / '4' / 'kafka-4' -> the pinned full version; a full version passes through."""
    v = version.removeprefix("kafka-")
    return ALIASES.get(v, v)


def major(version: str) -> int:
    return int(resolve_version(version).split(".")[0])


def artifacts(version: str) -> list[Artifact]:
    """What the distribution's libs/ needs for the broker and the CLI tools we drive."""
    v = resolve_version(version)
    kafka = "org.apache.kafka"
    deps = [
        Artifact(kafka, "kafka_2.13", v),
        Artifact(kafka, "kafka-clients", v),
        Artifact(kafka, "kafka-server", v),
        Artifact(kafka, "kafka-storage", v),
        # connect-runtime drags in Jetty/Jersey for the connect-plugin-path tool only; none of ours need it.
        Artifact(kafka, "kafka-tools", v, exclusions=(f"{kafka}:connect-runtime",)),
        # Kafka Streams, for tools/java/StreamsWordCount.java (compat-tests/kafka-streams).
        Artifact(kafka, "kafka-streams", v),
    ]
    if major(v) >= 4:
        # 4.x ships log4j2 behind slf4j 1.7 (what its own libs/ holds).
        log4j = "2.25.4"
        deps += [
            Artifact("org.apache.logging.log4j", "log4j-slf4j-impl", log4j),
            Artifact("org.apache.logging.log4j", "log4j-core", log4j),
            Artifact("org.apache.logging.log4j", "log4j-api", log4j),
        ]
    else:
        # 3.x ships reload4j (a maintained log4j 1.2) behind slf4j 1.7.
        deps += [
            Artifact("org.slf4j", "slf4j-reload4j", "1.7.36"),
            Artifact("ch.qos.reload4j", "reload4j", "1.2.25"),
        ]
    return deps


# Kafka Connect's jars for a laid-out distribution. connect-basic-auth-extension is not on Maven
# Central for 3.9.2, so only 4.x gets it.
CONNECT_ARTIFACTS: tuple[str, ...] = ("connect-api", "connect-runtime", "connect-json", "connect-file",
                                      "connect-transforms", "connect-mirror", "connect-mirror-client")


def dist_artifacts(version: str) -> list[Artifact]:
    """libs/ of a laid-out distribution: everything :func:`artifacts` lists (kafka-tools with its
    connect-runtime dependency kept) plus Kafka Connect."""
    v = resolve_version(version)
    kafka = "org.apache.kafka"
    deps = [Artifact(a.group, a.artifact, a.version) if a.artifact == "kafka-tools" else a for a in artifacts(v)]
    connect = CONNECT_ARTIFACTS + (("connect-basic-auth-extension",) if major(v) >= 4 else ())
    return deps + [Artifact(kafka, name, v) for name in connect]


def shell_pom_xml(version: str) -> str:
    """kafka-metadata-shell's jar and what it needs, kept apart from libs/ (only its tests use it)."""
    v = resolve_version(version)
    return _pom(v, "kafka-shell-dist", [Artifact("org.apache.kafka", "kafka-shell", v)])


def pom_xml(version: str) -> str:
    return _pom(resolve_version(version), "kafka-dist", artifacts(version))


def dist_pom_xml(version: str) -> str:
    return _pom(resolve_version(version), "kafka-dist-connect", dist_artifacts(version))


def _pom(v: str, artifact_id: str, deps: list[Artifact]) -> str:
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<project xmlns="http://maven.apache.org/POM/4.0.0">',
        "  <modelVersion>4.0.0</modelVersion>",
        "  <groupId>grete.testing</groupId>",
        f"  <artifactId>{artifact_id}</artifactId>",
        f"  <version>{v}</version>",
        "  <packaging>pom</packaging>",
        "  <dependencies>",
    ]
    for a in deps:
        parts.append("    <dependency>")
        parts.append(f"      <groupId>{a.group}</groupId><artifactId>{a.artifact}</artifactId>"
                     f"<version>{a.version}</version>")
        if a.exclusions:
            parts.append("      <exclusions>")
            for ex in a.exclusions:
                g, n = ex.split(":")
                parts.append(f"        <exclusion><groupId>{g}</groupId><artifactId>{n}</artifactId></exclusion>")
            parts.append("      </exclusions>")
        parts.append("    </dependency>")
    parts += ["  </dependencies>", "</project>", ""]
    return "\n".join(parts)


def cache_root() -> Path:
    base = os.environ.get("GRETE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "grete")
    return Path(base)


def dist_dir(version: str) -> Path:
    return cache_root() / "kafka" / resolve_version(version)


def libs_dir(version: str) -> Path:
    return dist_dir(version) / "libs"


def dist_libs_dir(version: str) -> Path:
    """libs/ of a laid-out distribution (with Connect), shared by every layout of the version."""
    return dist_dir(version) / "dist-libs"


def _stamp(version: str) -> Path:
    return dist_dir(version) / "libs.stamp"


def is_fetched(version: str) -> bool:
    return _stamped(_stamp(version), pom_xml(version))


def fetch(version: str, quiet: bool = True) -> Path:
    """Resolve the jars into libs/ unless the stamp says they are already there. Returns libs/."""
    v = resolve_version(version)
    return _fetch_stamped(libs_dir(v), _stamp(v), pom_xml(v), f"kafka {v}", quiet)


def _dist_stamp(version: str) -> Path:
    return dist_dir(version) / "dist-libs.stamp"


def is_dist_fetched(version: str) -> bool:
    return _stamped(_dist_stamp(version), dist_pom_xml(version))


def fetch_dist(version: str, quiet: bool = True) -> Path:
    """As :func:`fetch`, for a distribution's libs/ (Kafka and Kafka Connect). Returns that libs/."""
    v = resolve_version(version)
    return _fetch_stamped(dist_libs_dir(v), _dist_stamp(v), dist_pom_xml(v), f"kafka {v} with Connect", quiet)


def shell_libs_dir(version: str) -> Path:
    return dist_dir(version) / "shell-libs"


def is_shell_fetched(version: str) -> bool:
    return _stamped(dist_dir(version) / "shell-libs.stamp", shell_pom_xml(version))


def fetch_shell(version: str, quiet: bool = True) -> Path:
    """As :func:`fetch`, for kafka-metadata-shell's jars. Returns their directory."""
    v = resolve_version(version)
    return _fetch_stamped(shell_libs_dir(v), dist_dir(v) / "shell-libs.stamp", shell_pom_xml(v),
                          f"kafka {v} metadata shell", quiet)


def shell_cmd(version: str, *args: str) -> list[str]:
    """``kafka-metadata-shell`` (org.apache.kafka.shell.MetadataShell) with ``args``."""
    first = os.pathsep.join(sorted(str(p) for p in fetch_shell(version).glob("*.jar")))
    return java_cmd(version, "org.apache.kafka.shell.MetadataShell", *args, classpath_first=first)


def _stamped(stamp: Path, pom: str) -> bool:
    return stamp.is_file() and stamp.read_text().strip() == hashlib.sha256(pom.encode()).hexdigest()


def _fetch_stamped(libs: Path, stamp: Path, pom: str, what: str, quiet: bool) -> Path:
    if _stamped(stamp, pom):
        return libs
    if shutil.which("mvn") is None:
        raise RuntimeError("mvn is not installed (apt-get install maven)")
    libs.parent.mkdir(parents=True, exist_ok=True)
    resolve_into(libs, pom, what, quiet=quiet)
    stamp.write_text(hashlib.sha256(pom.encode()).hexdigest() + "\n")
    return libs


def resolve_into(out: Path, pom: str, what: str, *, quiet: bool = True, settings_xml: str | None = None,
                 prune: Callable[[Path], None] | None = None) -> None:
    """Copy the runtime dependencies of ``pom`` into ``out`` with Maven (jars shared with the local
    repository by hard links). Resolves into a fresh directory and swaps it in, so an interrupted
    fetch never looks complete; ``prune`` may drop jars from it first."""
    staging = Path(tempfile.mkdtemp(prefix=f"{out.name}.", dir=out.parent))
    try:
        with tempfile.TemporaryDirectory(prefix="grete-pom.") as work:
            pom_path = Path(work) / "pom.xml"
            pom_path.write_text(pom)
            cmd = ["mvn", "-B", "-Dstyle.color=never", "-f", str(pom_path), f"-Dmaven.repo.local={cache_root() / 'm2'}",
                   f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime",
                   f"-DoutputDirectory={staging}"]
            if settings_xml is not None:
                settings = Path(work) / "settings.xml"
                settings.write_text(settings_xml)
                cmd[1:1] = ["-s", str(settings)]
            if quiet:
                cmd.insert(1, "-q")
            done = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"mvn failed for {what} ({done.returncode}):\n{done.stdout[-4000:]}")
        if prune is not None:
            prune(staging)
        _link_to_repo(staging)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def _link_to_repo(libs: Path) -> None:
    """Replace each copied jar by a hard link to its twin in the Maven repo, halving the cache's disk use."""
    repo = cache_root() / "m2"
    twins = {p.name: p for p in repo.rglob("*.jar")}
    for jar in libs.glob("*.jar"):
        twin = twins.get(jar.name)
        if twin is None or twin.stat().st_size != jar.stat().st_size or not filecmp.cmp(jar, twin, shallow=False):
            continue
        try:
            tmp = jar.with_suffix(".link")
            os.link(twin, tmp)
            tmp.replace(jar)
        except OSError:  # another filesystem: keep the copy
            pass


def kafka_classpath(version: str) -> str:
    """The classpath of every jar in the version's libs/ (fetched first if needed)."""
    libs = fetch(version)
    jars = sorted(str(p) for p in libs.glob("*.jar"))
    if not jars:
        raise RuntimeError(f"no jars in {libs}")
    return os.pathsep.join(jars)


# Tool name -> main class, per major version, as found by listing the jars (several tools moved
# from the Scala core jar into kafka-tools between 3.9 and 4.x). tests/test_tooling.py asserts that
# every class named here exists in the pinned version's jars.
_TOOLS_COMMON: dict[str, str] = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-delegation-tokens": "org.apache.kafka.tools.DelegationTokenCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
    "kafka-server-start": "kafka.Kafka",
}
_TOOLS_BY_MAJOR: dict[int, dict[str, str]] = {
    3: {
        "kafka-console-producer": "kafka.tools.ConsoleProducer",
        "kafka-dump-log": "kafka.tools.DumpLogSegments",
        "kafka-broker-api-versions": "kafka.admin.BrokerApiVersionsCommand",
        "kafka-acls": "kafka.admin.AclCommand",
    },
    4: {
        "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
        "kafka-dump-log": "org.apache.kafka.tools.DumpLogSegments",
        "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
        "kafka-acls": "org.apache.kafka.tools.AclCommand",
    },
}


def tools(version: str) -> dict[str, str]:
    table = dict(_TOOLS_COMMON)
    table.update(_TOOLS_BY_MAJOR.get(major(version), {}))
    return table


def main_class(version: str, tool: str) -> str:
    table = tools(version)
    if tool in table:
        return table[tool]
    if "." in tool or tool[:1].isupper():  # already a class name
        return tool
    raise KeyError(f"unknown Kafka tool {tool!r}; known: {', '.join(sorted(table))}")


def log_config(version: str) -> Path:
    """A logging config (written once into the cache): INFO to stderr, noisy packages at WARN."""
    path = dist_dir(version) / ("log4j2.properties" if major(version) >= 4 else "log4j.properties")
    if path.is_file():
        return path
    if major(version) >= 4:
        text = (
            "status = warn\n"
            "appender.err.type = Console\nappender.err.name = STDERR\nappender.err.target = SYSTEM_ERR\n"
            "appender.err.layout.type = PatternLayout\n"
            "appender.err.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = ${sys:grete.kafka.loglevel:-WARN}\n"
            "rootLogger.appenderRef.err.ref = STDERR\n"
        )
    else:
        text = (
            "log4j.rootLogger=${grete.kafka.loglevel}, stderr\n"
            "log4j.appender.stderr=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.stderr.Target=System.err\n"
            "log4j.appender.stderr.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def java_cmd(version: str, main: str, *args: str, log_level: str = "WARN",
             heap: str = JAVA_HEAP, quick_start: bool = True, jvm: tuple[str, ...] | None = None,
             classpath_first: str | None = None) -> list[str]:
    """The java command line that runs ``main`` (a class or a tool name) from the version's jars
    (``classpath_first`` ahead of them).

    ``quick_start`` (for short-lived CLI tools) stops the JIT at C1: a tool then starts in about half
    the time, but a long-running broker wants the full JIT. ``jvm`` replaces the heap and collector
    options (``heap`` plus the serial collector), e.g. with :data:`KAFKA_SERVER_JVM`. The classpath's
    class-data archive is used when one exists (tools/class_archive.py; :func:`run_java` writes it).
    """
    v = resolve_version(version)
    cls = main_class(v, main)
    classpath = kafka_classpath(v) if classpath_first is None else f"{classpath_first}{os.pathsep}{kafka_classpath(v)}"
    logging = (
        [f"-Dlog4j2.configurationFile={log_config(v)}"] if major(v) >= 4
        else [f"-Dlog4j.configuration=file:{log_config(v)}"]
    )
    jit = ["-XX:TieredStopAtLevel=1"] if quick_start else []
    return [
        "java", *(jvm if jvm is not None else (heap, "-XX:+UseSerialGC")), *jit, "-Xshare:auto",
        *class_archive.options(cache_root(), classpath, cls),
        "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
        f"-Dgrete.kafka.loglevel={log_level}", *logging,
        "-cp", classpath, cls, *args,
    ]


def run_java(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` of a :func:`java_cmd` line; the first run of its classpath writes the
    classpath's class-data archive, which later JVMs map (their start in half the time)."""
    return class_archive.run(cmd, cache_root(), **kwargs)


HARNESS_SOURCES = Path(__file__).resolve().parent / "java"
HARNESS_JAR = "grete-harness.jar"


def harness_classes(version: str) -> Path:
    """tools/java/*.java compiled against this version's jars (once per source change), into a jar in
    the cache (a jar, not a folder of classes: a class-data archive takes classes from jars only)."""
    sources = sorted(HARNESS_SOURCES.glob("*.java"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    out = dist_dir(version) / f"harness-{digest}"
    if (out / ".done").is_file() and (out / HARNESS_JAR).is_file():
        return out / HARNESS_JAR
    if shutil.which("javac") is None:
        raise RuntimeError("javac is not installed (a JDK is needed for the Java client harness)")
    staging = Path(tempfile.mkdtemp(prefix="harness.", dir=dist_dir(version)))
    try:
        classes = staging / "classes"
        done = subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", kafka_classpath(version),
                               *map(str, sources)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"javac failed against Kafka {version}:\n{done.stderr[-4000:]}")
        with zipfile.ZipFile(staging / HARNESS_JAR, "w") as jar:
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        shutil.rmtree(classes)
        (staging / ".done").write_text(digest + "\n")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
        for old in dist_dir(version).glob("harness-*"):  # builds of older sources
            if old != out:
                shutil.rmtree(old, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return out / HARNESS_JAR


def harness_cmd(version: str, *args: str) -> list[str]:
    """java command line for tools/java/GreteJavaClient with this version's kafka-clients."""
    return java_cmd(version, "GreteJavaClient", *args, classpath_first=str(harness_classes(version)))


def run_tool(version: str, tool: str, *args: str, timeout: float = 120.0, check: bool = False,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a Kafka CLI tool to completion and capture its output."""
    return run_java(java_cmd(version, tool, *args), capture_output=True, text=True,
                    timeout=timeout, check=check, input=input,
                    stdin=None if input is not None else subprocess.DEVNULL)


# --- a laid-out distribution -------------------------------------------------------------------

def dist_scripts(version: str) -> dict[str, str]:
    """bin/ script name (without .sh) -> the main class it runs: every tool above, and Connect."""
    return {**tools(version), **kafka_dist_files.CONNECT_CLASSES}


def jar_classes(libs: Path) -> set[str]:
    """Every class name in the jars of ``libs``."""
    classes: set[str] = set()
    for jar in libs.glob("*.jar"):
        with zipfile.ZipFile(jar) as z:
            classes.update(n[:-6].replace("/", ".") for n in z.namelist() if n.endswith(".class"))
    return classes


def layout(version: str, dest: Path) -> Path:
    """Lay out Kafka ``version`` in ``dest``: libs/ (hard links into the cache, copies across file
    systems), bin/ and config/. libs/ and bin/ are replaced; a config/ file already there is kept (it
    may hold the user's edits). Refuses, before writing, if a script's main class is not in the jars."""
    v = resolve_version(version)
    libs = fetch_dist(v)
    scripts = dist_scripts(v)
    missing = sorted(set(scripts.values()) - jar_classes(libs))
    if missing:
        raise RuntimeError(f"Kafka {v}'s jars have no {', '.join(missing)}")
    dest.mkdir(parents=True, exist_ok=True)
    _replace_dir(dest / "libs", lambda staging: _link_jars(libs, staging))
    _replace_dir(dest / "bin", lambda staging: _write_scripts(v, scripts, staging))
    config = dest / "config"
    config.mkdir(exist_ok=True)
    for name, text in kafka_dist_files.config_files(major(v)).items():
        if not (config / name).exists():
            (config / name).write_text(text)
    return dest


def _replace_dir(target: Path, fill: Callable[[Path], None]) -> None:
    """Build ``target``'s new content beside it, then swap it in (an interrupted layout leaves the old one)."""
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        fill(staging)
        staging.chmod(0o755)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def _link_jars(source: Path, out: Path) -> None:
    for jar in sorted(source.glob("*.jar")):
        try:
            os.link(jar, out / jar.name)
        except OSError:  # another file system
            shutil.copy2(jar, out / jar.name)


def _write_scripts(version: str, scripts: dict[str, str], out: Path) -> None:
    files = {"kafka-run-class": kafka_dist_files.run_class_sh(version, major(version))}
    for name, cls in scripts.items():
        if name in kafka_dist_files.SERVICES:
            files[name] = kafka_dist_files.service_sh(version, major(version), name, cls)
        else:
            files[name] = kafka_dist_files.tool_sh(version, name, cls)
    for name, text in files.items():
        path = out / f"{name}.sh"
        path.write_text(text)
        path.chmod(0o755)


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.kafka_dist")
    sub = parser.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="resolve the jars into the cache")
    f.add_argument("versions", nargs="*")
    f.add_argument("--all", action="store_true", help=f"every pinned version: {', '.join(PINNED)}")
    f.add_argument("--quiet", action="store_true", help="say nothing when everything is cached")
    f.add_argument("--with-connect", action="store_true", help="also the jars of a laid-out distribution")
    f.add_argument("--with-shell", action="store_true", help="also kafka-metadata-shell's jars (4.x)")
    c = sub.add_parser("classpath", help="print the classpath")
    c.add_argument("version")
    r = sub.add_parser("run", help="run a Kafka CLI tool (kafka-topics, kafka-dump-log, ...)")
    r.add_argument("version")
    r.add_argument("tool")
    r.add_argument("args", nargs=argparse.REMAINDER)
    sub.add_parser("tools", help="list tool names")
    lay = sub.add_parser("layout", help="lay out a distribution: bin/, libs/ (with Connect), config/")
    lay.add_argument("--version", default=PINNED[-1], help=f"default {PINNED[-1]}")
    lay.add_argument("--dest", required=True, type=Path)
    a = parser.parse_args(argv)
    if a.cmd == "fetch":
        versions = list(PINNED) if a.all or not a.versions else a.versions
        sets = [("", is_fetched, fetch)] + ([(" with Connect", is_dist_fetched, fetch_dist)] if a.with_connect else [])
        shell = [(" metadata shell", is_shell_fetched, fetch_shell)] if a.with_shell else []
        for v in versions:
            for what, cached, get in sets + (shell if major(v) >= 4 else []):
                t0 = time.monotonic()
                was = cached(v)
                libs = get(v, quiet=True)
                if was and a.quiet:
                    continue
                state = "cached" if was else f"fetched in {time.monotonic() - t0:.1f}s"
                print(f"kafka {resolve_version(v)}{what}: {state} -> {libs}", file=sys.stderr if a.quiet else sys.stdout)
        return 0
    if a.cmd == "classpath":
        print(kafka_classpath(a.version))
        return 0
    if a.cmd == "layout":
        dest = layout(a.version, a.dest)
        print(f"kafka {resolve_version(a.version)}: {dest} (bin/, libs/, config/)")
        return 0
    if a.cmd == "tools":
        for v in PINNED:
            for name, cls in sorted(tools(v).items()):
                print(f"{v}\t{name}\t{cls}")
        return 0
    cmd = java_cmd(a.version, a.tool, *a.args)
    os.execvp(cmd[0], cmd)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
