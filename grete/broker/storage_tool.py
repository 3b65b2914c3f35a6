"""``grete storage``: Kafka 4.3.1's ``kafka-storage`` (``random-uuid``, ``format``, ``info``) with its
options, output, messages and exit codes (0, or 1 for every failure).

``format`` writes what Kafka's Formatter writes into each log dir of ``server.properties`` (and
``metadata.log.dir``): ``meta.properties`` version 1 and ``bootstrap.checkpoint`` (the initial
feature levels for the release version, then any ``--add-scram`` credentials); with
``--standalone`` / ``--initial-controllers`` the metadata log dir also gets the dynamic quorum's
first snapshot ``__cluster_metadata-0/00000000000000000000-0000000000.checkpoint``
(KRaftVersionRecord, VotersRecord). Where Kafka fails with a stack trace, grete prints the message.
"""

from __future__ import annotations

import argparse
import io
import ipaddress
import logging
import os
import re
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from grete.broker import storage_cli
from grete.broker.config import BrokerConfig, ConfigError
from grete.broker.requests import release_versions as rv
from grete.broker.security.delegation_tokens import scram_credential_for
from grete.broker.security.scram_bootstrap import ScramUser, parse_add_scram
from grete.coordinator.kraft.store import SCRAM_MECHANISM_TYPES
from grete.coordinator.metadata import new_topic_id
from grete.protocol.codec import Message
from grete.protocol.metadata import (
    FeatureLevelRecord,
    KRaftVersionRecord,
    UserScramCredentialRecord,
    VotersRecord,
)
from grete.protocol.metadata_frame import encode_metadata_record
from grete.storage.checkpoint_file import (
    CLUSTER_METADATA_DIR,
    now_ms,
    write_bootstrap_checkpoint,
    write_snapshot,
)
from grete.storage.files import META_PROPERTIES, uuid_to_kafka
from grete.storage.meta_properties import (
    V0,
    V1,
    MetaProperties,
    MetaPropertiesError,
    check_ensemble,
    java_hash_order,
    new_directory_id,
    parse_uuid,
    read_meta_properties,
    write_meta_properties,
)

SOURCE = "format command"


class StorageToolError(Exception):
    """What kafka-storage prints on stderr before exiting with 1."""


# --- command line ----------------------------------------------------------------------------------

