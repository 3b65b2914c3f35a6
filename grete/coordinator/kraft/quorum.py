"""KRaft's Raft for a quorum of one voter (this node): the metadata log and its ``quorum-state``.

With one voter, an election is a formality Kafka goes through all the same, and so does this
module, so the files match what Kafka 4.3.1 leaves behind: at every start the node votes for itself
in a new epoch, records that in ``quorum-state``, becomes leader and appends a LeaderChangeMessage
control batch. A record is committed once the only voter has it on disk, so an append is fsynced
before it counts and the high watermark follows the log end.

The log is ``<metadata.log.dir>/__cluster_metadata-0`` in Kafka's ordinary segment format (the
storage layer's Log, as any partition); batches hold framed metadata records (metadata_frame) with
no keys, stamped with the epoch as their partition leader epoch.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.metadata import LeaderChangeMessage
from grete.protocol.metadata_frame import CONTROL_VALUE_VERSION, decode_metadata_record, encode_control_value
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.control import ControlType, encode_control_key
from grete.protocol.records.record import Record, build_batch, decode_records
from grete.protocol.topics import METADATA_TOPIC
from grete.storage.checkpoint_file import (
    CHECKPOINT_SUFFIX,
    CheckpointError,
    parse_snapshot_file_name,
    read_checkpoint,
    write_snapshot,
)
from grete.storage.config import LogConfig
from grete.storage.files import atomic_write, uuid_to_kafka
from grete.storage.log import Log

QUORUM_STATE_FILE = "quorum-state"
# metadata.log.max.record.bytes.between.snapshots: Kafka's default.
SNAPSHOT_BYTES = 20 * 1024 * 1024
QUORUM_STATE_VERSION = 1  # QuorumStateData v1 (KIP-853): VotedDirectoryId, no voters list
METADATA_PARTITION_DIR = f"{METADATA_TOPIC}-0"


@dataclass(frozen=True, slots=True)
class QuorumState:
    """The ``quorum-state`` file (QuorumStateData JSON), read back at start."""

    leader_id: int = -1
    leader_epoch: int = -1
    voted_id: int = -1
    voted_directory_id: uuid.UUID | None = None


def read_quorum_state(path: Path) -> QuorumState:
    if not path.exists():
        return QuorumState()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return QuorumState(int(data.get("leaderId", -1)), int(data.get("leaderEpoch", -1)),
                           int(data.get("votedId", -1)))
    except (ValueError, TypeError, AttributeError) as exc:
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{path}: not a quorum-state file: {exc}") from None


def write_quorum_state(path: Path, state: QuorumState) -> None:
    """Written as Kafka's FileQuorumStateStore writes it: the JSON of QuorumStateData plus its version."""
    data: dict[str, object] = {"leaderId": state.leader_id, "leaderEpoch": state.leader_epoch,
                               "votedId": state.voted_id}
    if state.voted_directory_id is not None:
        data["votedDirectoryId"] = uuid_to_kafka(state.voted_directory_id)
    data["data_version"] = QUORUM_STATE_VERSION
    atomic_write(path, json.dumps(data, separators=(",", ":")).encode("utf-8"))


@dataclass(frozen=True, slots=True)
class AppendedRecords:
    """Where a batch of metadata records landed: its first and last offsets."""

    first_offset: int
    last_offset: int


