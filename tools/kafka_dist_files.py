"""The text files of a laid-out Kafka distribution (``python -m tools.kafka_dist layout``): the
``bin/`` scripts and the ``config/`` files.

Kafka's own ``bin/*.sh`` and ``config/*`` ship only in the release tarball, not on Maven Central, so
these are small equivalents written for grete: the same script names, environment variables
(``KAFKA_HEAP_OPTS``, ``KAFKA_JVM_PERFORMANCE_OPTS``, ``KAFKA_LOG4J_OPTS``, ``KAFKA_OPTS``,
``CLASSPATH``, ``JAVA_HOME``, ``LOG_DIR``) and defaults, and config files with Kafka's keys.
Pure text: nothing here imports tools.kafka_dist.
"""

from __future__ import annotations

from dataclasses import dataclass

# Kafka's kafka-run-class.sh defaults (the heap is raised by the server and Connect scripts).
DEFAULT_HEAP = "-Xmx256M"
DEFAULT_JVM = ("-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 "
               "-XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true")


@dataclass(frozen=True)
class Launcher:
    """What a long-running bin/ script sets before kafka-run-class.sh (a CLI tool sets nothing)."""

    heap: str  # KAFKA_HEAP_OPTS when unset
    log_config: str  # config/ file for KAFKA_LOG4J_OPTS when unset (without the extension)
    name: str  # -name for -daemon: logs/<name>.out


# Scripts that run a service rather than a one-shot tool: Kafka's own heap and log config choices.
SERVICES: dict[str, Launcher] = {
    "kafka-server-start": Launcher("-Xmx1G -Xms1G", "log4j", "kafkaServer"),
    "connect-distributed": Launcher("-Xms256M -Xmx2G", "connect-log4j", "connectDistributed"),
    "connect-standalone": Launcher("-Xms256M -Xmx2G", "connect-log4j", "connectStandalone"),
    "connect-mirror-maker": Launcher("-Xms256M -Xmx2G", "connect-log4j", "mirrorMaker"),
}

CONNECT_CLASSES: dict[str, str] = {
    "connect-distributed": "org.apache.kafka.connect.cli.ConnectDistributed",
    "connect-standalone": "org.apache.kafka.connect.cli.ConnectStandalone",
    "connect-mirror-maker": "org.apache.kafka.connect.mirror.MirrorMaker",
}


def log4j_opt(version_major: int, base: str, log_config: str) -> str:
    """The JVM option that points Kafka's logging (log4j2 from 4.0, reload4j before) at a config file."""
    if version_major >= 4:
        return f"-Dlog4j2.configurationFile={base}/config/{log_config}2.properties"
    return f"-Dlog4j.configuration=file:{base}/config/{log_config}.properties"


def run_class_sh(version: str, version_major: int) -> str:
    log_opt = log4j_opt(version_major, "$base_dir", "tools-log4j")
    return f"""#!/usr/bin/env bash
# Kafka {version}: runs a Java main class with every jar in this distribution's libs/ on the classpath.
#   kafka-run-class.sh [-daemon] [-name NAME] CLASS [ARGS...]
# Environment, as Kafka's script: JAVA_HOME, KAFKA_HEAP_OPTS ({DEFAULT_HEAP}), KAFKA_JVM_PERFORMANCE_OPTS
# (G1), KAFKA_LOG4J_OPTS (config/tools-log4j*), KAFKA_OPTS, CLASSPATH (put first), LOG_DIR (logs/).
set -e
base_dir=$(cd "$(dirname "${{BASH_SOURCE[0]}}")/.." && pwd)
if [ $# -lt 1 ]; then
  echo "USAGE: $0 [-daemon] [-name servicename] classname [opts]" >&2
  exit 1
fi
daemon=
name=kafka
while [ $# -gt 0 ]; do
  case "$1" in
    -daemon) daemon=1; shift ;;
    -name) name=$2; shift 2 ;;
    *) break ;;
  esac
done
LOG_DIR=${{LOG_DIR:-$base_dir/logs}}
mkdir -p "$LOG_DIR"
classpath="$base_dir/libs/*"
if [ -n "${{CLASSPATH:-}}" ]; then classpath="$CLASSPATH:$classpath"; fi
java=java
if [ -n "${{JAVA_HOME:-}}" ]; then java="$JAVA_HOME/bin/java"; fi
# The *_OPTS variables are split on purpose: each holds several JVM options.
# shellcheck disable=SC2206
cmd=("$java" ${{KAFKA_HEAP_OPTS:-{DEFAULT_HEAP}}} ${{KAFKA_JVM_PERFORMANCE_OPTS:-{DEFAULT_JVM}}}
     ${{KAFKA_LOG4J_OPTS:-{log_opt}}} "-Dkafka.logs.dir=$LOG_DIR"
     -cp "$classpath" ${{KAFKA_OPTS:-}} "$@")
if [ -n "$daemon" ]; then
  nohup "${{cmd[@]}}" > "$LOG_DIR/$name.out" 2>&1 < /dev/null &
else
  exec "${{cmd[@]}}"
fi
"""