def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """The command's exit code; what Kafka prints on stdout goes to ``out``, its errors to ``err``."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        if args.storage_command == "random-uuid":
            print(uuid_to_kafka(new_topic_id()), file=out)
            return 0
        config = _quietly(StorageConfig.load, args.config)
        if args.storage_command == "info":
            return info(config, out)
        format_storage(config, FormatOptions.from_args(args), out, err)
        return 0
    except (StorageToolError, ConfigError, MetaPropertiesError, ValueError) as exc:
        print(exc, file=err)
        return 1
    except OSError as exc:
        print(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc), file=err)
        return 1


# --- the configuration kafka-storage reads -------------------------------------------------------------

@dataclass(frozen=True)
class Endpoint:
    listener: str
    host: str
    port: int


@dataclass(frozen=True)
class StorageConfig:
    process_roles: list[str]
    node_id: int
    controller_listener: str
    log_dirs: list[str]
    metadata_log_dir: str
    voters: list[str]
    controller_endpoints: list[Endpoint]  # effective advertised controller listeners

    @property
    def directories(self) -> list[str]:
        """StorageTool.configToLogDirectories: the log dirs and the metadata log dir, sorted."""
        return sorted({*self.log_dirs, self.metadata_log_dir})

    @property
    def is_controller(self) -> bool:
        return "controller" in self.process_roles

    @classmethod
    def load(cls, path: str) -> StorageConfig:
        if not Path(path).exists():
            raise StorageToolError(f"java.nio.file.NoSuchFileException: {path}")
        config = BrokerConfig.load(path)
        originals = config.originals
        _require(originals, "process.roles")
        if "node.id" not in originals and "broker.id" not in originals:
            _require(originals, "node.id")
        _require(originals, "controller.listener.names")
        roles = config.get_list("process.roles")
        names = config.get_list("controller.listener.names")
        voters = config.get_list("controller.quorum.voters")
        if roles and not voters and not config.get_list("controller.quorum.bootstrap.servers"):
            raise StorageToolError("If using process.roles, either controller.quorum.bootstrap.servers must contain "
                                   "the set of bootstrap controllers or controller.quorum.voters must contain a "
                                   "parseable set of controllers.")
        listeners = _endpoints(config.get_list("listeners"))
        if roles == ["broker"] and any(e.listener in names for e in listeners):
            raise StorageToolError("requirement failed: controller.listener.names must not contain a value appearing "
                                   "in the 'listeners' configuration when running KRaft with just the broker role")
        log_dirs = config.get_list("log.dirs") or [config.get_str("log.dir")]
        advertised = _endpoints(config.get_list("advertised.listeners"))
        controller = [e for e in advertised if e.listener == names[0]] or \
            [e for e in listeners if e.listener == names[0]]
        return cls(roles, config.node_id, names[0], log_dirs, config.get_str("metadata.log.dir") or log_dirs[0],
                   voters, controller)


def _quietly(load: Callable[[str], StorageConfig], path: str) -> StorageConfig:
    """Keys grete does not know are not worth a warning here: kafka-storage reads the file silently."""
    logger = logging.getLogger("grete.broker.config")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return load(path)
    finally:
        logger.setLevel(level)


def _require(originals: dict[str, str], key: str) -> None:
    if key not in originals:
        raise StorageToolError(f'Missing required configuration "{key}" which has no default value.')


_LISTENER = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?:\[(?P<v6>[^\]]*)\]|(?P<host>[^:]*)):(?P<port>-?\d+)$")


def _endpoints(values: Sequence[str]) -> list[Endpoint]:
    out = []
    for value in values:
        match = _LISTENER.match(value.strip())
        if match is None:
            raise StorageToolError(f"Unable to parse {value} to a broker endpoint")
        host = match.group("v6") if match.group("v6") is not None else match.group("host")
        out.append(Endpoint(match.group("name").upper(), host, int(match.group("port"))))
    return out


# --- format ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Voter:
    node_id: int
    host: str
    port: int
    directory_id: uuid.UUID


@dataclass(frozen=True)
class FormatOptions:
    cluster_id: str
    release_version: str | None = None
    features: tuple[str, ...] = ()
    scram: tuple[str, ...] = ()
    ignore_formatted: bool = False
    standalone: bool = False
    no_initial_controllers: bool = False
    initial_controllers: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> FormatOptions:
        return cls(args.cluster_id, args.release_version, tuple(args.feature), tuple(args.add_scram),
                   args.ignore_formatted, args.standalone, args.no_initial_controllers, args.initial_controllers)


def format_storage(config: StorageConfig, options: FormatOptions, out: TextIO, err: TextIO) -> None:
    """Kafka's StorageTool.runFormatCommand and Formatter.run, in their order of checks."""
    if not config.process_roles:
        raise StorageToolError("The kafka configuration file appears to be for a legacy cluster. "
                               "Formatting is only supported for clusters in KRaft mode.")
    release = rv.from_version_string(options.release_version) if options.release_version else None
    voters = _initial_voters(config, options)
    if not options.no_initial_controllers and config.is_controller and not config.voters and voters is None:
        raise StorageToolError("Because controller.quorum.voters is not set on this controller, you must specify "
                               "one of the following: --standalone, --initial-controllers, or "
                               "--no-initial-controllers.")
    if config.node_id < 0:
        raise StorageToolError("You must specify a valid non-negative node ID.")
    dynamic = not config.voters and (voters is not None or options.no_initial_controllers)
    release, levels = effective_features(release, [_parse_feature(f) for f in options.features], dynamic)
    records = bootstrap_records(release, levels, [parse_add_scram(s) for s in options.scram])
    _write_dirs(config, options, voters, levels, release, records, out, err)


