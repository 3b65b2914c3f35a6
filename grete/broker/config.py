"""Broker and topic configuration, under Kafka's own key names and defaults.

A broker is configured the way ``kafka-server-start.sh`` is: a ``server.properties`` file plus
``--override key=value`` pairs. Topic configs (``segment.bytes``, ``retention.ms`` ...) default to
their broker-level synonyms (``log.segment.bytes``, ``log.retention.hours`` ...), exactly as Kafka
resolves them; DescribeConfigs reports that chain as synonyms with their sources.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1


class ConfigType(IntEnum):
    """DescribeConfigs v3+ config_type."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """DescribeConfigs v1+ config_source."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class StartupError(Exception):
    """The broker cannot start for a reason outside its configuration (ZooKeeper unreachable, its
    broker id taken): ``grete serve`` reports it and exits with status 1."""


class ConfigError(ValueError):
    """A config key or value Kafka would refuse (INVALID_CONFIG on the wire)."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: str | None
    doc: str = ""
    sensitive: bool = False
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    also: float | None = None  # one value allowed outside [minimum, maximum] (gzip's -1: the default level)
    allow_empty: bool = False  # a LIST with choices that may be empty (Kafka's ValidList.anyNonDuplicateValues)
    version: bool = False  # a Kafka version's name (Kafka 3.9's MetadataVersionValidator)

    def parse(self, raw: str) -> object:
        """Parse and validate ``raw``; raises ConfigError with Kafka-like wording."""
        text = raw.strip()
        try:
            value: object
            if self.type in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
                value = int(text)
            elif self.type == ConfigType.DOUBLE:
                value = float(text)
            elif self.type == ConfigType.BOOLEAN:
                if text.lower() not in ("true", "false"):
                    raise ValueError(text)
                value = text.lower() == "true"
            elif self.type == ConfigType.LIST:
                value = [p.strip() for p in text.split(",") if p.strip()]
            else:
                value = text
        except ValueError:
            # Kafka's ConfigDef.parseType wording.
            reason = ("Expected value to be either true or false" if self.type == ConfigType.BOOLEAN
                      else f"Not a number of type {self.type.name}")
            raise ConfigError(f"Invalid value {raw} for configuration {self.name}: {reason}") from None
        self._check(value, raw)
        return value

    def _check(self, value: object, raw: str) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool) and value != self.also:
            self._check_range(value, raw)
        if self.version and not _VERSION_NAME.fullmatch(str(value)):
            raise ConfigError(f"Invalid value {raw} for configuration {self.name}: Version `{value}` is not a valid version")
        if self.choices is not None:
            items = value if isinstance(value, list) else [value]
            bad = [v for v in items if v not in self.choices]
            empty = isinstance(value, list) and not value and self.type == ConfigType.LIST
            if bad or (empty and not self.allow_empty):
                raise ConfigError(f"Invalid value {raw} for configuration {self.name}: "
                                  f"String must be one of: {', '.join(self.choices)}")


    def _check_range(self, value: float, raw: str) -> None:
        """Kafka's Range / between-or-equal validators, with their wording."""
        low, high = self.minimum, self.maximum
        if self.also is not None and low is not None and high is not None:
            if not low <= value <= high:
                raise ConfigError(f"Invalid value {raw} for configuration {self.name}: Value must be between "
                                  f"{low:g} and {high:g} or equal to {self.also:g}")
            return
        if low is not None and value < low:
            raise ConfigError(f"Invalid value {raw} for configuration {self.name}: Value must be at least {low:g}")
        if high is not None and value > high:
            raise ConfigError(f"Invalid value {raw} for configuration {self.name}: Value must be no more than {high:g}")


def _d(name: str, type_: ConfigType, default: str | None, doc: str = "", **kw: object) -> ConfigDef:
    return ConfigDef(name, type_, default, doc, **kw)  # type: ignore[arg-type]


INT, LONG, STR, BOOL, DOUBLE, LIST = (ConfigType.INT, ConfigType.LONG, ConfigType.STRING,
                                      ConfigType.BOOLEAN, ConfigType.DOUBLE, ConfigType.LIST)
PASSWORD = ConfigType.PASSWORD
_TS_TYPES = ("CreateTime", "LogAppendTime")
_CODECS = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

# --- topic-level configs, each with the broker key it falls back to (Kafka's LogConfig) -------
TOPIC_CONFIGS: dict[str, tuple[ConfigDef, str | None]] = {d.name: (d, syn) for d, syn in [
    (_d("cleanup.policy", LIST, "delete", "delete and/or compact; empty: neither (no retention)",
        choices=("delete", "compact"), allow_empty=True),
     "log.cleanup.policy"),
    (_d("compression.type", STR, "producer", choices=_CODECS), "compression.type"),
    # KIP-390's levels: accepted and shown; grete keeps the producer's batches as they are.
    (_d("compression.gzip.level", INT, "-1", minimum=1, maximum=9, also=-1), "compression.gzip.level"),
    (_d("compression.lz4.level", INT, "9", minimum=1, maximum=17), "compression.lz4.level"),
    (_d("compression.zstd.level", INT, "3", minimum=-131072, maximum=22), "compression.zstd.level"),
    (_d("delete.retention.ms", LONG, "86400000", minimum=0), "log.cleaner.delete.retention.ms"),
    (_d("file.delete.delay.ms", LONG, "60000", minimum=0), "log.segment.delete.delay.ms"),
    (_d("flush.messages", LONG, str(LONG_MAX), minimum=1), "log.flush.interval.messages"),
    (_d("flush.ms", LONG, str(LONG_MAX), minimum=0), "log.flush.interval.ms"),
    (_d("follower.replication.throttled.replicas", LIST, ""), None),
    (_d("index.interval.bytes", INT, "4096", minimum=0), "log.index.interval.bytes"),
    (_d("leader.replication.throttled.replicas", LIST, ""), None),
    (_d("local.retention.bytes", LONG, "-2", minimum=-2), "log.local.retention.bytes"),
    (_d("local.retention.ms", LONG, "-2", minimum=-2), "log.local.retention.ms"),
    (_d("max.compaction.lag.ms", LONG, str(LONG_MAX), minimum=1), "log.cleaner.max.compaction.lag.ms"),
    (_d("max.message.bytes", INT, "1048588", minimum=0), "message.max.bytes"),
    # Kafka 4.0's default (KIP-1030): records stamped more than an hour ahead are INVALID_TIMESTAMP.
    (_d("message.timestamp.after.max.ms", LONG, "3600000", minimum=0),
     "log.message.timestamp.after.max.ms"),
    (_d("message.timestamp.before.max.ms", LONG, str(LONG_MAX), minimum=0),
     "log.message.timestamp.before.max.ms"),
    (_d("message.timestamp.type", STR, "CreateTime", choices=_TS_TYPES), "log.message.timestamp.type"),
    (_d("min.cleanable.dirty.ratio", DOUBLE, "0.5", minimum=0), "log.cleaner.min.cleanable.ratio"),
    (_d("min.compaction.lag.ms", LONG, "0", minimum=0), "log.cleaner.min.compaction.lag.ms"),
    (_d("min.insync.replicas", INT, "1", minimum=1), "min.insync.replicas"),
    (_d("preallocate", BOOL, "false"), "log.preallocate"),
    (_d("remote.storage.enable", BOOL, "false"), None),
    (_d("remote.log.copy.disable", BOOL, "false"), None),  # tiered storage: accepted and shown
    (_d("remote.log.delete.on.disable", BOOL, "false"), None),
    (_d("retention.bytes", LONG, "-1"), "log.retention.bytes"),
    (_d("retention.ms", LONG, "604800000", minimum=-1), "log.retention.ms"),
    (_d("segment.bytes", INT, "1073741824", minimum=14), "log.segment.bytes"),
    (_d("segment.index.bytes", INT, "10485760", minimum=4), "log.index.size.max.bytes"),
    (_d("segment.jitter.ms", LONG, "0", minimum=0), "log.roll.jitter.ms"),
    (_d("segment.ms", LONG, "604800000", minimum=1), "log.roll.ms"),
    (_d("unclean.leader.election.enable", BOOL, "false"), "unclean.leader.election.enable"),
]}

