"""Ids grete hands out (topic ids, the cluster id, the reference Kafka's cluster id) are ones Kafka would."""

from __future__ import annotations

import uuid

from grete.coordinator.metadata import new_topic_id
from grete.storage.files import uuid_from_kafka, uuid_to_kafka


def test_new_ids_are_never_zero_and_never_look_like_an_option():
    # One random id in 64 starts with "-" in Kafka's base64 form; Kafka's Uuid.randomUuid() skips
    # those because its tools would read "-t <id>" as an option (kafka-storage format did).
    ids = [new_topic_id() for _ in range(5000)]
    texts = [uuid_to_kafka(i) for i in ids]
    assert not [t for t in texts if t.startswith("-")]
    assert uuid.UUID(int=0) not in ids
    assert all(len(t) == 22 and uuid_from_kafka(t) == i for t, i in zip(texts, ids, strict=True))
    assert len(set(ids)) == len(ids)