def tool_sh(version: str, script: str, main_class: str) -> str:
    return f"""#!/usr/bin/env bash
# Kafka {version}: {script}.sh runs {main_class}.
exec "$(dirname "${{BASH_SOURCE[0]}}")/kafka-run-class.sh" {main_class} "$@"
"""


def service_sh(version: str, version_major: int, script: str, main_class: str) -> str:
    launcher = SERVICES[script]
    log_opt = log4j_opt(version_major, "$base_dir", launcher.log_config)
    return f"""#!/usr/bin/env bash
# Kafka {version}: {script}.sh [-daemon] PROPERTIES... runs {main_class}.
# KAFKA_HEAP_OPTS defaults to "{launcher.heap}" and KAFKA_LOG4J_OPTS to config/{launcher.log_config}*.
base_dir=$(cd "$(dirname "${{BASH_SOURCE[0]}}")/.." && pwd)
if [ $# -lt 1 ]; then
  echo "USAGE: $0 [-daemon] properties-file [...]" >&2
  exit 1
fi
export KAFKA_HEAP_OPTS=${{KAFKA_HEAP_OPTS:-"{launcher.heap}"}}
export KAFKA_LOG4J_OPTS=${{KAFKA_LOG4J_OPTS:-"{log_opt}"}}
extra=(-name {launcher.name})
if [ "$1" = "-daemon" ]; then extra=(-daemon "${{extra[@]}}"); shift; fi
exec "$base_dir/bin/kafka-run-class.sh" "${{extra[@]}}" {main_class} "$@"
"""


# --- config/ --------------------------------------------------------------------------------

def server_properties(version_major: int) -> str:
    """Kafka's single-node example: KRaft (broker + controller) for 4.x, ZooKeeper mode for 3.x."""
    common = (
        "num.partitions=1\n"
        "offsets.topic.replication.factor=1\n"
        "transaction.state.log.replication.factor=1\n"
        "transaction.state.log.min.isr=1\n"
        "log.retention.hours=168\n"
        "log.segment.bytes=1073741824\n"
    )
    if version_major >= 4:
        return (
            "# A single Kafka node that is both broker and controller (KRaft). Before the first start:\n"
            "#   bin/kafka-storage.sh format --standalone -t $(bin/kafka-storage.sh random-uuid) "
            "-c config/server.properties\n"
            "process.roles=broker,controller\n"
            "node.id=1\n"
            "controller.quorum.bootstrap.servers=localhost:9093\n"
            "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\n"
            "inter.broker.listener.name=PLAINTEXT\n"
            "advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093\n"
            "controller.listener.names=CONTROLLER\n"
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n"
            "log.dirs=/tmp/kraft-combined-logs\n"
            "share.coordinator.state.topic.replication.factor=1\n"
            "share.coordinator.state.topic.min.isr=1\n"
            + common
        )
    return (
        "# A single Kafka broker in ZooKeeper mode (ZooKeeper on localhost:2181).\n"
        "broker.id=0\n"
        "listeners=PLAINTEXT://:9092\n"
        "log.dirs=/tmp/kafka-logs\n"
        "zookeeper.connect=localhost:2181\n"
        "zookeeper.connection.timeout.ms=18000\n"
        "group.initial.rebalance.delay.ms=0\n"
        + common
    )


_JSON_CONVERTERS = (
    "key.converter=org.apache.kafka.connect.json.JsonConverter\n"
    "value.converter=org.apache.kafka.connect.json.JsonConverter\n"
    "key.converter.schemas.enable=true\n"
    "value.converter.schemas.enable=true\n"
)