# Kafka 3.9's topic configs that Kafka 4 removed, known to a broker of a ZooKeeper cluster only, as
# to its Kafka 3.9 peers: the message format (KIP-724; shown and ignored, as Kafka 3's since
# inter.broker.protocol.version 3.0: batches are stored in format v2 whatever it says; grete
# down-converts for old fetches either way) and the timestamp difference (KIP-937), which bounds
# both sides of a record's timestamp where message.timestamp.before/after.max.ms are left unset.
ZK_MODE_TOPIC_CONFIGS: dict[str, tuple[ConfigDef, str | None]] = {d.name: (d, None) for d in [
    _d("message.downconversion.enable", BOOL, "true", "Kafka 3.9 (ZooKeeper mode): accepted and shown"),
    _d("message.format.version", STR, "3.0-IV1", "Kafka 3.9 (ZooKeeper mode): accepted and shown", version=True),
    _d("message.timestamp.difference.max.ms", LONG, str(LONG_MAX),
       "Kafka 3.9 (ZooKeeper mode): the bound on both sides where before/after.max.ms are unset", minimum=0),
]}
ZK_TOPIC_CONFIGS = {**TOPIC_CONFIGS, **ZK_MODE_TOPIC_CONFIGS}
# MetadataVersion's names up to Kafka 3.9 (0.8.0 ... 3.9-IV0; a third part is ignored past 0.x).
_VERSION_NAME = re.compile(r"(0\.(8\.[0-2]|9\.0|10\.[0-2]|11\.0)|1\.[01]|2\.[0-8]|3\.[0-9])(\.\d+)?(-IV\d+)?")


def topic_configs(zookeeper_mode: bool) -> dict[str, tuple[ConfigDef, str | None]]:
    """The topic configs a broker knows: Kafka 4.3's, and Kafka 3.9's removed ones in ZooKeeper mode."""
    return ZK_TOPIC_CONFIGS if zookeeper_mode else TOPIC_CONFIGS


