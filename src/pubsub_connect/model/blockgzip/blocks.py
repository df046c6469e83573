"""Blocks: where they close (the original's rule on text lengths and consecutive offsets), how each
is written as one gzip member byte-identical to Java's ``GZIPOutputStream``, and how they are
read back. One concern, the block, from both directions: the writer and the reader share the
member layout.
"""

from __future__ import annotations

import struct
import zlib
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, BinaryIO

from pubsub_connect.model.blockgzip.index import Chunk
from pubsub_connect.model.blockgzip.lines import (
    CR,
    LF,
    NULL_LINE,
    RS,
    BlockGzipError,
    decode_line,
    encode_value,
    split_lines,
)

#: Block size when none is given: 64 MiB of uncompressed records, the archive connector's default
#: ``compressed_block_size`` (``config/keys.py``).
DEFAULT_BLOCK_SIZE = 67_108_864
#: zlib level: the original connector uses Java's default deflater level, which is 6.
DEFAULT_LEVEL = 6
#: ``wbits`` for zlib's gzip wrapper (header + CRC32 + ISIZE trailer) with a 32 KiB window.
_GZIP_WBITS = 16 + zlib.MAX_WBITS
#: Feed the compressor in pieces of about this size: large enough that per-call overhead
#: vanishes, small enough that a block's pending lines never hold much memory.
_FEED_BYTES = 1 << 20

# --------------------------------------------------------------------------------------------
# Writer
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockState:
    """Where a file's blocks stand after some records, without their bytes.

    Why: a file can span micro-batches while its records are cut into blocks in different
    processes. These few numbers are all a :class:`BlockSizer` needs to go on cutting exactly
    where a writer that had seen every record would (the compressed bytes are not needed to
    decide a cut: blocks close on text lengths and offsets only). ``block_length`` is the open
    block's length as the original counts it (see :func:`text_lengths`).
    """

    num_records: int = 0
    num_chunks: int = 0
    block_length: int = 0
    block_records: int = 0
    block_first: int = -1
    next_offset: int = -1

    def to_json(self) -> dict[str, int]:
        return {"num_records": self.num_records, "num_chunks": self.num_chunks, "block_length": self.block_length,
                "block_records": self.block_records, "block_first": self.block_first,
                "next_offset": self.next_offset}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> BlockState:
        return cls(**{key: int(doc[key]) for key in cls().to_json()})


def _has_astral(text: str) -> bool:
    """Whether ``text`` has a character beyond U+FFFF (2 UTF-16 units). Encoding is ~15x faster
    than a regular expression scan here."""
    return len(text.encode("utf-16-le", "surrogatepass")) != 2 * len(text)


def text_lengths(blob: bytes) -> list[int]:
    """The length the original counts for each LF-terminated line of ``blob``: Java's
    ``String.length()`` of the line's text (UTF-16 code units), plus 1 for the LF.

    Why not bytes: the original measures ``record.value().toString().length()``, so a block
    holds ``compressed_block_size`` *characters* (an astral character counts 2) and its
    ``byte_length_uncompressed`` is that count. Bytes that are not UTF-8 count as the U+FFFD
    characters Java's decoder would make of them. For ASCII the length is the byte count; the
    callers take that shortcut themselves.
    """
    text = blob.decode("utf-8", "replace")  # LF is never part of a replaced sequence: lines stay aligned
    lines = text.split("\n")[:-1]
    if not _has_astral(text):
        return [len(line) + 1 for line in lines]
    return [(len(line.encode("utf-16-le")) >> 1) + 1 for line in lines]