def _initial_voters(config: StorageConfig, options: FormatOptions) -> dict[int, Voter] | None:
    if (options.standalone or options.initial_controllers) and config.voters:
        raise StorageToolError("You cannot specify controller.quorum.voters and format the node with "
                               "--initial-controllers or --standalone. If you want to use dynamic quorum, please "
                               "remove controller.quorum.voters and specify controller.quorum.bootstrap.servers "
                               "instead.")
    if options.initial_controllers is not None:
        return parse_voters(options.initial_controllers)
    if not options.standalone:
        return None
    if not config.is_controller:
        raise StorageToolError("You can only use --standalone on a controller.")
    if not config.controller_endpoints:
        raise StorageToolError("No controller listeners found.")
    endpoint = config.controller_endpoints[0]
    return {config.node_id: Voter(config.node_id, endpoint.host or "localhost", endpoint.port, new_topic_id())}


def parse_voters(text: str) -> dict[int, Voter]:
    """DynamicVoters.parse: ``id@host:port:directory-id,...``; ValueError with Kafka's messages."""
    voters: dict[int, Voter] = {}
    for item in text.strip().split(","):
        if item:
            voter = _parse_voter(item.strip())
            if voter.node_id in voters:
                raise ValueError(f"Node id {voter.node_id} was specified more than once.")
            voters[voter.node_id] = voter
    if not voters:
        raise ValueError("No voters given.")
    return dict(sorted(voters.items()))


def _parse_voter(text: str) -> Voter:
    node, at, rest = text.partition("@")
    if not at:
        raise ValueError("No @ found in dynamic voter string.")
    if not node:
        raise ValueError("Invalid @ at beginning of dynamic voter string.")
    node_id = _java_int(node, "Failed to parse node id in dynamic voter string.")
    if node_id < 0:
        raise ValueError(f"Invalid negative node id {node_id} in dynamic voter string.")
    if not rest:
        raise ValueError("No hostname found after node id.")
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise ValueError("Hostname began with left bracket, but no right bracket was found.")
        host, rest = rest[1:end], rest[end + 1:]
    else:
        colon = rest.find(":")
        if colon < 0:
            raise ValueError("No colon following hostname could be found.")
        host, rest = rest[:colon], rest[colon:]
    if not rest.startswith(":"):
        raise ValueError("Port section must start with a colon.")
    port_text, port_colon, directory = rest[1:].partition(":")
    if not port_colon:
        raise ValueError("No colon following port could be found.")
    port = _java_int(port_text, "Failed to parse port in dynamic voter string.")
    if not 0 <= port <= 65535:
        raise ValueError(f"Invalid port {port} in dynamic voter string.")
    try:
        directory_id = parse_uuid(directory)
    except ValueError:
        raise ValueError("Failed to parse directory ID in dynamic voter string.") from None
    return Voter(node_id, host, port, directory_id)


def _java_int(text: str, message: str) -> int:
    if not re.fullmatch(r"[+-]?\d+", text) or not -2**31 <= int(text) < 2**31:
        raise ValueError(message)
    return int(text)


def _parse_feature(text: str) -> tuple[str, int]:
    name, eq, level = text.partition("=")
    if not eq:
        raise StorageToolError(f"Can't parse feature=level string {text}: equals sign not found.")
    name, level = name.strip(), level.strip()
    if not re.fullmatch(r"[+-]?\d+", level) or not -2**15 <= int(level) < 2**15:
        raise StorageToolError(f"Can't parse feature=level string {text}: unable to parse {level} as a short.")
    return name, int(level)


