"""Topic names as Kafka defines them: the internal topics and the rules of a legal name.

These are wire-level facts (Kafka's ``Topic`` class lives beside its protocol code), so every layer
may use them: storage names partition directories after them, the coordinators own the internal
topics, the broker validates names in CreateTopics and friends.
"""

from __future__ import annotations

import re

from grete.protocol.errors import ErrorCode, KafkaError

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_GROUP_STATE_TOPIC = "__share_group_state"
# KRaft's metadata log: one partition, owned by the quorum, never a topic clients see or the log
# manager opens.
METADATA_TOPIC = "__cluster_metadata"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC})
MAX_TOPIC_NAME = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate: INVALID_TOPIC_EXCEPTION with Kafka's wording."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters")
    if not _LEGAL_TOPIC.match(name):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name \"{name}\" is illegal, it contains a character other than "
                         "ASCII alphanumerics, '.', '_' and '-'")