# Broker keys that are derived from coarser units when not set themselves (Kafka's precedence).
_UNIT_FALLBACKS: dict[str, list[tuple[str, int]]] = {
    "log.retention.ms": [("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)],
    "log.roll.ms": [("log.roll.hours", 3_600_000)],
    "log.roll.jitter.ms": [("log.roll.jitter.hours", 3_600_000)],
    "log.flush.interval.ms": [("log.flush.scheduler.interval.ms", 1)],
}

BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in [
    # Kafka 4 requires node.id (no default); grete's embedded single node is node 1 unless told
    # otherwise. broker.id is its synonym: either sets both, and both set must agree (KafkaConfig).
    _d("node.id", INT, "1", "The node ID associated with the roles this process is playing when "
       "<code>process.roles</code> is non-empty. This is required configuration when running in KRaft mode.",
       minimum=0),
    _d("broker.id", INT, "-1", "The broker id for this server."),
    _d("listeners", LIST, "PLAINTEXT://127.0.0.1:9092"),
    _d("advertised.listeners", LIST, None),
    _d("listener.security.protocol.map", LIST,
       "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"),
    _d("inter.broker.listener.name", STR, None),
    # Kafka 4 requires process.roles (no default); grete's embedded single node is combined.
    _d("process.roles", LIST, "broker,controller", "The roles that this process plays: 'broker', "
       "'controller', or 'broker,controller' if it is both.", choices=("broker", "controller"), allow_empty=True),
    _d("controller.listener.names", LIST, None, "A comma-separated list of the names of the listeners used by "
       "the controller. This is required when communicating with the controller quorum, the broker will always "
       "use the first listener in this list."),
    _d("controller.quorum.voters", LIST, "", "Map of id/endpoint information for the set of voters in a "
       "comma-separated list of <code>{id}@{host}:{port}</code> entries. This is the old way of defining "
       "membership for controller quorums and should NOT be set if using dynamic quorums. Instead, "
       "controller.quorum.bootstrap.servers should be set,and the voter set is determined by the --standalone "
       "or --initial-controllers flags when formatting.For example: "
       "<code>1@localhost:9092,2@localhost:9093,3@localhost:9094</code>"),
    _d("controller.quorum.bootstrap.servers", LIST, "", "List of endpoints to use for bootstrapping the cluster "
       "metadata. The endpoints are specified in comma-separated list of <code>{host}:{port}</code> entries. "
       "For example: <code>localhost:9092,localhost:9093,localhost:9094</code>."),
    _d("metadata.log.dir", STR, None, "This configuration determines where we put the metadata log. If it is "
       "not set, the metadata log is placed in the first log directory from log.dirs."),
    _d("metadata.log.segment.bytes", INT, "1073741824", "The maximum size of a single metadata log file.",
       minimum=8388608),
    _d("internal.metadata.log.segment.bytes", INT, None, "Overrides metadata.log.segment.bytes without its "
       "minimum. For testing only.", minimum=12),
    _d("metadata.log.segment.ms", LONG, "604800000", "The maximum time before a new metadata log file is rolled "
       "out (in milliseconds)."),
    _d("metadata.log.max.record.bytes.between.snapshots", LONG, "20971520", "This is the maximum number of bytes "
       "in the log between the latest snapshot and the high-watermark needed before generating a new snapshot. "
       "The default value is 20971520. To generate snapshots based on the time elapsed, see the "
       "<code>metadata.log.max.snapshot.interval.ms</code> configuration. The Kafka node will generate a snapshot "
       "when either the maximum time interval is reached or the maximum bytes limit is reached.", minimum=1),
    _d("metadata.log.max.snapshot.interval.ms", LONG, "3600000", "This is the maximum number of milliseconds to "
       "wait to generate a snapshot if there are committed records in the log that are not included in the latest "
       "snapshot. A value of zero disables time based snapshot generation. The default value is 3600000. To "
       "generate snapshots based on the number of metadata bytes, see the "
       "<code>metadata.log.max.record.bytes.between.snapshots</code> configuration. The Kafka node will generate "
       "a snapshot when either the maximum time interval is reached or the maximum bytes limit is reached.",
       minimum=0),
    _d("metadata.max.retention.bytes", LONG, "104857600", "The maximum combined size of the metadata log and "
       "snapshots before deleting old snapshots and log files. Since at least one snapshot must exist before any "
       "logs can be deleted, this is a soft limit."),
    _d("metadata.max.retention.ms", LONG, "604800000", "The number of milliseconds to keep a metadata log file or "
       "snapshot before deleting it. Since at least one snapshot must exist before any logs can be deleted, this "
       "is a soft limit."),
    _d("controller.quorum.election.timeout.ms", INT, "1000", "Maximum time in milliseconds to wait without "
       "being able to fetch from the leader before triggering a new election", minimum=0),
    _d("controller.quorum.fetch.timeout.ms", INT, "2000", "Maximum time without a successful fetch from the "
       "current leader before becoming a candidate and triggering an election for voters; Maximum time a "
       "leader can go without receiving valid fetch or fetchSnapshot request from a majority of the quorum "
       "before resigning.", minimum=0),
    _d("controller.quorum.election.backoff.max.ms", INT, "1000", "Maximum time in milliseconds before starting "
       "new elections. This is used in the binary exponential backoff mechanism that helps prevent gridlocked "
       "elections", minimum=0),
    _d("controller.quorum.request.timeout.ms", INT, "2000", "The configuration controls the maximum amount of "
       "time the client will wait for the response of a request.", minimum=0),
    _d("broker.session.timeout.ms", INT, "9000", "The length of time in milliseconds that a broker lease lasts "
       "if no heartbeats are made. Used when running in KRaft mode.", minimum=0),
    _d("broker.heartbeat.interval.ms", INT, "2000", "The length of time in milliseconds between broker heartbeats. "
       "Used when running in KRaft mode.", minimum=0),
    _d("initial.broker.registration.timeout.ms", INT, "60000", "When initially registering with the controller "
       "quorum, the number of milliseconds to wait before declaring failure and exiting the broker process.",
       minimum=0),
    _d("controller.quorum.retry.backoff.ms", INT, "20", "The amount of time to wait before attempting to retry "
       "a failed request to a given topic partition.", minimum=0),
    _d("log.dirs", LIST, None),
    _d("log.dir", STR, "./grete-data"),
    _d("num.partitions", INT, "1", minimum=1),
    _d("default.replication.factor", INT, "1", minimum=1),
    _d("auto.create.topics.enable", BOOL, "true"),
    _d("delete.topic.enable", BOOL, "true"),
    _d("message.max.bytes", INT, "1048588", minimum=0),
    _d("socket.request.max.bytes", INT, "104857600", minimum=1),
    # Kafka's defaults are 102400 for both. grete's are the kernel's autotuning, measured better on
    # both sides (docs/benchmarks.md, "socket buffers"); a value that is set is applied as Kafka does.
    _d("socket.send.buffer.bytes", INT, "-1", "SO_SNDBUF of accepted sockets; -1: the OS default"),
    _d("socket.receive.buffer.bytes", INT, "-1", "SO_RCVBUF of the listening sockets; -1: the OS default"),
    _d("connections.max.idle.ms", LONG, "600000"),
    _d("queued.max.requests", INT, "500", minimum=1),
    _d("queued.max.request.bytes", LONG, "-1",
       "bytes of requests buffered broker-wide before connections stop being read; -1: no bound"),
    _d("max.connections", INT, "2147483647", minimum=0),
    _d("max.connections.per.ip", INT, "2147483647", minimum=0),
    _d("max.connections.per.ip.overrides", STR, ""),
    # Client quotas (grete/broker/quotas/client_quotas.py): the sliding window their rates are measured over.
    _d("quota.window.num", INT, "11", minimum=1),
    _d("replication.quota.window.num", INT, "11", "The number of samples to retain in memory for replication "
       "quotas", minimum=1),
    _d("replication.quota.window.size.seconds", INT, "1", "The time span of each sample for replication quotas",
       minimum=1),
    _d("quota.window.size.seconds", INT, "1", minimum=1),
    _d("controller.quota.window.num", INT, "11", minimum=1),
    _d("controller.quota.window.size.seconds", INT, "1", minimum=1),
    _d("telemetry.max.bytes", INT, "1048576", "largest PushTelemetry metrics payload accepted", minimum=1),
    _d("max.request.partition.size.limit", INT, "2000", "most partitions in one DescribeTopicPartitions answer",
       minimum=1),
    _d("metrics.listener", STR, "", "http://HOST:PORT for GET /metrics (Prometheus); empty: no endpoint"),
    _d("console.listener", STR, "", "HOST:PORT or http://HOST:PORT of the web console (docs/operations.md); "
       "empty: none; no host: 127.0.0.1"),
    _d("console.authentication", STR, "", "basic: HTTP Basic against the SASL PLAIN/SCRAM users; none: open; "
       "empty: basic with SASL listeners, none with only PLAINTEXT ones"),
    # Keys Kafka lets operators change at run time (DynamicBrokerConfig): accepted, stored and shown.
    # grete has no thread pools, throttled replication or Kerberos to apply some of them to.
    _d("log.cleaner.dedupe.buffer.size", LONG, "134217728", minimum=0),
    _d("log.cleaner.io.buffer.size", INT, "524288", minimum=0),
    _d("log.cleaner.io.buffer.load.factor", DOUBLE, "0.9"),
    _d("log.cleaner.io.max.bytes.per.second", DOUBLE, "1.7976931348623157E308"),
    _d("num.replica.fetchers", INT, "1", minimum=1),
    _d("replica.lag.time.max.ms", LONG, "30000", minimum=1),
    _d("replica.selector.class", STR, None, "fetch from follower (KIP-392): "
       "org.apache.kafka.common.replica.RackAwareReplicaSelector; empty: consumers read from leaders"),
    _d("replica.fetch.wait.max.ms", INT, "500", minimum=0),
    _d("max.incremental.fetch.session.cache.slots", INT, "1000",
       "fetch sessions (KIP-227) kept, in 8 shards of slots/8 as Kafka does", minimum=0),
    _d("replica.fetch.min.bytes", INT, "1", minimum=1),
    _d("replica.fetch.max.bytes", INT, "1048576", minimum=0),
    _d("replica.fetch.response.max.bytes", INT, "10485760", minimum=0),
    _d("replica.fetch.backoff.ms", INT, "1000", minimum=0),
    _d("replica.socket.timeout.ms", INT, "30000"),
    _d("background.threads", INT, "10", minimum=1),
    _d("max.connection.creation.rate", INT, "2147483647", minimum=0),
    _d("leader.replication.throttled.rate", LONG, "9223372036854775807", minimum=0),
    _d("follower.replication.throttled.rate", LONG, "9223372036854775807", minimum=0),
    _d("replica.alter.log.dirs.io.max.bytes.per.second", LONG, "9223372036854775807", minimum=0),
    _d("sasl.kerberos.kinit.cmd", STR, "/usr/bin/kinit"),
    _d("sasl.kerberos.min.time.before.relogin", LONG, "60000"),
    _d("sasl.kerberos.ticket.renew.jitter", DOUBLE, "0.05"),
    _d("sasl.kerberos.ticket.renew.window.factor", DOUBLE, "0.8"),
    _d("sasl.kerberos.principal.to.local.rules", LIST, "DEFAULT"),
    _d("metric.reporters", LIST, ""),
    # More of Kafka 4.3's run-time keys: accepted, stored and shown; grete has no tiered storage,
    # share coordinator, config providers, log-dir cordoning or compression levels to apply them to.
    _d("compression.gzip.level", INT, "-1", minimum=1, maximum=9, also=-1),
    _d("compression.lz4.level", INT, "9", minimum=1, maximum=17),
    _d("compression.zstd.level", INT, "3", minimum=-131072, maximum=22),
    _d("config.providers", LIST, ""),
    _d("cordoned.log.dirs", LIST, ""),
    _d("follower.fetch.last.tiered.offset.enable", BOOL, "false"),
    _d("group.coordinator.cached.buffer.max.bytes", INT, "1048588"),
    _d("share.coordinator.cached.buffer.max.bytes", INT, "1048588"),
    _d("remote.fetch.max.wait.ms", INT, "500", minimum=1),
    _d("remote.list.offsets.request.timeout.ms", LONG, "30000", minimum=1),
    _d("remote.log.index.file.cache.total.size.bytes", LONG, "1073741824", minimum=1),
    _d("remote.log.manager.copier.thread.pool.size", INT, "10", minimum=1),
    _d("remote.log.manager.copy.max.bytes.per.second", LONG, "9223372036854775807", minimum=1),
    _d("remote.log.manager.expiration.thread.pool.size", INT, "10", minimum=1),
    _d("remote.log.manager.fetch.max.bytes.per.second", LONG, "9223372036854775807", minimum=1),
    _d("remote.log.manager.follower.thread.pool.size", INT, "2", minimum=1),
    _d("remote.log.reader.threads", INT, "10", minimum=1),
    # TLS listeners (per listener as listener.name.<listener>.<key>): Kafka's keys and defaults.
    _d("ssl.keystore.type", STR, "JKS", choices=("JKS", "PKCS12", "PEM")),
    _d("ssl.keystore.location", STR, None),
    _d("ssl.keystore.password", PASSWORD, None),
    _d("ssl.key.password", PASSWORD, None),
    _d("ssl.keystore.certificate.chain", PASSWORD, None),
    _d("ssl.keystore.key", PASSWORD, None),
    _d("ssl.truststore.type", STR, "JKS", choices=("JKS", "PKCS12", "PEM")),
    _d("ssl.truststore.location", STR, None),
    _d("ssl.truststore.password", PASSWORD, None),
    _d("ssl.truststore.certificates", PASSWORD, None),
    _d("ssl.client.auth", STR, "none", choices=("none", "requested", "required")),
    _d("ssl.enabled.protocols", LIST, "TLSv1.2,TLSv1.3"),
    _d("ssl.protocol", STR, "TLSv1.3"),
    _d("ssl.cipher.suites", LIST, ""),
    _d("ssl.endpoint.identification.algorithm", STR, "https"),
    _d("ssl.principal.mapping.rules", STR, "DEFAULT"),
    # SASL listeners (per listener as listener.name.<listener>.<key>; the JAAS config and the
    # re-authentication bound also per mechanism: listener.name.<listener>.<mechanism>.<key>).
    _d("sasl.enabled.mechanisms", LIST, "GSSAPI"),
    _d("sasl.mechanism.inter.broker.protocol", STR, "GSSAPI"),
    _d("sasl.jaas.config", PASSWORD, None),
    _d("sasl.server.max.receive.size", INT, "524288", minimum=1),
    _d("connections.max.reauth.ms", LONG, "0", minimum=0),
    # Authorization: the ACL authorizer (grete/broker/security/authorizer.py) when authorizer.class.name names
    # one of Kafka's two.
    _d("authorizer.class.name", STR, ""),
    _d("super.users", STR, ""),
    _d("allow.everyone.if.no.acl.found", BOOL, "false"),
    # Delegation tokens (grete/broker/security/delegation_tokens.py): without a secret key the token APIs
    # answer DELEGATION_TOKEN_AUTH_DISABLED, as Kafka's.
    _d("delegation.token.secret.key", PASSWORD, None,
       "HMAC-SHA512 key of delegation tokens, the same on every broker; unset or empty: tokens disabled"),
    _d("delegation.token.master.key", PASSWORD, None,
       "deprecated (Kafka 3.x) name of delegation.token.secret.key, read when that is not set"),
    _d("delegation.token.max.lifetime.ms", LONG, "604800000", minimum=1),
    _d("delegation.token.expiry.time.ms", LONG, "86400000", minimum=1),
    _d("delegation.token.expiry.check.interval.ms", LONG, "3600000", minimum=1),
    # Kafka 4's group protocols: the defaults and bounds of per-group configs (grete/broker/groups/group_configs.py).
    _d("group.consumer.assignment.interval.ms", INT, "1000", minimum=1),
    _d("group.consumer.heartbeat.interval.ms", INT, "5000", minimum=1),
    _d("group.consumer.min.heartbeat.interval.ms", INT, "5000", minimum=1),
    _d("group.consumer.max.heartbeat.interval.ms", INT, "15000", minimum=1),
    _d("group.consumer.session.timeout.ms", INT, "45000", minimum=1),
    _d("group.consumer.min.session.timeout.ms", INT, "45000", minimum=1),
    _d("group.consumer.max.session.timeout.ms", INT, "60000", minimum=1),
    _d("group.consumer.min.assignment.interval.ms", INT, "0", minimum=0),
    _d("group.consumer.max.assignment.interval.ms", INT, "15000", minimum=0),
    _d("group.consumer.max.size", INT, str(2**31 - 1), minimum=1),
    _d("group.consumer.assignors", LIST, "uniform,range",
       "server-side assignors, the first the default: uniform, range (or Kafka's class names for them)"),
    _d("group.consumer.migration.policy", STR, "bidirectional",
       "online upgrade / downgrade of groups between the classic and consumer protocols (docs/groups.md)",
       choices=("disabled", "upgrade", "downgrade", "bidirectional")),
    _d("group.coordinator.rebalance.protocols", LIST, "classic,consumer,streams",
       "without consumer, ConsumerGroupHeartbeat answers UNSUPPORTED_VERSION",
       choices=("classic", "consumer", "share", "streams")),
    _d("group.share.assignment.interval.ms", INT, "1000", minimum=1),
    _d("share.auto.offset.reset", STR, "latest"),
    _d("group.share.delivery.count.limit", INT, "5", minimum=2),
    _d("group.share.min.delivery.count.limit", INT, "2", minimum=2),
    _d("group.share.max.delivery.count.limit", INT, "10", minimum=2),
    _d("group.share.heartbeat.interval.ms", INT, "5000", minimum=1),
    _d("group.share.min.heartbeat.interval.ms", INT, "5000", minimum=1),
    _d("group.share.max.heartbeat.interval.ms", INT, "15000", minimum=1),
    _d("group.share.max.size", INT, "200", minimum=10),
    _d("share.isolation.level", STR, "read_uncommitted", choices=("read_committed", "read_uncommitted")),
    _d("group.share.partition.max.record.locks", INT, "2000", minimum=100),
    _d("group.share.record.lock.duration.ms", INT, "30000", minimum=1000),
    _d("group.share.min.record.lock.duration.ms", INT, "15000", minimum=1000),
    _d("group.share.max.record.lock.duration.ms", INT, "60000", minimum=1000),
    _d("share.renew.acknowledge.enable", BOOL, "true"),
    _d("group.share.session.timeout.ms", INT, "45000", minimum=1),
    _d("group.share.min.session.timeout.ms", INT, "45000", minimum=1),
    _d("group.share.max.session.timeout.ms", INT, "60000", minimum=1),
    _d("group.streams.assignment.interval.ms", INT, "1000", minimum=1),
    _d("group.streams.heartbeat.interval.ms", INT, "5000", minimum=1),
    _d("group.streams.min.heartbeat.interval.ms", INT, "5000", minimum=1),
    _d("group.streams.max.heartbeat.interval.ms", INT, "15000", minimum=1),
    _d("group.streams.initial.rebalance.delay.ms", INT, "3000", minimum=0),
    _d("group.streams.num.standby.replicas", INT, "0", minimum=0),
    _d("group.streams.max.standby.replicas", INT, "2", minimum=0),
    _d("group.streams.max.size", INT, str(2**31 - 1), minimum=1),
    _d("group.streams.session.timeout.ms", INT, "45000", minimum=1),
    _d("group.streams.min.session.timeout.ms", INT, "45000", minimum=1),
    _d("group.streams.max.session.timeout.ms", INT, "60000", minimum=1),
    _d("num.network.threads", INT, "3", minimum=1),
    _d("num.io.threads", INT, "8", minimum=1),
    _d("num.recovery.threads.per.data.dir", INT, "2", minimum=1),  # Kafka 4.0 raised it from 1
    _d("log.cleanup.policy", LIST, "delete", choices=("delete", "compact")),
    _d("compression.type", STR, "producer", choices=_CODECS),
    _d("log.cleaner.enable", BOOL, "true"),
    _d("log.cleaner.threads", INT, "1", minimum=0),
    _d("log.cleaner.backoff.ms", LONG, "15000", minimum=0),
    _d("log.cleaner.delete.retention.ms", LONG, "86400000", minimum=0),
    _d("log.cleaner.min.cleanable.ratio", DOUBLE, "0.5", minimum=0),
    _d("log.cleaner.min.compaction.lag.ms", LONG, "0", minimum=0),
    _d("log.cleaner.max.compaction.lag.ms", LONG, str(LONG_MAX), minimum=1),
    _d("log.segment.delete.delay.ms", LONG, "60000", minimum=0),
    _d("log.flush.interval.messages", LONG, str(LONG_MAX), minimum=1),
    _d("log.flush.interval.ms", LONG, None),
    _d("log.flush.scheduler.interval.ms", LONG, str(LONG_MAX)),
    _d("log.flush.offset.checkpoint.interval.ms", INT, "60000", minimum=0),
    _d("log.flush.start.offset.checkpoint.interval.ms", INT, "60000", minimum=0),
    _d("log.index.interval.bytes", INT, "4096", minimum=0),
    _d("log.index.size.max.bytes", INT, "10485760", minimum=4),
    _d("log.local.retention.bytes", LONG, "-2"),
    _d("log.local.retention.ms", LONG, "-2"),
    _d("log.message.timestamp.type", STR, "CreateTime", choices=_TS_TYPES),
    _d("log.message.timestamp.before.max.ms", LONG, str(LONG_MAX), minimum=0),
    _d("log.message.timestamp.after.max.ms", LONG, "3600000", minimum=0),
    _d("log.preallocate", BOOL, "false"),
    _d("log.retention.bytes", LONG, "-1"),
    _d("log.retention.ms", LONG, None),
    _d("log.retention.minutes", INT, None),
    _d("log.retention.hours", INT, "168"),
    _d("log.retention.check.interval.ms", LONG, "300000", minimum=1),
    _d("log.roll.ms", LONG, None),
    _d("log.roll.hours", INT, "168", minimum=1),
    _d("log.roll.jitter.ms", LONG, None),
    _d("log.roll.jitter.hours", INT, "0", minimum=0),
    _d("log.segment.bytes", INT, "1073741824", minimum=14),
    _d("min.insync.replicas", INT, "1", minimum=1),
    _d("unclean.leader.election.enable", BOOL, "false"),
    _d("offsets.topic.num.partitions", INT, "50", minimum=1),
    _d("offsets.topic.replication.factor", INT, "3", minimum=1),
    _d("offsets.topic.segment.bytes", INT, "104857600", minimum=1),
    _d("offsets.retention.minutes", INT, "10080", minimum=1),
    _d("offsets.retention.check.interval.ms", LONG, "600000", minimum=1),
    _d("offsets.commit.timeout.ms", INT, "5000", minimum=1),
    _d("offset.metadata.max.bytes", INT, "4096"),
    _d("group.min.session.timeout.ms", INT, "6000"),
    _d("group.max.session.timeout.ms", INT, "1800000"),
    _d("group.initial.rebalance.delay.ms", INT, "3000", minimum=0),
    _d("group.max.size", INT, str(2**31 - 1), minimum=1),
    _d("share.coordinator.state.topic.num.partitions", INT, "50", minimum=1),
    _d("share.coordinator.state.topic.replication.factor", INT, "3", minimum=1),
    _d("share.coordinator.state.topic.min.isr", INT, "2", minimum=1),
    _d("share.coordinator.state.topic.segment.bytes", INT, "104857600", minimum=1),
    _d("share.coordinator.snapshot.update.records.per.snapshot", INT, "500", minimum=0, maximum=500),
    _d("share.coordinator.write.timeout.ms", INT, "5000", minimum=1),
    _d("transaction.state.log.num.partitions", INT, "50", minimum=1),
    _d("transaction.state.log.replication.factor", INT, "3", minimum=1),
    _d("transaction.state.log.min.isr", INT, "2", minimum=1),
    _d("transaction.state.log.segment.bytes", INT, "104857600", minimum=1),
    _d("transaction.max.timeout.ms", INT, "900000", minimum=1),
    _d("transactional.id.expiration.ms", INT, "604800000", minimum=1),
    _d("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, "10000", minimum=1),
    _d("transaction.remove.expired.transaction.cleanup.interval.ms", INT, "3600000", minimum=1),
    _d("transaction.partition.verification.enable", BOOL, "true"),
    _d("add.partitions.to.txn.retry.backoff.max.ms", INT, "100", minimum=0,
       doc="how long a leader keeps asking a coordinator still completing a producer's previous transaction "
           "(CONCURRENT_TRANSACTIONS) to add a partition (transaction version 2), at most request.timeout.ms"),
    _d("add.partitions.to.txn.retry.backoff.ms", INT, "20", minimum=1),
    _d("producer.id.expiration.ms", INT, "86400000", minimum=1),
    _d("auto.leader.rebalance.enable", BOOL, "true"),
    _d("leader.imbalance.per.broker.percentage", INT, "10", minimum=0),
    _d("leader.imbalance.check.interval.seconds", LONG, "300", minimum=1),
    _d("zookeeper.connect", STR, None),
    _d("zookeeper.session.timeout.ms", INT, "18000"),
    _d("zookeeper.connection.timeout.ms", INT, None, "empty: zookeeper.session.timeout.ms"),
    _d("broker.rack", STR, None),
    _d("security.inter.broker.protocol", STR, "PLAINTEXT"),
    _d("controlled.shutdown.enable", BOOL, "true"),
    _d("controlled.shutdown.max.retries", INT, "3", minimum=0),
    _d("controlled.shutdown.retry.backoff.ms", LONG, "5000", minimum=0),
    _d("controller.socket.timeout.ms", INT, "30000", minimum=1),
    _d("request.timeout.ms", INT, "30000", minimum=1, doc="how long a transaction coordinator waits for its log's ISR"),
    _d("cluster.id", STR, None, "grete: cluster id for a fresh data dir (Kafka takes it from kafka-storage)"),
    _d("direct.transports", LIST, "", "grete: the direct data path's transports (docs/direct.md); "
       "empty: off, its APIs not advertised. shm: same-host shared memory; rdma: pyverbs on an RDMA device "
       "(the broker refuses to start without one)", choices=("shm", "rdma"), allow_empty=True),
    _d("direct.rdma.address", STR, "", "grete: the IP address (of an RDMA device's interface) the rdma "
       "transport listens on with rdma_cm; required with direct.transports=rdma"),
    _d("direct.rdma.port", INT, "19093", "grete: the rdma_cm port of the rdma transport", minimum=1, maximum=65535),
    _d("direct.shm.dir", STR, "/dev/shm", "grete: where the shm transport's regions are created (tmpfs)"),
    _d("direct.region.bytes", LONG, "67108864", "grete: data bytes of one direct produce region", minimum=65536),
    _d("direct.produce.timeout.ms", INT, "5000", "grete: how long a reserved but unannounced write may "
       "hold up a shared produce region before the broker seals it", minimum=1),
    _d("direct.consumer.max.slots", INT, "64", "grete: metadata slots in one direct consumer's region",
       minimum=1),
    _d("direct.replication.enable", BOOL, "false", "grete: followers on this broker ask their leaders to "
       "push replicated batches into a receive region over the direct path instead of answering fetches "
       "(needs direct.transports; the leaders need it too)"),
    _d("direct.replication.credits", INT, "8", "grete: slots of a follower's receive region per leader, "
       "the pushes a leader may have outstanding (over rdma at most 128, the session ring's slots)", minimum=1),
    _d("direct.replication.slot.bytes", INT, "1048576", "grete: bytes of one receive-region slot (the most "
       "one push carries; a larger batch makes the follower fetch it)", minimum=65536),
    _d("grete.fast.failover.enable", BOOL, "true", "grete: in a cluster, a broker whose connection ends and whose "
       "port then refuses connections (its process died) is fenced at once, not when its ZooKeeper session "
       "expires; a paused or cut-off broker still waits for zookeeper.session.timeout.ms (docs/cluster.md)"),
    _d("grete.produce.validation", STR, "header", "header: batch header + CRC only (no per-record work); "
       "full: also decode every record, as Kafka does", choices=("header", "full")),
]}


# What Kafka 4.3's DynamicBrokerConfig can change at run time (per broker, or as a cluster default),
# as a live Kafka 4.3.1 accepts them: the broker-side defaults of topic configs (the primary names,
# not log.retention.hours and the other coarser units), the log cleaner, thread pools, connection
# quotas, replication throttles, Kerberos relogin, metric reporters, the group coordinators'
# assignment intervals, tiered storage and compression levels. The listener and TLS keys come with
# the security work: until grete re-binds listeners and reloads keystores, they stay static.
PER_BROKER_ONLY = frozenset({"listeners", "advertised.listeners", "listener.security.protocol.map",
                             "cordoned.log.dirs", "sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin",
                             "sasl.kerberos.principal.to.local.rules", "sasl.kerberos.ticket.renew.jitter",
                             "sasl.kerberos.ticket.renew.window.factor"})
DYNAMIC_BROKER_CONFIGS = frozenset(
    {synonym for _, synonym in TOPIC_CONFIGS.values() if synonym is not None}
    | {"log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.size",
       "log.cleaner.io.buffer.load.factor", "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms",
       "num.io.threads", "num.network.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
       "background.threads", "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
       "max.connection.creation.rate", "leader.replication.throttled.rate",
       "follower.replication.throttled.rate", "replica.alter.log.dirs.io.max.bytes.per.second",
       "sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.ticket.renew.jitter",
       "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.principal.to.local.rules",
       "metric.reporters", "producer.id.expiration.ms", "transaction.partition.verification.enable",
       "group.consumer.assignment.interval.ms", "group.share.assignment.interval.ms",
       "group.streams.assignment.interval.ms", "group.coordinator.cached.buffer.max.bytes",
       "share.coordinator.cached.buffer.max.bytes", "compression.gzip.level", "compression.lz4.level",
       "compression.zstd.level", "config.providers", "cordoned.log.dirs", "follower.fetch.last.tiered.offset.enable",
       "remote.fetch.max.wait.ms", "remote.list.offsets.request.timeout.ms",
       "remote.log.index.file.cache.total.size.bytes", "remote.log.manager.copier.thread.pool.size",
       "remote.log.manager.copy.max.bytes.per.second", "remote.log.manager.expiration.thread.pool.size",
       "remote.log.manager.fetch.max.bytes.per.second", "remote.log.manager.follower.thread.pool.size",
       "remote.log.reader.threads"}
) & set(BROKER_CONFIGS)
# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: dynamic only with a listener prefix.
_LISTENER_PREFIX_ONLY = frozenset({"ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
                                   "ssl.key.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
                                   "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
                                   "ssl.truststore.certificates"})
# Thread pools Kafka resizes at run time by at most a factor of two either way.
_THREAD_POOLS = ("num.io.threads", "num.network.threads", "num.replica.fetchers",
                 "num.recovery.threads.per.data.dir", "background.threads")


def applicable_dynamic(configs: Mapping[str, str], whose: str) -> dict[str, str]:
    """The dynamic broker configs whose values parse. A bad value from another writer (a Kafka
    broker of the cluster, a hand-edited znode) is logged and left out, as Kafka's DynamicBrokerConfig
    skips what it cannot apply, rather than stopping the broker or failing each later read."""
    kept: dict[str, str] = {}
    for key, value in configs.items():
        definition = config_definition(key)
        try:
            if definition is not None:
                definition.parse(value)
        except ConfigError as exc:
            log.error("%s dynamic config %s=%r is left out: %s", whose, key, value, exc)
            continue
        kept[key] = value
    return kept


def config_definition(key: str) -> ConfigDef | None:
    """A broker or topic key's definition; ``listener.name.<listener>.<key>`` is the key's own, as
    Kafka's per-listener overrides are."""
    match = _PER_LISTENER.fullmatch(key)
    if match is not None:
        key = match.group(2)
        mechanism = _PER_MECHANISM.fullmatch(key)
        if mechanism is not None:
            key = mechanism.group(2)
    return BROKER_CONFIGS.get(key) or (TOPIC_CONFIGS[key][0] if key in TOPIC_CONFIGS else None)


_PER_LISTENER = re.compile(r"listener\.name\.([a-z0-9_]+)\.(.+)")
# listener.name.<listener>.<mechanism>.sasl.jaas.config and .connections.max.reauth.ms
_PER_MECHANISM = re.compile(r"(plain|scram-sha-256|scram-sha-512|oauthbearer|gssapi)\.(sasl\.jaas\.config|"
                            r"connections\.max\.reauth\.ms)")


def check_dynamic_update(configs: Mapping[str, str], *, cluster_default: bool,
                         current: BrokerConfig | None = None) -> dict[str, str]:
    """Validate a broker resource's dynamic configs in Kafka 4.3's order, with its messages; raises
    ConfigError (INVALID_REQUEST on the wire). Keys grete does not know are kept as they are, as
    Kafka keeps custom configs; ``current`` (the configs in force) bounds thread-pool resizes."""
    # Kafka updates the listener keys per broker: at the cluster level it refuses them as per-broker
    # configs (below), not as static ones, though grete does not change them at run time.
    _refuse(sorted(k for k in configs if k in BROKER_CONFIGS and k not in DYNAMIC_BROKER_CONFIGS
                   and not (cluster_default and k in PER_BROKER_ONLY)),
            "Cannot update these configs dynamically")
    _refuse(sorted(k for k in configs if k in _LISTENER_PREFIX_ONLY),
            "These security configs can be dynamically updated only per-listener using the listener prefix")
    for key, value in configs.items():
        if key in BROKER_CONFIGS:
            BROKER_CONFIGS[key].parse(value)
    if cluster_default:
        # Kafka's perBrokerConfigs: those named, and every listener-prefixed key but three.
        _refuse(sorted(k for k in configs if k in PER_BROKER_ONLY or _per_listener_only(k)),
                "Cannot update these configs at default cluster level, broker id must be specified")
    if current is not None:
        _check_resizes(configs, current)
        if "cordoned.log.dirs" in configs:
            _check_cordoned(configs["cordoned.log.dirs"], current)
    return dict(configs)


_CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset({"max.connections", "max.connection.creation.rate", "num.network.threads"})


def _per_listener_only(key: str) -> bool:
    match = _PER_LISTENER.fullmatch(key)
    return match is not None and match.group(2) not in _CLUSTER_LEVEL_LISTENER_CONFIGS


def cordoned_dirs(config: BrokerConfig) -> set[Path]:
    """The log dirs ``cordoned.log.dirs`` names (``*``: all of them): no new replica goes there."""
    named = config.get_list("cordoned.log.dirs")
    dirs = config.log_dirs
    if "*" in named:
        return set(dirs)
    wanted = {Path(entry).expanduser() for entry in named}
    return {d for d in dirs if d in wanted}


def _check_cordoned(value: str, current: BrokerConfig) -> None:
    configured = {str(d) for d in current.log_dirs} | set(current.get_list("log.dirs") or [current.get_str("log.dir")])
    missing = [e for e in (p.strip() for p in value.split(",")) if e and e != "*" and e not in configured]
    if missing:
        raise ConfigError("requirement failed: All entries in cordoned.log.dirs must be present in log.dirs or "
                          f"log.dir. Missing entries : {', '.join(missing)}")


def _refuse(keys: list[str], message: str) -> None:
    if keys:
        raise ConfigError(f"{message}: [{', '.join(keys)}]")


def _check_resizes(configs: Mapping[str, str], current: BrokerConfig) -> None:
    """Kafka's DynamicThreadPool and LogCleaner bounds: a pool at most doubles or halves at once."""
    def invalid(detail: str) -> ConfigError:
        return ConfigError("Invalid value org.apache.kafka.common.config.ConfigException: "
                           f"{detail} for configuration Invalid dynamic configuration")
    for key in _THREAD_POOLS:
        if key in configs:
            new, old = int(configs[key]), current.get_int(key)
            prefix = f"Dynamic thread count update validation failed for {key}={new}, value should"
            if new < old // 2:
                raise invalid(f"{prefix} be at least half the current value {old}")
            if new > old * 2:
                raise invalid(f"{prefix} not be greater than double the current value {old}")
    if "log.cleaner.threads" in configs:
        new, old = int(configs["log.cleaner.threads"]), current.get_int("log.cleaner.threads")
        if new < old // 2:
            raise invalid(f"Log cleaner threads cannot be reduced to less than half the current value {old}")
        if new > old * 2:
            raise invalid(f"Log cleaner threads cannot be increased to more than double the current value {old}")


# Kafka 3.9's defaults where Kafka 4 changed them, for a broker of a ZooKeeper cluster: no bound on
# timestamps in the future (KIP-1030 set 1 h in 4.0), and no KRaft roles.
ZK_MODE_DEFAULTS = {"log.message.timestamp.after.max.ms": str(LONG_MAX), "process.roles": ""}


def _check_node_id_synonym(props: Mapping[str, str]) -> None:
    """Kafka 4's KafkaConfig: node.id and broker.id name one id; set both, they must agree."""
    if "node.id" in props and "broker.id" in props and int(props["node.id"]) != int(props["broker.id"]):
        raise ConfigError("You must set `node.id` to the same value as `broker.id`.")


def _broker_default_for_topic(topic_key: str) -> str | None:
    definition, synonym = ZK_TOPIC_CONFIGS[topic_key]
    if synonym is None:
        return definition.default
    broker_def = BROKER_CONFIGS.get(synonym)
    return broker_def.default if broker_def is not None else definition.default


class BrokerConfig:
    """Static broker configuration: defaults, then the properties file, then overrides."""

    def __init__(self, props: Mapping[str, str] | None = None, *, strict: bool = False) -> None:
        self.originals: dict[str, str] = {}
        self.unknown: list[str] = []
        # Dynamic configs (AlterConfigs on a BROKER resource), stored in the metadata store; they
        # win over server.properties: this broker's own, then the cluster-wide default.
        self.dynamic_broker: dict[str, str] = {}
        self.dynamic_default: dict[str, str] = {}
        # Each key's value parsed once, until a dynamic change (set_dynamic) re-parses on next read.
        self._parsed: dict[str, object] = {}
        for key, raw in (props or {}).items():
            definition = config_definition(key)
            if definition is None:
                if strict:
                    raise ConfigError(f"Unknown configuration '{key}'")
                self.unknown.append(key)
                log.warning("The configuration '%s' was supplied but isn't a known config.", key)
            else:
                definition.parse(raw)  # validate early: a bad value stops start-up with its name
            self.originals[key] = raw
        _check_node_id_synonym(self.originals)
        # A broker of a ZooKeeper cluster runs as Kafka 3.9's, with its defaults (ZK_MODE_DEFAULTS).
        self.zookeeper_mode = bool(self.originals.get("zookeeper.connect", "").strip())

    @classmethod
    def load(cls, path: str | Path | None, overrides: Iterable[str] = (), *,
             strict: bool = False) -> BrokerConfig:
        props = read_properties(Path(path)) if path else {}
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"Invalid override '{item}': expected key=value")
            props[key.strip()] = value.strip()
        return cls(props, strict=strict)

    # --- typed access -------------------------------------------------------------------------
    def with_dynamic(self, per_broker: Mapping[str, str], cluster_default: Mapping[str, str]) -> BrokerConfig:
        """A copy with other dynamic configs: what the broker would run with after an update."""
        proposed = copy.copy(self)
        proposed.set_dynamic(per_broker, cluster_default)
        return proposed

    def set_dynamic(self, per_broker: Mapping[str, str], cluster_default: Mapping[str, str]) -> None:
        self.dynamic_broker = dict(per_broker)
        self.dynamic_default = dict(cluster_default)
        self._parsed = {}

    def raw(self, key: str) -> str | None:
        """The value in force: per layer (this broker's dynamic configs, the cluster default, the
        properties file) the key itself or a coarser unit of it; else the finest default."""
        for layer in (self.dynamic_broker, self.dynamic_default, self.originals):
            if key in layer:
                return layer[key]
            for coarser, factor in _UNIT_FALLBACKS.get(key, []):
                if coarser in layer:
                    return str(int(layer[coarser]) * factor)
        for coarser, factor in _UNIT_FALLBACKS.get(key, []):
            definition = BROKER_CONFIGS.get(coarser)
            if definition is not None and definition.default is not None:
                return str(int(definition.default) * factor)
        return self.default(key)

    def default(self, key: str) -> str | None:
        """``key``'s default: Kafka 3.9's where Kafka 4 changed it and this broker is of a ZooKeeper
        cluster, else its definition's."""
        if self.zookeeper_mode and key in ZK_MODE_DEFAULTS:
            return ZK_MODE_DEFAULTS[key]
        definition = BROKER_CONFIGS.get(key)
        return definition.default if definition else None

    def get(self, key: str) -> object:
        """The value in force, parsed (once: reads on the hot path cost a dict lookup)."""
        try:
            return self._parsed[key]
        except KeyError:
            pass
        raw = self.raw(key)
        value = None if raw is None else (BROKER_CONFIGS.get(key) or TOPIC_CONFIGS[key][0]).parse(raw)
        self._parsed[key] = value
        return value

    def get_int(self, key: str) -> int:
        value = self.get(key)
        assert isinstance(value, int), key
        return value

    def get_bool(self, key: str) -> bool:
        return bool(self.get(key))

    def get_str(self, key: str) -> str:
        return str(self.get(key) or "")

    def get_list(self, key: str) -> list[str]:
        value = self.get(key)
        return list(value) if isinstance(value, list) else []

    @property
    def node_id(self) -> int:
        if "node.id" in self.originals or "broker.id" not in self.originals:
            return self.get_int("node.id")
        return self.get_int("broker.id")

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.get_list("log.dirs") or [self.get_str("log.dir")]
        return [Path(d).expanduser() for d in dirs]

    @property
    def metadata_log_dir(self) -> Path:
        """Where the metadata log lives: ``metadata.log.dir``, else the first log dir (as Kafka)."""
        configured = self.get_str("metadata.log.dir")
        return Path(configured).expanduser() if configured else self.log_dirs[0]

    def topic_default(self, topic_key: str) -> str | None:
        """The value a topic gets for ``topic_key`` without an override: broker synonym or default."""
        _, synonym = ZK_TOPIC_CONFIGS[topic_key]
        if synonym is not None:
            value = self.raw(synonym)
            if value is not None:
                return value
        return _broker_default_for_topic(topic_key)

    def topic_defaults(self) -> dict[str, str]:
        return {key: value for key in topic_configs(self.zookeeper_mode) if (value := self.topic_default(key)) is not None}

    def broker_source(self, key: str) -> ConfigSource:
        if key in self.dynamic_broker:
            return ConfigSource.DYNAMIC_BROKER_CONFIG
        if key in self.dynamic_default:
            return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        if key in self.originals:
            return ConfigSource.STATIC_BROKER_CONFIG
        return ConfigSource.DEFAULT_CONFIG


def broker_synonyms(key: str) -> list[str]:
    """``key`` and the coarser-unit keys it falls back to, in precedence order (Kafka's
    DynamicBrokerConfig.brokerConfigSynonyms): ``log.retention.ms`` -> ``log.retention.minutes`` ->
    ``log.retention.hours``. A coarser key maps to the whole chain too."""
    for finest, coarser in _UNIT_FALLBACKS.items():
        chain = [finest] + [name for name, _ in coarser]
        if key in chain:
            return chain
    return [key]


def validate_topic_configs(configs: Mapping[str, str | None], *, zookeeper_mode: bool = False) -> dict[str, str]:
    """Validate topic overrides; raises ConfigError naming the first bad key or value."""
    known = topic_configs(zookeeper_mode)
    clean: dict[str, str] = {}
    for key, value in configs.items():
        if key not in known:
            raise ConfigError(f"Unknown topic config name: {key}")
        if value is None:
            raise ConfigError(f"Null value not supported for topic configs: {key}")
        known[key][0].parse(value)
        clean[key] = value
    if clean.get("remote.storage.enable", "false").lower() == "true":
        raise ConfigError("Tiered storage is not supported by grete: remote.storage.enable must be false")
    return clean


def read_properties(path: Path) -> dict[str, str]:
    """Java .properties subset: key=value or key: value, # and ! comments, \\ line continuation."""
    props: dict[str, str] = {}
    pending = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped[0] in "#!"):
            continue
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending += stripped[:-1]
            continue
        stripped, pending = pending + stripped, ""
        key, value = _split_property(stripped)
        props[key] = value
    return props


def _split_property(line: str) -> tuple[str, str]:
    for i, ch in enumerate(line):
        if ch in "=:" or ch.isspace():
            rest = line[i + 1:].lstrip() if ch in "=:" else line[i:].lstrip().lstrip("=:").lstrip()
            return line[:i].strip(), rest
    return line, ""