class BlockCutter:
    """Where blocks close: the record accounting shared by :class:`BlockGzipWriter` (which
    compresses) and :class:`BlockSizer` (which only counts).

    The original's rule: before a record is written, if the open block's length plus the
    record's would exceed ``block_size``, the block closes and the record starts the next one.
    So a block never exceeds the size unless it holds a single record longer than the size on
    its own; and when the very first record of a file is such a record, the file starts with an
    empty block (a 20-byte gzip member indexed with ``num_records`` 0), exactly as the original
    writes it.

    Why one class for both: the archive decides where a *file* closes (``chunks.per.file``)
    before it compresses anything, and that decision must match the writer's block cuts byte
    for byte. Sharing the code, rather than re-deriving the rules, makes a mismatch impossible.
    Subclasses receive the bytes of the open block through :meth:`_emit` and close a gzip member
    in :meth:`_seal`.
    """

    __slots__ = ("_block_first", "_block_length", "_block_records", "_next_offset", "_num_chunks", "_pending",
                 "_pending_bytes", "block_size", "num_records")

    def __init__(self, block_size: int = DEFAULT_BLOCK_SIZE, state: BlockState | None = None):
        if block_size < 0:
            raise ValueError(f"block size must not be negative, got {block_size}")
        state = state or BlockState()
        self.block_size = block_size
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._num_chunks = state.num_chunks
        self._block_length = state.block_length
        self._block_records = state.block_records
        self._block_first = state.block_first
        self._next_offset = state.next_offset
        self.num_records = state.num_records

    @property
    def state(self) -> BlockState:
        """The accounting so far (see :class:`BlockState`)."""
        return BlockState(self.num_records, self._num_chunks, self._block_length, self._block_records,
                          self._block_first, self._next_offset)

    @property
    def num_chunks(self) -> int:
        """Closed blocks so far."""
        return self._num_chunks

    @property
    def next_offset(self) -> int:
        """Offset after the last appended record (-1 before the first)."""
        return self._next_offset

    @property
    def open_block_records(self) -> int:
        return self._block_records

    def _emit(self, data: bytes | memoryview) -> None:
        """Bytes of the open block, in order (lines with their LF)."""

    def _seal(self) -> Chunk:
        """The open block is complete: end its gzip member and describe it."""
        return Chunk(self._block_length, self._block_records, 0, 0, self._block_first)

    def _make_room(self, offset: int, length: int) -> None:
        """Before a record of ``length`` at ``offset``: close the open block if the record would
        take it past the size; the file's first record, when too long, leaves an empty block."""
        if self._block_length + length <= self.block_size:
            return
        if self._block_records:
            self.close_block()
        elif self._starts_file():
            self._block_first = offset
            self._seal_block()

    def _starts_file(self) -> bool:
        """No record and no block yet: the original's writer is still in its first block."""
        return self.num_records == 0 and self._num_chunks == 0

    def append(self, offset: int, value: bytes | None) -> None:
        """Add one record. Offsets must increase; a gap closes the open block first."""
        if offset != self._next_offset:
            if offset < self._next_offset:
                raise BlockGzipError(f"offset {offset} after {self._next_offset - 1}: offsets must increase")
            if self._block_records:
                self.close_block()
        if value is None:
            line = NULL_LINE
        elif LF in value or CR in value or value[:1] == RS:
            line = encode_value(value)
        else:
            line = value
        length = len(line) + 1 if line.isascii() else text_lengths(line + LF)[0]
        self._make_room(offset, length)
        if not self._block_records:
            self._block_first = offset
        self._pending.append(line)
        self._pending_bytes += len(line) + 1
        self._block_length += length
        self._block_records += 1
        self.num_records += 1
        self._next_offset = offset + 1
        if self._pending_bytes >= _FEED_BYTES:
            self._feed()

    def extend(self, offsets: Sequence[int], values: Sequence[bytes | None],
               max_chunks: int | None = None, *, assume_sorted: bool = False) -> int:
        """Append records in bulk; same result, byte for byte, as :meth:`append` one by one.

        Why: per-record Python work would dominate for small records (a 40-byte record costs
        about as much to account for as to compress). Here a run of consecutive offsets is
        joined once, checked for bytes needing escapes with C-level scans, cut into blocks by
        searching the joined bytes for the last LF that fits (ASCII: a length is a byte count)
        or by prefix sums of :func:`text_lengths`, and handed to zlib as slices.

        Stops early, before the record that would open block number ``max_chunks + 1``, once
        ``max_chunks`` blocks are closed (the file is full); returns how many records were
        consumed. ``assume_sorted``: the caller guarantees non-decreasing offsets (e.g. a sorted
        Arrow column); then a run whose span equals its length is consecutive without an O(n)
        check (that check costs ~5% of the compression time of 40-byte records).
        """
        n = len(values)
        if len(offsets) != n:
            raise ValueError(f"{len(offsets)} offsets for {n} values")
        start = 0
        while start < n:
            if self._full(max_chunks):
                break
            first = offsets[start]
            end = n
            consecutive = offsets[n - 1] - first == n - 1 - start and (
                assume_sorted or list(offsets[start:]) == list(range(first, first + n - start)))
            if not consecutive:
                end = start + 1  # a gap (or disorder, rejected below): take the consecutive run
                while end < n and offsets[end] == offsets[end - 1] + 1:
                    end += 1
                if end < n and offsets[end] < offsets[end - 1]:
                    raise BlockGzipError(f"offset {offsets[end]} after {offsets[end - 1]}: offsets must increase")
            start += self._extend_run(first, values[start:end], max_chunks)
            if start < end:
                break  # the file is full
        return start

    def _full(self, max_chunks: int | None) -> bool:
        """Whether the file has its ``max_chunks`` blocks (an empty first block alone does not
        fill it: its record is still to come)."""
        return max_chunks is not None and self._num_chunks >= max_chunks and self.num_records > 0

    def _extend_run(self, first: int, values: Sequence[bytes | None], max_chunks: int | None) -> int:
        """Append records with consecutive offsets starting at ``first``; returns how many."""
        if first != self._next_offset:
            if first < self._next_offset:
                raise BlockGzipError(f"offset {first} after {self._next_offset - 1}: offsets must increase")
            if self._block_records:
                self.close_block()
        n = len(values)
        try:
            blob = LF.join(values)  # type: ignore[arg-type]
            clean = blob.count(LF) == n - 1 and CR not in blob and (
                RS not in blob or not any(v[:1] == RS for v in values))  # type: ignore[index]
        except TypeError:  # a None (tombstone) among the values
            clean = False
        if not clean:
            blob = LF.join([encode_value(v) for v in values])
        blob += LF
        # Where lengths come from. ASCII: a length is a byte count, so blocks are cut on the bytes
        # themselves. UTF-8 without astral characters: a length is a character count, so blocks
        # are cut on the decoded text and the cut is carried back to bytes by encoding what it
        # holds. Otherwise (astral characters count 2, bytes that are not UTF-8): prefix sums of
        # each record's length.
        units: bytes | str = blob
        newline: bytes | str = LF
        sums: list[int] | None = None
        if not blob.isascii():
            try:
                text: str | None = blob.decode("utf-8")
            except UnicodeDecodeError:
                text = None
            if text is not None and not _has_astral(text):
                units, newline = text, "\n"
            else:
                sums = [0, *accumulate(text_lengths(blob))]
        view = memoryview(blob)
        if self._pending:
            self._feed()
        size = len(units)
        position = 0  # in blob
        upos = 0  # in units (the positional paths)
        done = 0
        while done < n:
            if self._full(max_chunks):
                break
            room = self.block_size - self._block_length
            if sums is None:
                if size - upos <= room:
                    ucut, records = size, n - done
                else:
                    ucut = units.rfind(newline, upos, upos + room) + 1 if room > 0 else 0  # type: ignore[arg-type]
                    records = units.count(newline, upos, ucut) if ucut else 0  # type: ignore[arg-type]
            else:
                records = bisect_right(sums, sums[done] + room, done) - 1 - done if room >= 0 else 0
            if not records:  # the next record does not fit in the open block
                if self._block_records:
                    self.close_block()
                    continue
                if self._starts_file():
                    self._block_first = first + done
                    self._seal_block()
                records = 1  # too long for any block: alone in one
                if sums is None:
                    ucut = units.index(newline, upos) + 1  # type: ignore[arg-type]
            if sums is None:
                length = ucut - upos
                cut = ucut if units is blob else position + len(units[upos:ucut].encode("utf-8"))  # type: ignore[union-attr]
                upos = ucut
            else:
                length = sums[done + records] - sums[done]
                cut = position
                for _ in range(records):
                    cut = blob.index(LF, cut) + 1
            if not self._block_records:
                self._block_first = first + done
            self._emit(view[position:cut])
            self._block_length += length
            self._block_records += records
            self.num_records += records
            done += records
            self._next_offset = first + done
            position = cut
        return done

    def _feed(self) -> None:
        self._pending.append(b"")  # so the join ends with LF
        data = LF.join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        self._emit(data)

    def _seal_block(self) -> Chunk:
        self._feed()
        chunk = self._seal()
        self._num_chunks += 1
        self._block_length = 0
        self._block_records = 0
        return chunk

    def close_block(self) -> Chunk | None:
        """Finish the open block; returns its index entry (None if no block is open)."""
        if not self._block_records:
            return None
        return self._seal_block()


