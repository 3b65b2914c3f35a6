"""``grete storage`` against Kafka 4.3.1's ``kafka-storage``: the same files, output, messages and exit
codes for the same inputs. The expected messages below are what kafka-storage 4.3.1 printed; the
differential tests run it (and Kafka itself, on storage grete formatted) when Java is installed."""

from __future__ import annotations

import hashlib
import hmac
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grete import cli
from grete.protocol.codec import Message
from grete.protocol.metadata import (
    FeatureLevelRecord,
    KRaftVersionRecord,
    UserScramCredentialRecord,
    VotersRecord,
)
from grete.protocol.metadata_frame import decode_metadata_record
from grete.storage.checkpoint_file import Checkpoint, read_checkpoint
from grete.storage.files import uuid_to_kafka
from grete.storage.meta_properties import load_properties
from tests.storage.test_checkpoint_file import need_kafka
from tools import kafka_dist
from tools.reference_kafka import ReferenceKafka, Security

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
SNAPSHOT = "__cluster_metadata-0/00000000000000000000-0000000000.checkpoint"
DEFAULT_FEATURES = [("metadata.version", 30), ("eligible.leader.replicas.version", 1), ("group.version", 1),
                    ("share.version", 1), ("streams.version", 1), ("transaction.version", 2)]


def server_properties(directory: Path, name: str = "server", *, voters: bool = True, roles: str = "broker,controller",
                      node_id: str | None = "1", log_dirs: str | None = None, extra: str = "") -> Path:
    """A combined node's properties with static voters, or with bootstrap servers (dynamic quorum)."""
    port = 19093
    quorum = (f"controller.quorum.voters=1@127.0.0.1:{port}" if voters
              else f"controller.quorum.bootstrap.servers=127.0.0.1:{port}")
    lines = [f"process.roles={roles}" if roles else "", f"node.id={node_id}" if node_id is not None else "", quorum,
             f"listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:{port}",
             "controller.listener.names=CONTROLLER",
             "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
             f"log.dirs={log_dirs or directory / name}", extra]
    path = directory / f"{name}.properties"
    path.write_text("".join(f"{line}\n" for line in lines if line))
    return path