def effective_features(release: rv.MetadataVersion | None, features: list[tuple[str, int]],
                       dynamic: bool) -> tuple[rv.MetadataVersion, dict[str, int]]:
    """Formatter.calculateEffectiveReleaseVersion and calculateEffectiveFeatureLevels."""
    given = dict(features)
    if rv.METADATA_VERSION in given:
        if release is not None:
            raise StorageToolError(f"Use --release-version instead of --feature {rv.METADATA_VERSION}=X to avoid "
                                   "ambiguity.")
        release = _verify(rv.from_feature_level(given[rv.METADATA_VERSION]))
    release = release or rv.LATEST_PRODUCTION
    supported = sorted(rv.FEATURE_LEVELS)
    for name in sorted(given):
        if name != rv.METADATA_VERSION and name not in rv.FEATURE_LEVELS:
            raise StorageToolError(f"Unsupported feature: {name}. Supported features are: {', '.join(supported)}")
    levels = {**given, rv.METADATA_VERSION: release.level}
    levels[rv.KRAFT_VERSION] = _kraft_version(given.get(rv.KRAFT_VERSION), dynamic)
    for name in rv.FEATURE_LEVELS:
        levels.setdefault(name, rv.default_level(name, release))
    for name in sorted(levels):
        if name != rv.METADATA_VERSION:
            rv.check_level(name, levels[name], levels)
    return release, levels


def _verify(version: rv.MetadataVersion) -> rv.MetadataVersion:
    if not version.production:
        raise StorageToolError(f"{rv.METADATA_VERSION} {version} is not yet stable.")
    return version


_DYNAMIC_FLAGS = "one of the flags --standalone, --initial-controllers, or --no-initial-controllers"


def _kraft_version(configured: int | None, dynamic: bool) -> int:
    if configured is None:
        return 1 if dynamic else 0
    if configured == 0 and dynamic:
        raise StorageToolError(f"Cannot set kraft.version to 0 if controller.quorum.voters is empty and "
                               f"{_DYNAMIC_FLAGS} is used. For dynamic controllers support, try removing the "
                               "--feature flag for kraft.version.")
    if configured != 0 and not dynamic:
        raise StorageToolError(f"Cannot set kraft.version to {configured} unless controller.quorum.voters is empty "
                               f"and {_DYNAMIC_FLAGS} is used. For dynamic controllers support, try using one of "
                               "--standalone, --initial-controllers, or --no-initial-controllers and removing "
                               "controller.quorum.voters.")
    return configured


def bootstrap_records(release: rv.MetadataVersion, levels: dict[str, int], users: list[ScramUser]) -> list[Message]:
    """BootstrapMetadata.fromVersions (metadata.version first, then the other features but
    kraft.version by name, level 0 left out), then the SCRAM credentials."""
    records: list[Message] = [FeatureLevelRecord(name=rv.METADATA_VERSION, feature_level=release.level)]
    for name in sorted(levels):
        if name not in (rv.METADATA_VERSION, rv.KRAFT_VERSION) and levels[name] > 0:
            records.append(FeatureLevelRecord(name=name, feature_level=levels[name]))
    if users and release.level < rv.SCRAM_FROM_LEVEL:
        raise StorageToolError("SCRAM is only supported in metadata.version 3.5-IV2 or later.")
    for user in users:
        credential = scram_credential_for(user.mechanism, user.password, salt=_scram_salt(),
                                          iterations=user.iterations)
        records.append(UserScramCredentialRecord(name=user.name, mechanism=SCRAM_MECHANISM_TYPES[user.mechanism],
                                                 salt=credential.salt, stored_key=credential.stored_key,
                                                 server_key=credential.server_key, iterations=user.iterations))
    return records


