"""An empty Fetch asked again with its partitions in another order.

librdkafka rotates the partitions of each Fetch by one (each gets its turn first, where KIP-74's "at
least one batch" applies), so an idle consumer's requests ask the same thing yet are never
byte-identical, and the per-connection memo of an empty answer (connection.py) would never hit.
:func:`layout` reads a Fetch frame's shape without decoding it: the bytes before its topics, each
partition's entry (fixed-size apart from tagged fields; a frame with any tagged field on a topic or
partition has no layout here) under the bytes naming its topic, and the bytes after. Two frames ask
the same thing when the bytes around the topics are equal and they hold the same entries; the
answer to the second lists the same partitions' data in its order (Kafka answers in request order),
built from the first answer's with one encode and no read.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from grete.protocol.codec import Reader, Writer
from grete.protocol.errors import ProtocolError
from grete.protocol.headers import decode_request_header, encode_response_header
from grete.protocol.messages import ApiKey, FetchResponse, response_header_version

TOPIC_IDS_VERSION = 13
REPLICA_STATE_VERSION = 15  # the replica id moves from the body's start to a tagged field

# (bytes naming the topic, the partition's entry) in frame order.
Entry = tuple[bytes, bytes]


@dataclasses.dataclass(frozen=True, slots=True)
class Layout:
    before: bytes          # after the correlation id, up to the topics array
    entries: list[Entry]
    after: bytes           # forgotten topics, rack, tagged fields
    asked: list[Entry]     # the entries in a canonical order: what the fetch asks, whatever its order

    def same_fetch(self, other: Layout) -> bool:
        return self.before == other.before and self.after == other.after and self.asked == other.asked


def layout(frame: bytes, version: int) -> Layout | None:
    """The shape of a Fetch frame (size prefix stripped); None if it has none this module reads."""
    try:
        _, body = decode_request_header(frame)
        topics = body + _top_size(version)
        r = Reader(frame, topics)
        flex = version >= 12
        size = _entry_size(version)
        entries: list[Entry] = []
        for _ in range(r.array_length(flex)):
            start = r.pos
            if version >= TOPIC_IDS_VERSION:
                r.uuid()
            else:
                r.string(flex)
            topic = frame[start:r.pos]
            for _ in range(r.array_length(flex)):
                entry = frame[r.pos:r.pos + size]
                r.pos += size
                if len(entry) != size or (flex and entry[-1] != 0):
                    return None
                entries.append((topic, entry))
            if flex and r.int8() != 0:
                return None
    except ProtocolError:
        return None
    return Layout(frame[8:topics], entries, frame[r.pos:], sorted(entries))


def _top_size(version: int) -> int:
    """The fields before the topics: [replica id], max wait, min bytes, max bytes, isolation level,
    [session id, session epoch]."""
    return (4 if version < REPLICA_STATE_VERSION else 0) + 13 + (8 if version >= 7 else 0)


def _entry_size(version: int) -> int:
    """A partition's entry: index, [leader epoch], fetch offset, [last fetched epoch], [log start],
    max bytes, [an empty tagged-field section]."""
    return (4 + (4 if version >= 9 else 0) + 8 + (4 if version >= 12 else 0) + (8 if version >= 5 else 0) + 4
            + (1 if version >= 12 else 0))


def reordered_body(response: FetchResponse, version: int, first: Layout, repeat: Layout) -> bytes:
    """The answer to ``repeat`` (which asks what ``first`` asked) from ``response``, the answer to
    ``first``: its bytes from the response header's tagged fields on, as the memo keeps them."""
    by_entry: dict[tuple[bytes, int], Any] = {}
    topics: dict[bytes, FetchResponse.FetchableTopicResponse] = {}
    entries = iter(first.entries)
    for answered in response.responses:
        for data in answered.partitions:
            topic, entry = next(entries)
            topics[topic] = answered
            by_entry[topic, _index(entry)] = data
    grouped: list[FetchResponse.FetchableTopicResponse] = []
    last = b""
    for topic, entry in repeat.entries:
        if not grouped or topic != last:
            answered = topics[topic]
            grouped.append(FetchResponse.FetchableTopicResponse(topic=answered.topic, topic_id=answered.topic_id,
                                                                partitions=[]))
            last = topic
        grouped[-1].partitions.append(by_entry[topic, _index(entry)])
    w = Writer()
    encode_response_header(w, 0, response_header_version(ApiKey.FETCH, version))
    dataclasses.replace(response, responses=grouped).encode(w, version)
    return w.getvalue()[4:]


def _index(entry: bytes) -> int:
    return int.from_bytes(entry[:4], "big", signed=True)
