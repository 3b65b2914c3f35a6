"""Replication push over the direct path (docs/direct.md): leaders write followers' logs.
This module holds what both sides read (frames, the slot header); push.py is the leader's side,
receive.py the follower's.

A follower with ``direct.replication.enable`` creates one **receive region** per leader it follows
(``direct.replication.credits`` slots of ``direct.replication.slot.bytes``) and registers it with
the leader (DirectReplicaRegister, API 32002, on the fetcher's own connection) for partitions whose
last fetch came back clean (no error, no diverging epoch); each slot is one credit. The leader
(push.py), whenever a partition changes (an append, a high-watermark move), pushes what the
follower lacks from the follower's log end: the log's own bytes, as many whole batches as fit a
slot, after a small header (handle, leader epoch, base offset, high watermark, log start). Small
writes are batched: all appends of one loop step go in one push, and while ``MAX_IN_FLIGHT`` pushes
of a partition are unanswered, appends wait and go together in the next. The write is one-sided
into the follower's region, then a 32-byte notification (the write-with-immediate) names the slot.

The follower (receive.py) copies the slot out, appends it as the fetcher does (``Partition.follower_append``:
offsets, epochs and producer state kept, high watermark from the leader), and returns the credit
with its log end offset. The leader feeds that to ``Partition.update_follower`` exactly as a fetch
offset: ISR expansion and shrinking (``replica.lag.time.max.ms``) and the high watermark follow the
same rules as with fetching.

**Fallback rule.** Fetch stays the source of truth for anything but the straight line: a push whose
base offset is not the follower's log end (a gap), a leader epoch other than the registered one, a
failed append, a batch larger than a slot, a lost channel, a leadership change (LeaderAndIsr) end
pushing for the partition; the follower fetches it again (truncating through diverging epochs as
always) and registers it anew after its next clean fetch.
"""

from __future__ import annotations

import struct

from grete.direct.layout import FRAME

REGISTER_VERSION = 0
PartitionKey = tuple[str, int]

# leader -> follower, the immediate: region key, slot
PUSH = struct.Struct("<QI20x")
# follower -> leader, a credit back: slot, handle, the follower's log end offset, flags
CREDIT = struct.Struct("<IiqI12x")
assert PUSH.size == CREDIT.size == FRAME
# at the start of a slot: handle, leader epoch, base offset, high watermark, log start, length, flags
HEADER = struct.Struct("<iiqqqiI")
HEADER_BYTES = 64
FALLBACK = 1   # header flag: the leader stops pushing this partition (the follower fetches it)
STOP = 1       # credit flag: the follower no longer takes pushes for this handle
