"""The direct data path's shared layouts (docs/direct.md): what broker and clients both read.

All words are little-endian int64/uint64 (the authors' ordering word is little-endian too, their
slots big-endian; one byte order for everything is simpler and native here).
"""

from __future__ import annotations

import struct

# --- API keys (specs/grete/*.json): far above Kafka's sequential keys ---------------------------
DIRECT_PRODUCE_ADDRESS = 32000
DIRECT_CONSUME_ADDRESS = 32001
DIRECT_API_KEYS = frozenset({DIRECT_PRODUCE_ADDRESS, DIRECT_CONSUME_ADDRESS})

# --- a produce region: one header page, then the data area ---------------------------------------
# The ordering word (paper Fig. 5): 16-bit producer order | 48-bit byte offset in the data area.
# A shared producer adds (1 << 48) + size with one fetch-and-add; the old value is its order and the
# start of its reservation.
HEADER_BYTES = 4096
ORDER_WORD = 0          # uint64, the ordering word
SEALED_WORD = 8         # uint64, non-zero once the broker has sealed the region (producers re-register)
ORDER_SHIFT = 48
OFFSET_MASK = (1 << ORDER_SHIFT) - 1
ORDER_MASK = 0xFFFF


def reservation_delta(size: int) -> int:
    return (1 << ORDER_SHIFT) + size


def split_word(word: int) -> tuple[int, int]:
    """(order, byte offset) of an ordering word's value."""
    return (word >> ORDER_SHIFT) & ORDER_MASK, word & OFFSET_MASK


# --- notifications (the immediate data of a WriteWithImm, with room for the region's key) ---------
# producer -> broker: key, region id, order, flags, offset in the data area, length
NOTIFY = struct.Struct("<QIHHQI4x")
# broker -> producer: region id, order, error code, base offset, log append time
ACK = struct.Struct("<IHxxh6xqq")
# broker -> client, first frame on a new connection: the session id
HELLO = struct.Struct("<q24x")
FRAME = 32
assert NOTIFY.size == ACK.size == HELLO.size == FRAME
FLAG_SKIP = 1  # an overflowing reservation: nothing written, the order is only used up

# --- a consumer's slot region (paper Fig. 9), one slot per segment file it reads -----------------
# seq (sequence lock: odd while the broker writes), then the fields below
SLOT_FIELDS = ("base_offset", "written", "hw_position", "lso_position", "hw_offset", "lso_offset",
               "log_start_offset", "flags")
SLOT_BYTES = 8 * (1 + len(SLOT_FIELDS))  # 72
SLOT = struct.Struct("<q" + "q" * len(SLOT_FIELDS))
FREE = -1  # base_offset of a slot not in use
SEALED = 1     # the file takes no more appends: read to ``written``, then ask for the next one
DELETED = 2    # the file was deleted (retention, DeleteRecords): its bytes must not be trusted
REVOKED = 4    # the broker stopped serving the partition here (deleted topic, lost leadership)
