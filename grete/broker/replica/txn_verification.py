"""KIP-890 part 1 across brokers: what a partition leader needs to check a transactional batch with a
transaction coordinator on another broker (Kafka's AddPartitionsToTxnManager, as the produce path
and TxnOffsetCommit see it).

The leader asks the coordinator (AddPartitionsToTxn v4, ``VerifyOnly``) only for a producer's first
transactional batch on a partition; meanwhile the produce is parked on a future, and the partition
holds a verification guard for the producer (``Partition.start_verification``). A marker or another
transactional batch of the producer clears the guard, so a batch verified before an abort landed is
refused at its append instead of opening a transaction no coordinator knows (a hanging transaction).
"""

from __future__ import annotations

from typing import Protocol

from grete.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]

# Produce v11+ knows TRANSACTION_ABORTABLE (Kafka's genericErrorSupported); v12+ adds the partition
# to the transaction instead of only verifying it (KIP-890 part 2's addPartition operation).
ABORTABLE_PRODUCE_VERSION = 11
ADD_PARTITION_PRODUCE_VERSION = 12

# Coordinator errors a client may not retry correctly: Kafka's ReplicaManager answers them as
# NOT_ENOUGH_REPLICAS, retriable and not triggering a metadata refresh.
_RETRIABLE = frozenset({ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                        ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})


class TxnVerifier(Protocol):
    """Sends AddPartitionsToTxn to transaction coordinators on other brokers, batched per broker."""

    async def verify(self, coordinator: int, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition], *, add: bool) -> dict[TopicPartition, ErrorCode]:
        """The partitions the coordinator on broker ``coordinator`` did not confirm, with its (or the
        channel's) error; ``add``: add them to the transaction (KIP-890 part 2) instead of checking."""
        ...

    def close(self) -> None: ...


def produce_error(error: ErrorCode, produce_version: int) -> tuple[ErrorCode, str | None]:
    """What a producer sees when verification fails (Kafka 3.9's AddPartitionsToTxnManager and
    ReplicaManager mappings, in that order), with Kafka's message where it sets one."""
    if error is ErrorCode.PRODUCER_FENCED:
        error = ErrorCode.INVALID_PRODUCER_EPOCH  # producers expect this one here
    elif error is ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        error = ErrorCode.INVALID_TXN_STATE  # never shown to a client: the verification did not complete
    elif error is ErrorCode.TRANSACTION_ABORTABLE and produce_version < ABORTABLE_PRODUCE_VERSION:
        error = ErrorCode.INVALID_TXN_STATE
    if error is ErrorCode.INVALID_TXN_STATE:
        return error, "Partition was not added to the transaction"
    if error in _RETRIABLE or (error is ErrorCode.CONCURRENT_TRANSACTIONS
                               and produce_version < ADD_PARTITION_PRODUCE_VERSION):
        return ErrorCode.NOT_ENOUGH_REPLICAS, ("Unable to verify the partition has been added to the "
                                               f"transaction. Underlying error: {error.name}")
    return error, None
