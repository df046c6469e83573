"""The ``.index.json`` beside each Block-GZIP file: one entry (*chunk*) per gzip member, with the
original connector's keys in its order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from pubsub_connect.model.blockgzip.lines import BlockGzipError

# --------------------------------------------------------------------------------------------
# Index
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    """One block of a file, as recorded in the index (field names are the original's)."""

    byte_length_uncompressed: int
    num_records: int
    byte_length: int
    byte_offset: int
    first_record_offset: int

    @property
    def end_offset(self) -> int:
        """The Kafka offset just after this block's last record."""
        return self.first_record_offset + self.num_records

    @property
    def byte_end(self) -> int:
        return self.byte_offset + self.byte_length

    def contains(self, offset: int) -> bool:
        return self.first_record_offset <= offset < self.end_offset

    def to_json(self) -> dict[str, int]:
        # Insertion order = the original's key order.
        return {
            "byte_length_uncompressed": self.byte_length_uncompressed,
            "num_records": self.num_records,
            "byte_length": self.byte_length,
            "byte_offset": self.byte_offset,
            "first_record_offset": self.first_record_offset,
        }


_CHUNK_KEYS = ("byte_length_uncompressed", "num_records", "byte_length", "byte_offset", "first_record_offset")


def render_index(chunks: Sequence[Chunk]) -> bytes:
    """The ``.index.json`` bytes: compact JSON with the original's keys in the original's order."""
    return json.dumps({"chunks": [c.to_json() for c in chunks]}, separators=(",", ":")).encode("ascii")


def parse_index(data: bytes | str) -> list[Chunk]:
    """Parse an index (ours or the original connector's) and check it describes contiguous bytes."""
    try:
        doc = json.loads(data)
        raw_chunks = doc["chunks"]
        chunks = [Chunk(**{k: int(raw[k]) for k in _CHUNK_KEYS}) for raw in raw_chunks]
    except (ValueError, KeyError, TypeError) as exc:
        raise BlockGzipError(f"not a Block-GZIP index: {exc}") from None
    position = 0
    for chunk in chunks:
        if chunk.byte_offset != position or chunk.byte_length <= 0 or chunk.num_records < 0:
            raise BlockGzipError(f"index chunks are not contiguous at byte {position}: {chunk.to_json()}")
        position = chunk.byte_end
    return chunks


def find_chunk(chunks: Sequence[Chunk], offset: int) -> int | None:
    """Position in ``chunks`` of the block holding Kafka ``offset`` (None when not in the file)."""
    lo, hi = 0, len(chunks)
    while lo < hi:  # chunks are in offset order: binary search on first_record_offset
        mid = (lo + hi) // 2
        if chunks[mid].first_record_offset <= offset:
            lo = mid + 1
        else:
            hi = mid
    position = lo - 1
    if position >= 0 and chunks[position].contains(offset):
        return position
    return None