class BlockSizer(BlockCutter):
    """Cuts blocks like :class:`BlockGzipWriter` without compressing: it only counts.

    Used to decide where files close (a file closes after ``chunks.per.file`` blocks) before
    paying for compression, and to continue that decision in another process from a
    :class:`BlockState`.
    """

    __slots__ = ()

    def _feed(self) -> None:
        self._pending.clear()
        self._pending_bytes = 0

    def finish(self) -> BlockState:
        """Close the open block; returns the final accounting."""
        self.close_block()
        return self.state


#: The 10-byte header Java's ``GZIPOutputStream`` (JDK 16 and later) starts every member with:
#: deflate, no flags, mtime 0, no extra flags, OS 255 ("unknown"; JDK 15 and earlier wrote 0).
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


class BlockGzipWriter(BlockCutter):
    """Writes one file: records in, gzip members out to ``sink``, index chunks collected.

    Each member is written the way Java's ``GZIPOutputStream`` writes it — :data:`GZIP_HEADER`,
    raw deflate from zlib at level 6 with the default window and memory level, then CRC-32 and
    length — so a file holds exactly the original's bytes (with the same zlib).

    Why a streaming writer: a file holds up to ``chunks.per.file`` times 64 MiB of records, so
    compressed bytes go to the sink as they are produced and only about 1 MiB of pending lines
    is kept in memory.
    """

    __slots__ = ("_chunks", "_compressor", "_crc", "_level", "_member_bytes", "_position", "_sink")

    def __init__(self, sink: BinaryIO, block_size: int = DEFAULT_BLOCK_SIZE, level: int = DEFAULT_LEVEL):
        super().__init__(block_size)
        self._sink = sink
        self._level = level
        self._chunks: list[Chunk] = []
        self._position = 0  # compressed bytes written to the sink
        self._compressor: Any = None  # zlib.Compress (not a public type)
        self._crc = 0
        self._member_bytes = 0

    @property
    def chunks(self) -> list[Chunk]:
        """Closed blocks so far."""
        return list(self._chunks)

    def _write(self, data: bytes) -> None:
        if data:
            self._sink.write(data)
            self._position += len(data)

    def _start_member(self) -> Any:
        if self._compressor is None:
            self._compressor = zlib.compressobj(self._level, zlib.DEFLATED, -zlib.MAX_WBITS)
            self._crc = 0
            self._member_bytes = 0
            self._write(GZIP_HEADER)
        return self._compressor

    def _emit(self, data: bytes | memoryview) -> None:
        compressor = self._start_member()
        self._crc = zlib.crc32(data, self._crc)
        self._member_bytes += len(data)
        self._write(compressor.compress(data))

    def _seal(self) -> Chunk:
        compressor = self._start_member()  # an empty block is a member too
        self._write(compressor.flush(zlib.Z_FINISH) + struct.pack("<II", self._crc, self._member_bytes & 0xFFFFFFFF))
        start = self._chunks[-1].byte_end if self._chunks else 0
        chunk = Chunk(self._block_length, self._block_records, self._position - start, start, self._block_first)
        self._chunks.append(chunk)
        self._compressor = None
        return chunk

    def finish(self) -> list[Chunk]:
        """Close the open block; returns the file's index entries. The sink is left open."""
        self.close_block()
        return list(self._chunks)

    @property
    def bytes_written(self) -> int:
        return self._position