def grete(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = cli.main(["storage", *args])
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def records_of(checkpoint: Checkpoint) -> list[Message]:
    return [decode_metadata_record(value)[0] for value in checkpoint.values]


# --- grete alone ---------------------------------------------------------------------------------

def test_format_writes_meta_properties_and_bootstrap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = server_properties(tmp_path)
    code, out, err = grete(capsys, "format", "-t", CLUSTER, "-c", str(config))
    assert (code, err) == (0, "")
    assert out.splitlines()[1:] == [f"Formatting metadata directory {tmp_path / 'server'} with metadata.version 4.3-IV0."]
    assert out.startswith("Bootstrap metadata: BootstrapMetadata(records=[ApiMessageAndVersion(FeatureLevelRecord("
                          "name='metadata.version', featureLevel=30) at version 0), ")
    props = load_properties((tmp_path / "server" / "meta.properties").read_text())
    assert props.keys() == {"version", "node.id", "cluster.id", "directory.id"}
    assert (props["version"], props["node.id"], props["cluster.id"]) == ("1", "1", CLUSTER)
    checkpoint = read_checkpoint(tmp_path / "server" / "bootstrap.checkpoint")
    assert records_of(checkpoint) == [FeatureLevelRecord(name=n, feature_level=v) for n, v in DEFAULT_FEATURES]
    assert not (tmp_path / "server" / "__cluster_metadata-0").exists()


@pytest.mark.parametrize("release, features", [
    ("3.9", [("metadata.version", 21)]),  # features at level 0 are left out
    ("4.0", [("metadata.version", 25), ("group.version", 1), ("transaction.version", 2)]),
    ("4.1-IV0", [("metadata.version", 26), ("eligible.leader.replicas.version", 1), ("group.version", 1),
                 ("transaction.version", 2)]),
])
def test_release_version_sets_the_default_levels(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 release: str, features: list[tuple[str, int]]) -> None:
    code, _, err = grete(capsys, "format", "-t", CLUSTER, "-c", str(server_properties(tmp_path)), "-r", release)
    assert (code, err) == (0, "")
    records = records_of(read_checkpoint(tmp_path / "server" / "bootstrap.checkpoint"))
    assert records == [FeatureLevelRecord(name=n, feature_level=v) for n, v in features]


def test_standalone_writes_the_voter_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = server_properties(tmp_path, voters=False)
    code, out, _ = grete(capsys, "format", "-t", CLUSTER, "-c", str(config), "--standalone")
    assert code == 0 and "Formatting dynamic metadata voter directory" in out
    snapshot = read_checkpoint(tmp_path / "server" / SNAPSHOT)
    kraft, voters = snapshot.control
    assert isinstance(voters, VotersRecord) and kraft == KRaftVersionRecord(version=0, k_raft_version=1)
    directory_id = load_properties((tmp_path / "server" / "meta.properties").read_text())["directory.id"]
    (voter,) = voters.voters
    assert (voter.voter_id, uuid_to_kafka(voter.voter_directory_id)) == (1, directory_id)
    assert [(e.name, e.host, e.port) for e in voter.endpoints] == [("CONTROLLER", "127.0.0.1", 19093)]


def test_initial_controllers_and_dir_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dirs = ",".join(str(tmp_path / d) for d in ("m1", "m2"))
    config = server_properties(tmp_path, voters=False, log_dirs=dirs, extra=f"metadata.log.dir={tmp_path / 'm3'}")
    given = "1@ctl1:9093:c7jxlDVYQ4ORzybZtPtOXg,2@[::1]:9094:JEXY6aqzQY-32P5TStzaFg"
    code, out, _ = grete(capsys, "format", "-t", CLUSTER, "-c", str(config), "-I", given)
    assert code == 0
    # Kafka writes them in its hash map's order (kafka-storage 4.3.1 printed m3, m2, m1 for /tmp/ks/d/m*).
    kinds = [line.split(" with ")[0] for line in out.splitlines()[1:]]
    assert sorted(kinds) == sorted([f"Formatting dynamic metadata voter directory {tmp_path / 'm3'}",
                                    f"Formatting data directory {tmp_path / 'm2'}",
                                    f"Formatting data directory {tmp_path / 'm1'}"])
    meta = load_properties((tmp_path / "m3" / "meta.properties").read_text())
    assert meta["directory.id"] == "c7jxlDVYQ4ORzybZtPtOXg"
    voters = read_checkpoint(tmp_path / "m3" / SNAPSHOT).control[1]
    assert isinstance(voters, VotersRecord)
    assert [(v.voter_id, v.endpoints[0].host, v.endpoints[0].port) for v in voters.voters] == \
        [(1, "ctl1", 9093), (2, "0:0:0:0:0:0:0:1", 9094)]  # Java's form of ::1
    assert not (tmp_path / "m1" / "__cluster_metadata-0").exists()


def test_hash_order_of_directories() -> None:
    from grete.storage.meta_properties import java_hash_order
    assert java_hash_order(["/tmp/ks/d/m1", "/tmp/ks/d/m2", "/tmp/ks/d/m3"]) == \
        ["/tmp/ks/d/m3", "/tmp/ks/d/m2", "/tmp/ks/d/m1"]


def test_scram_credential_verifies_the_password(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = server_properties(tmp_path)
    code, out, _ = grete(capsys, "format", "-t", CLUSTER, "-c", str(config),
                         "--add-scram", "SCRAM-SHA-512=[name=bob,password=pw,iterations=8192]")
    assert code == 0 and "UserScramCredentialRecord(name='bob', mechanism=2, salt=[" in out
    record = records_of(read_checkpoint(tmp_path / "server" / "bootstrap.checkpoint"))[-1]
    assert isinstance(record, UserScramCredentialRecord)
    assert record.salt.isalnum() and record.iterations == 8192
    assert_verifies(record, "pw")


def assert_verifies(record: UserScramCredentialRecord, password: str) -> None:
    digest = {1: "sha256", 2: "sha512"}[record.mechanism]
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), record.salt, record.iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    assert hashlib.new(digest, client_key).digest() == record.stored_key
    assert hmac.new(salted, b"Server Key", digest).digest() == record.server_key


# kafka-storage 4.3.1's message for each input (its stderr's first line, the exception prefix removed).
ERRORS = [
    (dict(), ["-g"], None),
    (dict(node_id=None), [], 'Missing required configuration "node.id" which has no default value.'),
    (dict(roles=""), [], 'Missing required configuration "process.roles" which has no default value.'),
    (dict(extra="broker.id=2"), [], "You must set `node.id` to the same value as `broker.id`."),
    (dict(), ["--standalone"], "You cannot specify controller.quorum.voters and format the node with "
     "--initial-controllers or --standalone. If you want to use dynamic quorum, please remove "
     "controller.quorum.voters and specify controller.quorum.bootstrap.servers instead."),
    (dict(voters=False), [], "Because controller.quorum.voters is not set on this controller, you must specify one "
     "of the following: --standalone, --initial-controllers, or --no-initial-controllers."),
    (dict(), ["-r", "9.9"], "Unknown metadata.version '9.9'. Supported metadata.version are: 3.3-IV3, 3.4-IV0, "
     "3.5-IV0, 3.5-IV1, 3.5-IV2, 3.6-IV0, 3.6-IV1, 3.6-IV2, 3.7-IV0, 3.7-IV1, 3.7-IV2, 3.7-IV3, 3.7-IV4, 3.8-IV0, "
     "3.9-IV0, 4.0-IV0, 4.0-IV1, 4.0-IV2, 4.0-IV3, 4.1-IV0, 4.1-IV1, 4.2-IV0, 4.2-IV1, 4.3-IV0"),
    (dict(), ["-f", "foo.version=1"], "Unsupported feature: foo.version. Supported features are: "
     "eligible.leader.replicas.version, group.version, kraft.version, share.version, streams.version, "
     "transaction.version"),
    (dict(), ["-f", "metadata.version=20", "-r", "3.8"],
     "Use --release-version instead of --feature metadata.version=X to avoid ambiguity."),
    (dict(), ["-f", "kraft.version=1"], "Cannot set kraft.version to 1 unless controller.quorum.voters is empty and "
     "one of the flags --standalone, --initial-controllers, or --no-initial-controllers is used. For dynamic "
     "controllers support, try using one of --standalone, --initial-controllers, or --no-initial-controllers and "
     "removing controller.quorum.voters."),
    (dict(voters=False), ["-s", "-f", "kraft.version=0"], "Cannot set kraft.version to 0 if controller.quorum.voters "
     "is empty and one of the flags --standalone, --initial-controllers, or --no-initial-controllers is used. For "
     "dynamic controllers support, try removing the --feature flag for kraft.version."),
    (dict(), ["-f", "group.version"], "Can't parse feature=level string group.version: equals sign not found."),
    (dict(), ["-f", "group.version=x"], "Can't parse feature=level string group.version=x: unable to parse x as a "
     "short."),
    (dict(), ["-f", "group.version=5"], "No feature:group.version with feature level 5"),
    (dict(), ["-r", "3.9", "-f", "eligible.leader.replicas.version=1"],
     "eligible.leader.replicas.version could not be set to 1 because it depends on metadata.version level 23"),
    (dict(voters=False), ["-I", "1@127.0.0.1"], "No colon following hostname could be found."),
    (dict(voters=False), ["-I", "1@h:9093:c7jxlDVYQ4ORzybZtPtOXg,1@h:9094:JEXY6aqzQY-32P5TStzaFg"],
     "Node id 1 was specified more than once."),
    (dict(voters=False, roles="broker", extra="listeners=PLAINTEXT://127.0.0.1:19092"), ["-s"],
     "You can only use --standalone on a controller."),
    (dict(), ["-r", "3.4", "-S", "SCRAM-SHA-256=[name=a,password=b]"],
     "SCRAM is only supported in metadata.version 3.5-IV2 or later."),
]


@pytest.mark.parametrize("props, args, message", ERRORS)
def test_format_refuses_as_kafka_does(tmp_path: Path, capsys: pytest.CaptureFixture[str], props: dict[str, object],
                                      args: list[str], message: str | None) -> None:
    config = server_properties(tmp_path, **props)  # type: ignore[arg-type]
    if message is None:  # formatting a formatted directory
        assert grete(capsys, "format", "-t", CLUSTER, "-c", str(config))[0] == 0
        assert grete(capsys, "format", "-t", CLUSTER, "-c", str(config), *args) == \
            (0, "All of the log directories are already formatted.\n", "")
        message = (f"Log directory {tmp_path / 'server'} is already formatted. Use --ignore-formatted to ignore "
                   "this directory and format the others.")
        args = []
    assert grete(capsys, "format", "-t", CLUSTER, "-c", str(config), *args) == (1, "", message + "\n")


def test_bad_command_line_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = grete(capsys, "format", "-c", "x.properties")
    assert code == 1 and err.endswith("error: the following arguments are required: --cluster-id/-t\n")


def test_random_uuid(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = grete(capsys, "random-uuid")
    assert code == 0 and len(out.strip()) == 22 and not out.startswith("-")


def test_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = server_properties(tmp_path, log_dirs=f"{tmp_path / 'a'},{tmp_path / 'b'}")
    assert grete(capsys, "info", "-c", str(config)) == \
        (1, f"Found problems:\n  {tmp_path / 'a'} does not exist\n  {tmp_path / 'b'} does not exist\n\n", "")
    assert grete(capsys, "format", "-t", CLUSTER, "-c", str(config))[0] == 0
    meta = load_properties((tmp_path / "a" / "meta.properties").read_text())
    found = (f"Found log directories:\n  {tmp_path / 'a'}\n  {tmp_path / 'b'}\n\nFound metadata: {{cluster.id={CLUSTER}, "
             f"directory.id={meta['directory.id']}, node.id=1, version=1}}\n\n")
    assert grete(capsys, "info", "-c", str(config)) == (0, found, "")
    (tmp_path / "b" / "meta.properties").write_text("version=0\nbroker.id=1\ncluster.id=other\n")
    code, out, _ = grete(capsys, "info", "-c", str(config))
    assert (code, out.split("\n\n")[-2]) == (1, "Found problem:\n  Mismatched cluster IDs between storage directories.")
    (tmp_path / "b" / "meta.properties").write_text("version=1\nnode.id=1\n")
    code, out, _ = grete(capsys, "info", "-c", str(config))
    assert code == 1 and out.endswith(f"Found problem:\n  Error loading {tmp_path / 'b' / 'meta.properties'}: "
                                      "cluster.id was not found.\n\n")


def test_info_on_a_legacy_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = server_properties(tmp_path)
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "meta.properties").write_text(f"#\nversion=0\nbroker.id=1\ncluster.id={CLUSTER}\n")
    assert grete(capsys, "info", "-c", str(config)) == (1, (
        f"Found log directory:\n  {tmp_path / 'server'}\n\nFound metadata: {{broker.id=1, cluster.id={CLUSTER}, "
        "version=0}\n\nFound problem:\n  The kafka configuration file appears to be for a cluster in KRaft mode, "
        "but the directories are formatted for legacy mode.\n\n"), "")


# --- against Kafka 4.3.1 ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kafka() -> None:
    need_kafka()


def kafka_storage(*args: str) -> tuple[int, str, str]:
    done = kafka_dist.run_tool("4", "kafka-storage", *args)
    return done.returncode, done.stdout, done.stderr


def test_same_files_as_kafka_storage(kafka: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scram = "SCRAM-SHA-256=[name=admin,password=secret]"
    for side in ("kafka", "grete"):
        (tmp_path / side).mkdir()
        server_properties(tmp_path / side, "static")
        server_properties(tmp_path / side, "dynamic", voters=False)
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(kafka_storage, "format", "-t", CLUSTER, "-c", str(tmp_path / "kafka" / "static.properties")),
                pool.submit(kafka_storage, "format", "-t", CLUSTER, "-c", str(tmp_path / "kafka" / "dynamic.properties"),
                            "--standalone", "--add-scram", scram)]
        kafka_out = [run.result() for run in runs]
    grete_out = [grete(capsys, "format", "-t", CLUSTER, "-c", str(tmp_path / "grete" / "static.properties")),
                 grete(capsys, "format", "-t", CLUSTER, "-c", str(tmp_path / "grete" / "dynamic.properties"),
                       "--standalone", "--add-scram", scram)]
    for (k_code, k_out, _), (g_code, g_out, _) in zip(kafka_out, grete_out, strict=True):
        assert k_code == g_code == 0
        assert g_out.replace("/grete/", "/kafka/").splitlines()[1:] == k_out.splitlines()[1:]
    assert grete_out[0][1].splitlines()[0] == kafka_out[0][1].splitlines()[0]  # Bootstrap metadata: ...
    for name in ("static", "dynamic"):
        k_dir, g_dir = tmp_path / "kafka" / name, tmp_path / "grete" / name
        k_meta, g_meta = (load_properties((d / "meta.properties").read_text()) for d in (k_dir, g_dir))
        assert list(k_meta) == list(g_meta) and k_meta.keys() == {"version", "node.id", "cluster.id", "directory.id"}
        assert {k: v for k, v in k_meta.items() if k != "directory.id"} == \
            {k: v for k, v in g_meta.items() if k != "directory.id"}
        k_boot, g_boot = (read_checkpoint(d / "bootstrap.checkpoint") for d in (k_dir, g_dir))
        k_records, g_records = records_of(k_boot), records_of(g_boot)
        assert [type(r) for r in k_records] == [type(r) for r in g_records]
        assert [r for r in k_records if isinstance(r, FeatureLevelRecord)] == \
            [r for r in g_records if isinstance(r, FeatureLevelRecord)]
        for k_rec, g_rec in zip(k_records, g_records, strict=True):
            if isinstance(k_rec, UserScramCredentialRecord) and isinstance(g_rec, UserScramCredentialRecord):
                assert (k_rec.name, k_rec.mechanism, k_rec.iterations) == (g_rec.name, g_rec.mechanism, g_rec.iterations)
                # A random 130-bit number in base 36 (25 or 26 digits, as it falls).
                assert all(re.fullmatch(rb"[0-9a-z]{20,26}", r.salt) for r in (k_rec, g_rec))
                assert_verifies(k_rec, "secret")
                assert_verifies(g_rec, "secret")
        layout = [[(b.base_offset, b.last_offset_delta, b.attributes, b.partition_leader_epoch, b.producer_id,
                    b.producer_epoch, b.base_sequence, b.max_timestamp - b.base_timestamp) for b in c.batches]
                  for c in (k_boot, g_boot)]
        assert layout[0] == layout[1]
        if name == "static":
            assert [b.size for b in k_boot.batches] == [b.size for b in g_boot.batches]
    k_snap, g_snap = (read_checkpoint(tmp_path / side / "dynamic" / SNAPSHOT) for side in ("kafka", "grete"))
    k_voters, g_voters = k_snap.control[1], g_snap.control[1]
    assert isinstance(k_voters, VotersRecord) and isinstance(g_voters, VotersRecord)
    g_voters.voters[0].voter_directory_id = k_voters.voters[0].voter_directory_id
    assert (k_snap.control[0], k_voters) == (g_snap.control[0], g_voters)
    assert [(b.size, b.attributes, b.partition_leader_epoch) for b in k_snap.batches] == \
        [(b.size, b.attributes, b.partition_leader_epoch) for b in g_snap.batches]


def test_kafka_tools_read_grete_storage(kafka: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = server_properties(tmp_path, voters=False)
    assert grete(capsys, "format", "-t", CLUSTER, "-c", str(config), "--standalone")[0] == 0
    grete_info = grete(capsys, "info", "-c", str(config))
    files = f"{tmp_path / 'server' / 'bootstrap.checkpoint'},{tmp_path / 'server' / SNAPSHOT}"
    with ThreadPoolExecutor(2) as pool:
        info = pool.submit(kafka_storage, "info", "-c", str(config))
        dump = pool.submit(kafka_dist.run_tool, "4", "kafka-dump-log", "--cluster-metadata-decoder",
                           "--print-data-log", "--files", files)
        assert info.result() == grete_info
        done = dump.result()
    assert done.returncode == 0 and "Exception" not in done.stdout + done.stderr
    assert done.stdout.count("isvalid: true") == 5 and "KRaftVoters" in done.stdout


@pytest.mark.parametrize("props, args, message", [ERRORS[i] for i in (0, 1, 5, 10, 15)])
def test_kafka_storage_agrees_on_errors(kafka: None, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        props: dict[str, object], args: list[str], message: str | None) -> None:
    config = server_properties(tmp_path, **props)  # type: ignore[arg-type]
    if message is None:
        assert grete(capsys, "format", "-t", CLUSTER, "-c", str(config))[0] == 0
        args = []
    code, _, err = kafka_storage("format", "-t", CLUSTER, "-c", str(config), *args)
    g_code, _, g_err = grete(capsys, "format", "-t", CLUSTER, "-c", str(config), *args)
    first = err.splitlines()[0].split("Exception: ", 1)[-1]
    assert (code, first) == (g_code, g_err.strip()) == (1, message or g_err.strip())


class GreteFormatted(ReferenceKafka):
    """Kafka 4.3.1, combined node with a dynamic quorum of one, on storage `grete storage format
    --standalone --add-scram` wrote."""

    cluster_id = "q1Sh-9_ISia_zwGINzRvyQ"

    def properties(self) -> dict[str, str]:
        props = super().properties()
        del props["controller.quorum.voters"]
        props["controller.quorum.bootstrap.servers"] = f"{self.host}:{self.controller_port}"
        return props

    def _format(self, config: Path) -> None:
        code = cli.main(["storage", "format", "-t", self.cluster_id, "-c", str(config), "--standalone",
                         "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]"])
        assert code == 0


def test_kafka_starts_on_grete_formatted_storage(kafka: None) -> None:
    from confluent_kafka.admin import AdminClient

    with GreteFormatted("4", start_timeout=40, security=Security(authorizer=False)) as node:
        md = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(timeout=10)
        assert md.cluster_id == GreteFormatted.cluster_id and list(md.brokers) == [1]
        # The SCRAM credential from bootstrap.checkpoint logs in.
        scram = AdminClient({"bootstrap.servers": node.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "admin",
                             "sasl.password": "admin-secret"})
        assert scram.list_topics(timeout=10).cluster_id == GreteFormatted.cluster_id
        assert node.startup_seconds is not None and node.startup_seconds < 40