def _scram_salt() -> bytes:
    """ScramFormatter.secureRandomBytes: a random 130-bit number in base 36, as ASCII."""
    value = int.from_bytes(os.urandom(17), "big") >> 6
    digits = ""
    while value:
        value, digit = divmod(value, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + digits
    return (digits or "0").encode("ascii")


def describe_bootstrap(records: Sequence[Message], release: rv.MetadataVersion) -> str:
    """BootstrapMetadata.toString, as kafka-storage format prints it."""
    items = ", ".join(f"ApiMessageAndVersion({_java_str(r)} at version 0)" for r in records)
    return f"BootstrapMetadata(records=[{items}], metadataVersionLevel={release.level}, source={SOURCE})"


def _java_str(record: Message) -> str:
    if isinstance(record, FeatureLevelRecord):
        return f"FeatureLevelRecord(name='{record.name}', featureLevel={record.feature_level})"
    assert isinstance(record, UserScramCredentialRecord)
    def signed(data: bytes) -> str:
        return "[" + ", ".join(str(b - 256 if b > 127 else b) for b in data) + "]"
    return (f"UserScramCredentialRecord(name='{record.name}', mechanism={record.mechanism}, salt={signed(record.salt)}, "
            f"storedKey={signed(record.stored_key)}, serverKey={signed(record.server_key)}, "
            f"iterations={record.iterations})")


# --- writing the directories -------------------------------------------------------------------------

_DESCRIPTIONS = {"log": "data directory", "static": "metadata directory",
                 "dynamic": "dynamic metadata directory", "voter": "dynamic metadata voter directory"}


def _write_dirs(config: StorageConfig, options: FormatOptions, voters: dict[int, Voter] | None,
                levels: dict[str, int], release: rv.MetadataVersion, records: list[Message],
                out: TextIO, err: TextIO) -> None:
    """Formatter.doFormat: refuse formatted directories unless told, skip unreadable ones, then
    write each empty one (in the order Kafka's hash map gives them)."""
    empty, formatted, broken = _load_dirs(config.directories, err)
    check_ensemble({Path(d): m for d, m in formatted.items()}, options.cluster_id, config.node_id)
    if formatted and not options.ignore_formatted:
        raise StorageToolError(f"Log directory {min(formatted)} is already formatted. Use --ignore-formatted to "
                               "ignore this directory and format the others.")
    for directory in broken:
        print(f"I/O error trying to read log directory {directory}. Ignoring...", file=out)
    if broken and not empty and not formatted:
        raise StorageToolError("No available log directories to format.")
    if not empty:
        print("All of the log directories are already formatted.", file=out)
        return
    print(f"Bootstrap metadata: {describe_bootstrap(records, release)}", file=out)
    values = [encode_metadata_record(r, 0) for r in records]
    taken = [m.directory_id for m in formatted.values() if m.directory_id is not None]
    for directory in java_hash_order(empty):
        kind = _kind(directory, config, voters)
        directory_id = voters[config.node_id].directory_id if kind == "voter" and voters else new_directory_id(taken)
        taken.append(directory_id)
        print(f"Formatting {_DESCRIPTIONS[kind]} {directory} with {rv.METADATA_VERSION} {release}.", file=out)
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        write_bootstrap_checkpoint(path, values)
        if kind in ("dynamic", "voter") and voters:
            _write_quorum_snapshot(path, voters, levels[rv.KRAFT_VERSION], config.controller_listener)
        write_meta_properties(path, MetaProperties(V1, options.cluster_id, config.node_id, directory_id))


def _load_dirs(directories: list[str], err: TextIO) -> tuple[list[str], dict[str, MetaProperties], list[str]]:
    empty, formatted, broken = [], {}, []
    for directory in directories:
        try:
            meta = read_meta_properties(Path(directory))
        except (MetaPropertiesError, OSError) as exc:
            print(f"ERROR Error while reading meta.properties file {Path(directory, META_PROPERTIES).absolute()}: "
                  f"{exc}", file=err)
            broken.append(directory)
            continue
        if meta is None:
            empty.append(directory)
        else:
            formatted[directory] = meta
    return empty, formatted, broken


def _kind(directory: str, config: StorageConfig, voters: dict[int, Voter] | None) -> str:
    if directory != config.metadata_log_dir:
        return "log"
    if voters is None:
        return "static"
    return "voter" if config.node_id in voters else "dynamic"


def _write_quorum_snapshot(directory: Path, voters: dict[int, Voter], kraft_version: int, listener: str) -> None:
    """Formatter.writeDynamicQuorumSnapshot: the bootstrap snapshot (0, 0) with the voter set."""
    voters_record = VotersRecord(version=0, voters=[
        VotersRecord.Voter(voter_id=v.node_id, voter_directory_id=v.directory_id,
                           endpoints=[VotersRecord.Endpoint(name=listener, host=_java_host(v.host), port=v.port)],
                           k_raft_version_feature=VotersRecord.KRaftVersionFeature(min_supported_version=0,
                                                                                   max_supported_version=1))
        for v in voters.values()])
    leading: list[Message] = []
    if kraft_version > 0:
        leading = [KRaftVersionRecord(version=0, k_raft_version=kraft_version), voters_record]
    write_snapshot(directory / CLUSTER_METADATA_DIR, 0, 0, [], last_contained_log_timestamp=now_ms(),
                   leading_control=leading)


def _java_host(host: str) -> str:
    """InetSocketAddress.getHostString: an IPv6 literal in Java's full form (``0:0:0:0:0:0:0:1``)."""
    try:
        address = ipaddress.IPv6Address(host)
    except ValueError:
        return host
    return ":".join(f"{int(group, 16):x}" for group in address.exploded.split(":"))


# --- info ------------------------------------------------------------------------------------------

def info(config: StorageConfig, out: TextIO) -> int:
    """StorageTool.infoCommand: the directories found, the metadata of the first formatted one, and
    the problems; 1 when there is any."""
    problems: list[str] = []
    found: list[str] = []
    first: MetaProperties | None = None
    for directory in config.directories:
        path = Path(directory)
        if not path.is_dir():
            problems.append(f"{directory} {'is not a directory' if path.exists() else 'does not exist'}")
            continue
        found.append(directory)
        try:
            meta = read_meta_properties(path)
        except MetaPropertiesError as exc:
            problems.append(str(exc))
            continue
        if meta is None:
            problems.append(f"{directory} is not formatted.")
        elif first is None:
            first = meta
        elif first.cluster_id != meta.cluster_id:
            problems.append("Mismatched cluster IDs between storage directories.")
        elif first.node_id != meta.node_id:
            problems.append("Mismatched node IDs between storage directories.")
    if first is not None and first.version == V0:
        problems.append("The kafka configuration file appears to be for a cluster in KRaft mode, but the "
                        "directories are formatted for legacy mode.")
    _print_info(found, first, problems, out)
    return 1 if problems else 0


def _print_info(found: list[str], meta: MetaProperties | None, problems: list[str], out: TextIO) -> None:
    if found:
        print("Found log directory:" if len(found) == 1 else "Found log directories:", file=out)
        for directory in found:
            print(f"  {directory}", file=out)
        print("", file=out)
    if meta is not None:
        print(f"Found metadata: {meta.describe()}", file=out)
        print("", file=out)
    if problems:
        print("Found problem:" if len(problems) == 1 else "Found problems:", file=out)
        for problem in problems:
            print(f"  {problem}", file=out)
        print("", file=out)


def format_ignoring_formatted(properties: Path, cluster_id: str) -> str | None:
    """``grete storage format --ignore-formatted -t cluster_id -c properties``, as ``grete host`` and
    the test clusters format a node before its first start; what it printed on stderr if it failed."""
    parser = argparse.ArgumentParser()
    storage_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["storage", "format", "--ignore-formatted", f"--cluster-id={cluster_id}",
                              "-c", str(properties)])
    err = io.StringIO()
    return None if run(args, io.StringIO(), err) == 0 else err.getvalue().strip()
