"""``grete scram add``: a SCRAM credential written where the broker keeps it, with no broker running,
so a SASL node's first admin needs no PLAIN login (Kafka: ``kafka-storage format --add-scram``;
ZooKeeper mode: ``kafka-configs --zookeeper ... --add-config SCRAM-SHA-256=[password=...]``).

The embedded single node keeps credentials in its metadata log (UserScramCredentialRecords in the
first log dir's ``__cluster_metadata-0``), written under the log dir's lock so a running broker is never written behind; a ZooKeeper
cluster in ``/config/users/<name>`` beside the user's quotas, followed by a
``/config/changes`` notification so running brokers pick it up too, as kafka-configs does.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from grete.broker.config import BrokerConfig, ConfigError
from grete.broker.security.delegation_tokens import scram_credential_for
from grete.broker.security.sasl import SCRAM_MAX_ITERATIONS, SCRAM_MECHANISMS, SCRAM_MIN_ITERATIONS
from grete.coordinator.kraft.local import open_local_store
from grete.coordinator.metadata import ScramCredential
from grete.coordinator.zookeeper import zk_layout as zk
from grete.storage.dir_lock import LogDirLockedError, lock_dir

# Kafka's --add-scram value: MECHANISM=[key=value,...]; a value may be double-quoted.
_SPEC = re.compile(r"^(?P<mechanism>[A-Z0-9-]+)=\[(?P<body>.*)\]$")
_ITEM = re.compile(r'\s*(?P<key>[a-z]+)=(?:"(?P<quoted>[^"]*)"|(?P<bare>[^,]*))\s*(?:,|$)')
ZK_CONNECT_TIMEOUT_S = 15.0


class BrokerRunning(Exception):
    """A broker holds the log dir: the credential must go through it (AlterUserScramCredentials)."""


@dataclass(frozen=True, slots=True)
class ScramUser:
    name: str
    mechanism: str
    password: str
    iterations: int = SCRAM_MIN_ITERATIONS


def parse_add_scram(spec: str) -> ScramUser:
    """``SCRAM-SHA-256=[name=alice,password=alice-secret,iterations=8192]``, as kafka-storage takes it."""
    match = _SPEC.match(spec.strip())
    if not match:
        raise ConfigError(f"Invalid --add-scram '{spec}': expected MECHANISM=[name=...,password=...]")
    body, items, at = match.group("body"), {}, 0
    while at < len(body):
        item = _ITEM.match(body, at)
        if not item or item.end() == at:
            raise ConfigError(f"Invalid --add-scram '{spec}': cannot read '{body[at:]}'")
        items[item.group("key")] = item.group("quoted") if item.group("quoted") is not None else item.group("bare")
        at = item.end()
    unknown = set(items) - {"name", "password", "iterations"}
    if unknown:
        raise ConfigError(f"Invalid --add-scram '{spec}': unsupported keys {sorted(unknown)} "
                          "(name, password and iterations are)")
    if "name" not in items or "password" not in items:
        raise ConfigError(f"Invalid --add-scram '{spec}': name and password are required")
    return checked(ScramUser(items["name"], match.group("mechanism"), items["password"],
                             _iterations(items.get("iterations", str(SCRAM_MIN_ITERATIONS)))))


def checked(user: ScramUser) -> ScramUser:
    """Kafka's rules for a credential (ScramControlManager): a name, a known mechanism, 4096..16384."""
    if not user.name:
        raise ConfigError("The user name must not be empty")
    if user.mechanism not in SCRAM_MECHANISMS:
        raise ConfigError(f"Unsupported SCRAM mechanism {user.mechanism}: one of {', '.join(SCRAM_MECHANISMS)}")
    if not SCRAM_MIN_ITERATIONS <= user.iterations <= SCRAM_MAX_ITERATIONS:
        raise ConfigError(f"iterations must be between {SCRAM_MIN_ITERATIONS} and {SCRAM_MAX_ITERATIONS}, not {user.iterations}")
    return user


def _iterations(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"iterations must be an integer, not '{text}'") from None


def add_credentials(config: BrokerConfig, users: list[ScramUser]) -> str:
    """Write the users' credentials where this broker's configuration keeps them; where that is."""
    credentials = [(u, scram_credential_for(u.mechanism, u.password, iterations=u.iterations)) for u in users]
    connect = config.get_str("zookeeper.connect")
    if connect:
        _write_zookeeper(connect, credentials)
        return f"ZooKeeper {connect} (/config/users)"
    # The broker's lock on its log dir, held while writing: a running broker would not see the
    # change and would write its own copy of the file over it.
    try:
        lock = lock_dir(config.log_dirs[0])
    except LogDirLockedError as exc:
        raise BrokerRunning(f"{exc} Stop the broker first, or add the user through it (kafka-configs "
                            "--bootstrap-server ... --alter --add-config 'SCRAM-SHA-256=[password=...]' "
                            "--entity-type users --entity-name ...)") from None
    try:
        store = open_local_store(config.log_dirs[0], config.node_id, cluster_id=config.raw("cluster.id"))
        try:
            for user, credential in credentials:
                asyncio.run(store.set_scram_credential(user.name, user.mechanism, credential))
        finally:
            store.close()
    finally:
        lock.release()
    return str(store.quorum.partition_dir)


def _write_zookeeper(connect: str, credentials: list[tuple[ScramUser, ScramCredential]]) -> None:
    """The user's znode keeps its other keys (quotas, the other mechanism); then a notification."""
    client = KazooClient(hosts=connect)
    try:
        client.start(ZK_CONNECT_TIMEOUT_S)
    except KazooTimeoutError:
        raise ConfigError(f"could not connect to ZooKeeper at {connect} within {ZK_CONNECT_TIMEOUT_S:g} s") from None
    try:
        for user, credential in credentials:
            path = zk.config_path("users", user.name)
            try:
                data, _ = client.get(path)
                configs = zk.decode_config(data) if data else {}
            except NoNodeError:
                configs = {}
            configs[user.mechanism] = zk.encode_scram(credential.salt, credential.stored_key,
                                                      credential.server_key, credential.iterations)
            try:
                client.create(path, zk.encode_config(configs), makepath=True)
            except NodeExistsError:
                client.set(path, zk.encode_config(configs))
            client.create(f"{zk.CONFIG_CHANGES}/{zk.CONFIG_CHANGE_PREFIX}",
                          zk.encode_config_change("users", user.name), sequence=True, makepath=True)
    finally:
        client.stop()
        client.close()