# Every jar of libs/ is on the worker's classpath, the file connectors' included: plugin.path is
# only needed for connectors installed elsewhere.
_PLUGIN_PATH = "#plugin.path=/usr/local/share/kafka/plugins\n"

CONNECT_DISTRIBUTED = (
    "bootstrap.servers=localhost:9092\n"
    "group.id=connect-cluster\n"
    + _JSON_CONVERTERS
    + "offset.storage.topic=connect-offsets\n"
    "offset.storage.replication.factor=1\n"
    "config.storage.topic=connect-configs\n"
    "config.storage.replication.factor=1\n"
    "status.storage.topic=connect-status\n"
    "status.storage.replication.factor=1\n"
    "offset.flush.interval.ms=10000\n"
    "listeners=HTTP://:8083\n"
    + _PLUGIN_PATH
)

CONNECT_STANDALONE = (
    "bootstrap.servers=localhost:9092\n"
    + _JSON_CONVERTERS
    + "offset.storage.file.filename=/tmp/connect.offsets\n"
    "offset.flush.interval.ms=10000\n"
    + _PLUGIN_PATH
)

CONNECT_FILE_SOURCE = (
    "name=local-file-source\n"
    "connector.class=FileStreamSource\n"
    "tasks.max=1\n"
    "file=test.txt\n"
    "topic=connect-test\n"
)

CONNECT_FILE_SINK = (
    "name=local-file-sink\n"
    "connector.class=FileStreamSink\n"
    "tasks.max=1\n"
    "file=test.sink.txt\n"
    "topics=connect-test\n"
)

CONNECT_MIRROR_MAKER = (
    "# MirrorMaker 2: bin/connect-mirror-maker.sh config/connect-mirror-maker.properties\n"
    "clusters = A, B\n"
    "A.bootstrap.servers = A_host1:9092, A_host2:9092, A_host3:9092\n"
    "B.bootstrap.servers = B_host1:9092, B_host2:9092, B_host3:9092\n"
    "A->B.enabled = true\n"
    "A->B.topics = .*\n"
    "B->A.enabled = true\n"
    "B->A.topics = .*\n"
    "replication.factor=1\n"
    "checkpoints.topic.replication.factor=1\n"
    "heartbeats.topic.replication.factor=1\n"
    "offset-syncs.topic.replication.factor=1\n"
    "offset.storage.replication.factor=1\n"
    "status.storage.replication.factor=1\n"
    "config.storage.replication.factor=1\n"
)


def log_configs(version_major: int) -> dict[str, str]:
    """config/ logging files: the broker's and Connect's log INFO to stdout, the tools WARN to stderr."""
    if version_major >= 4:
        def log4j2(level: str, target: str) -> str:
            return (
                "status = warn\n"
                "appender.out.type = Console\n"
                "appender.out.name = OUT\n"
                f"appender.out.target = {target}\n"
                "appender.out.layout.type = PatternLayout\n"
                "appender.out.layout.pattern = [%d] %p %m (%c)%n\n"
                f"rootLogger.level = {level}\n"
                "rootLogger.appenderRef.out.ref = OUT\n"
            )
        return {"log4j2.properties": log4j2("INFO", "SYSTEM_OUT"),
                "connect-log4j2.properties": log4j2("INFO", "SYSTEM_OUT"),
                "tools-log4j2.properties": log4j2("WARN", "SYSTEM_ERR")}

    def log4j(level: str, target: str) -> str:
        return (
            f"log4j.rootLogger={level}, out\n"
            "log4j.appender.out=org.apache.log4j.ConsoleAppender\n"
            f"log4j.appender.out.Target={target}\n"
            "log4j.appender.out.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
        )
    return {"log4j.properties": log4j("INFO", "System.out"),
            "connect-log4j.properties": log4j("INFO", "System.out"),
            "tools-log4j.properties": log4j("WARN", "System.err")}


def config_files(version_major: int) -> dict[str, str]:
    files = {
        "server.properties": server_properties(version_major),
        "connect-distributed.properties": CONNECT_DISTRIBUTED,
        "connect-standalone.properties": CONNECT_STANDALONE,
        "connect-file-source.properties": CONNECT_FILE_SOURCE,
        "connect-file-sink.properties": CONNECT_FILE_SINK,
        "connect-mirror-maker.properties": CONNECT_MIRROR_MAKER,
    }
    files.update(log_configs(version_major))
    return files
