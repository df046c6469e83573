"""File rotation: where an archive file ends (Confluent S3 sink semantics, on record data only),
planned without compressing and resumable in another process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pubsub_connect.model.blockgzip.blocks import DEFAULT_BLOCK_SIZE, BlockSizer, BlockState

# --------------------------------------------------------------------------------------------
# File rotation (Confluent S3 sink semantics, on record data only)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RotationPolicy:
    """When a file closes. Every rule looks at record data only (offsets, counts, record
    timestamps), never at the wall clock, so a re-run over the same records cuts the same files.
    (The one wall-clock rule, ``offset.flush.interval.ms`` in continuous runs, is the driver's:
    see ``ArchiveCoordinator`` in the archive pipeline.)

    - ``chunks_per_file``: the file closes as soon as it holds this many closed blocks;
    - ``flush_size`` (0 = off): the file closes once it holds this many records;
    - ``rotate_interval_ms`` (0 = off): a record whose timestamp is at least this far past the
      file's first record timestamp starts a new file (like Confluent's ``rotate.interval.ms``
      with record timestamps; a timestamp going backwards never rotates).
    """

    block_size: int = DEFAULT_BLOCK_SIZE
    chunks_per_file: int = 16
    flush_size: int = 0
    rotate_interval_ms: int = 0

    def rotate_before(self, file_first_timestamp_ms: int, timestamp_ms: int) -> bool:
        """True when a record with ``timestamp_ms`` must go to a new file."""
        interval = self.rotate_interval_ms
        return bool(interval) and timestamp_ms - file_first_timestamp_ms >= interval

    def full(self, num_records: int, num_chunks: int) -> bool:
        """True when a file with that many records and closed blocks must close now."""
        by_count = bool(self.flush_size) and num_records >= self.flush_size
        return by_count or num_chunks >= self.chunks_per_file


@dataclass(frozen=True)
class OpenFile:
    """A file that holds records but that no rotation rule has closed yet: its first record
    (which names it) and its block accounting. Small enough to travel between processes."""

    first_offset: int
    first_timestamp_ms: int
    blocks: BlockState

    @property
    def num_records(self) -> int:
        return self.blocks.num_records

    @property
    def next_offset(self) -> int:
        """Offset after the file's last record so far."""
        return self.blocks.next_offset

    def to_json(self) -> dict[str, Any]:
        return {"first_offset": self.first_offset, "first_timestamp_ms": self.first_timestamp_ms,
                "blocks": self.blocks.to_json()}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> OpenFile:
        return cls(int(doc["first_offset"]), int(doc["first_timestamp_ms"]), BlockState.from_json(doc["blocks"]))


@dataclass(frozen=True)
class FileCut:
    """A file closed by a rotation rule: what it holds, and where it ends in the records fed.

    ``stop`` is the position, in the records of the :meth:`FilePlanner.feed` call that closed
    it, just after the file's last record: 0 when the file ends with records fed earlier (a
    ``rotate.interval.ms`` cut before the first new record).
    """

    first_offset: int
    first_timestamp_ms: int
    end_offset: int
    num_records: int
    num_chunks: int
    stop: int


class FilePlanner:
    """Cuts one partition's records into files by the :class:`RotationPolicy`, without compressing.

    Why plan first: the archive compresses a file only once it knows the file is complete, so
    a file spanning several micro-batches is compressed once, in the batch that completes it,
    instead of being compressed again every batch. The planner keeps only an :class:`OpenFile`
    between calls, so planning can resume in another process.

    Records must come in increasing offsets; ``flush.size`` and ``chunks.per.file`` close the
    file after a record, ``rotate.interval.ms`` before the first record that is too far (in
    record time) from the file's first record.
    """

    def __init__(self, policy: RotationPolicy, open_file: OpenFile | None = None):
        self.policy = policy
        self._first: tuple[int, int] | None = None
        self._sizer: BlockSizer | None = None
        if open_file is not None:
            self._first = (open_file.first_offset, open_file.first_timestamp_ms)
            self._sizer = BlockSizer(policy.block_size, open_file.blocks)

    @property
    def open_file(self) -> OpenFile | None:
        if self._sizer is None or self._first is None:
            return None
        return OpenFile(self._first[0], self._first[1], self._sizer.state)

    def feed(self, offsets: Sequence[int], timestamps: Sequence[int],
             values: Sequence[bytes | None]) -> list[FileCut]:
        """Plan more records; returns the files they complete, in order."""
        policy = self.policy
        cuts: list[FileCut] = []
        n = len(offsets)
        i = 0
        while i < n:
            if self._sizer is None or self._first is None:
                self._sizer = BlockSizer(policy.block_size)
                self._first = (offsets[i], timestamps[i])
            sizer = self._sizer
            limit = n
            if policy.flush_size:
                limit = min(limit, i + policy.flush_size - sizer.num_records)
            rotate_at = None
            if policy.rotate_interval_ms:
                too_late = self._first[1] + policy.rotate_interval_ms
                rotate_at = next((k for k in range(i, limit) if timestamps[k] >= too_late), None)
                if rotate_at is not None:
                    limit = rotate_at
            if limit > i:
                i += sizer.extend(offsets[i:limit], values[i:limit], max_chunks=policy.chunks_per_file,
                                  assume_sorted=True)
            if i == rotate_at or policy.full(sizer.num_records, sizer.num_chunks):
                cuts.append(self._close(i))
        return cuts

    def close(self) -> FileCut | None:
        """End of input: the open file as it is (None when there is none)."""
        if self._sizer is None:
            return None
        return self._close(0)

    def _close(self, stop: int) -> FileCut:
        assert self._sizer is not None and self._first is not None
        blocks = self._sizer.finish()
        cut = FileCut(self._first[0], self._first[1], blocks.next_offset, blocks.num_records, blocks.num_chunks, stop)
        self._sizer = None
        self._first = None
        return cut