class SingleVoterQuorum:
    """The metadata log of a quorum whose only voter is this node (``controller.quorum.voters`` of
    one, or a standalone dynamic quorum)."""

    def __init__(self, metadata_dir: Path, node_id: int, directory_id: uuid.UUID,
                 config: LogConfig | None = None, snapshot_bytes: int = SNAPSHOT_BYTES) -> None:
        self.node_id = node_id
        self.directory_id = directory_id
        self.partition_dir = metadata_dir / METADATA_PARTITION_DIR
        # Segments a snapshot covers are deleted at once: nothing reads them (no follower, no observer).
        self.log = Log.open(self.partition_dir, config or LogConfig(file_delete_delay_ms=0))
        self.snapshot_bytes = snapshot_bytes
        self.bytes_since_snapshot = 0
        self.epoch = max(read_quorum_state(self.partition_dir / QUORUM_STATE_FILE).leader_epoch,
                         self.log.epochs.latest_epoch, 0)
        self.leader_id = -1
        self.last_fetch_ms = -1

    # --- reading back ---------------------------------------------------------------------------
    def latest_snapshot(self) -> tuple[Path, int] | None:
        """The newest ``<end offset>-<epoch>.checkpoint`` and its end offset."""
        found = [(ids[0], path) for path in self.partition_dir.glob(f"*{CHECKPOINT_SUFFIX}")
                 if (ids := parse_snapshot_file_name(path.name)) is not None]
        if not found:
            return None
        end, path = max(found)
        return path, end

    def replay(self) -> Iterator[tuple[int, Message, int]]:
        """(offset, record, version) of the state: the newest snapshot's records (at the offset
        before its end: the last one it contains), then
        every metadata record of the log after it, in order; control batches (leader changes) are
        the quorum's own and are skipped."""
        start = self.log.log_start_offset
        snapshot = self.latest_snapshot()
        if snapshot is not None:
            path, start = snapshot
            try:
                values = read_checkpoint(path).values
            except CheckpointError as exc:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
            for value in values:
                message, version = decode_metadata_record(value)
                yield start - 1, message, version
            if self.log.log_end_offset < start:  # the log was lost or cut behind the snapshot
                self.log.truncate_fully_and_start_at(start)
        elif start > 0:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{self.partition_dir}: the log starts at offset "
                                                        f"{start} and no snapshot holds what came before")
        for batch in self.log.batches(start):
            if batch.is_control:
                continue
            for record in decode_records(batch):
                if batch.base_offset + record.offset_delta < start:
                    continue
                if record.value is None:
                    raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                     f"{self.partition_dir}: a metadata record without a value at offset "
                                     f"{batch.base_offset + record.offset_delta}")
                message, version = decode_metadata_record(record.value)
                yield batch.base_offset + record.offset_delta, message, version

    # --- the election of one ------------------------------------------------------------------------
    def elect(self) -> None:
        """Vote for ourselves in a new epoch, then lead it: two quorum-state writes and a
        LeaderChangeMessage, as a lone Kafka voter does at start."""
        state_path = self.partition_dir / QUORUM_STATE_FILE
        self.epoch += 1
        write_quorum_state(state_path, QuorumState(-1, self.epoch, self.node_id, self.directory_id))
        write_quorum_state(state_path, QuorumState(self.node_id, self.epoch, -1))
        self.leader_id = self.node_id
        voter = LeaderChangeMessage.Voter(voter_id=self.node_id)
        # Written at version 0, as Kafka 4.3.1 writes every control value (ControlRecordUtils).
        message = LeaderChangeMessage(version=CONTROL_VALUE_VERSION, leader_id=self.node_id,
                                      voters=[voter], granting_voters=[voter])
        value = encode_control_value(message)
        key = encode_control_key(ControlType.LEADER_CHANGE)
        now = int(time.time() * 1000)
        self._append(build_batch([Record(0, 0, key, value)], base_timestamp=now, control=True), now)

    # --- appending --------------------------------------------------------------------------------
    def append(self, values: Sequence[bytes]) -> AppendedRecords:
        """Append framed metadata records as one batch; committed (on disk) when this returns."""
        if self.leader_id != self.node_id:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node does not lead the metadata quorum")
        now = int(time.time() * 1000)
        records = [Record(i, 0, None, value) for i, value in enumerate(values)]
        batch = build_batch(records, base_timestamp=now)
        self.bytes_since_snapshot += len(batch)
        return self._append(batch, now)

    @property
    def snapshot_due(self) -> bool:
        return self.bytes_since_snapshot >= self.snapshot_bytes

    def snapshot(self, values: Sequence[bytes]) -> Path:
        """Write the state (``values``, the records that rebuild it) as a snapshot at the log end,
        then drop what it covers: older snapshots and the segments before it (Kafka's
        KafkaMetadataLog cleaning, with nothing left to serve them to)."""
        end = self.log.log_end_offset
        now = int(time.time() * 1000)
        path = write_snapshot(self.partition_dir, end, self.epoch, values, last_contained_log_timestamp=now)
        for older in self.partition_dir.glob(f"*{CHECKPOINT_SUFFIX}"):
            if older != path and parse_snapshot_file_name(older.name) is not None:
                older.unlink()
        self.log.roll(now)
        self.log.delete_records_before(end)
        self.log.run_pending_deletes(now, force=True)
        self.bytes_since_snapshot = 0
        return path

    def _append(self, raw: bytearray, now_ms: int) -> AppendedRecords:
        batch = RecordBatch(raw, 0)
        done = self.log.append(batch, leader_epoch=self.epoch, now_ms=now_ms)
        self.log.flush()
        self.log.high_watermark = self.log.log_end_offset
        return AppendedRecords(done.base_offset, done.last_offset)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def close(self) -> None:
        self.log.close()