def write_file(records: Iterable[tuple[int, bytes | None]], sink: BinaryIO,
               block_size: int = DEFAULT_BLOCK_SIZE) -> list[Chunk]:
    """Write a whole file of ``(offset, value)`` records; returns its index entries."""
    writer = BlockGzipWriter(sink, block_size)
    for offset, value in records:
        writer.append(offset, value)
    return writer.finish()


# --------------------------------------------------------------------------------------------
# Reader
# --------------------------------------------------------------------------------------------


def _inflate_member(data: bytes, what: str) -> tuple[bytes, bytes]:
    """The first gzip member of ``data``, decompressed, and the bytes after it. ``what`` names
    the input in errors ("block" or "stream")."""
    decompressor = zlib.decompressobj(_GZIP_WBITS)
    try:
        out = decompressor.decompress(data)
    except zlib.error as exc:
        raise BlockGzipError(f"not a gzip {what}: {exc}") from None
    if not decompressor.eof:
        raise BlockGzipError(f"gzip {what} is truncated")
    return out, decompressor.unused_data


def decompress_block(data: bytes) -> bytes:
    """Decompress exactly one gzip member (the bytes of one index chunk)."""
    out, rest = _inflate_member(data, "block")
    if rest:
        raise BlockGzipError("byte range holds more than one gzip member")
    return out


def read_block(data: bytes) -> list[bytes | None]:
    """The record values of one block."""
    return [decode_line(line) for line in split_lines(decompress_block(data))]


def iter_members(data: bytes) -> Iterator[bytes]:
    """Decompressed bytes of each gzip member of a whole file (or of a run of blocks)."""
    view = data
    while view:
        out, view = _inflate_member(view, "stream")
        yield out


def read_records(data: bytes) -> list[bytes | None]:
    """Every record value of a whole file (any number of members)."""
    values: list[bytes | None] = []
    for member in iter_members(data):
        values.extend(decode_line(line) for line in split_lines(member))
    return values
