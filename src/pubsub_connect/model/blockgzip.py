"""Block-GZIP: the archive sink's file format (byte-compatible with the Kafka Connect S3 sink).

Why this format: archive files should be large (few objects to list and fetch for batch jobs)
yet allow fetching a handful of records at a given offset without downloading the whole file.
Gzip allows both: a file that is the concatenation of several gzip *members* is itself a valid
gzip file, so ``gzip -dc`` (or any gzip reader) sees one stream of newline-delimited records,
while a sibling ``.index.json`` records where each member (a *block*, called a *chunk* in the
index) starts, so a range read of one block decompresses on its own.

This module is pure: no paths, no network, no clocks. The writer emits compressed bytes into a
binary sink the caller supplies (a staged file in ``local.buffer.dir``, or memory in tests). The
same block-cutting code also runs without compressing (:class:`BlockSizer`), and
:class:`FilePlanner` applies the rotation rules with it: the archive decides where files end
before compressing anything, and can carry that decision from one process to the next as a few
numbers (:class:`OpenFile`).

Layout
------
- A record is one line: its value bytes followed by LF (``0x0A``). Values are written as bytes,
  never decoded or re-encoded.
- Blocks are cut by the original's rule: before a record is written, if the open block's
  *length* plus the record's would exceed ``compressed_block_size`` (the original's name; it is a
  size of uncompressed input), the block closes and the record starts the next block. A length is
  what the original measures: Java's ``String.length()`` of the line's text (UTF-16 code units:
  the byte count for ASCII, fewer for other UTF-8) plus 1 for the LF, and it is what the index
  calls ``byte_length_uncompressed``. A record is never split: one longer than a block is alone in
  its block, and when it is the first record of a file, the file starts with an empty block (a
  20-byte gzip member indexed with ``num_records`` 0), as the original's writer leaves it.
- A block also closes before a record whose offset is not the previous offset + 1 (a gap left by
  compaction or by transaction markers). Why: the index only has ``first_record_offset`` and
  ``num_records`` per block, so records inside a block must have consecutive offsets for
  "offset N is line N - first_record_offset" to hold; the original connector silently assumed
  it. With this rule the index is exact on every topic and still has the original's exact shape.
- Each block is one gzip member written like Java's ``GZIPOutputStream``: a fixed 10-byte header
  (mtime 0, no file name, OS 255 as JDK 16+ writes it), zlib raw deflate at level 6, CRC-32 and
  length. The same records always produce the same bytes (a retried upload rewrites an identical
  object), and the original's bytes for the same lines.

Index: ``{"chunks":[{"byte_length_uncompressed":…,"num_records":…,"byte_length":…,
"byte_offset":…,"first_record_offset":…},…]}`` — exactly the original's keys, in its order.

File names: ``<prefix>/<yyyy-mm-dd>/<topic>-<partition %05d>-<first offset %012d>.gz`` and the
same with ``.index.json``; like the original, a non-empty prefix gets a ``/`` unless it already
ends with one (``systest`` and ``systest/`` both give ``systest/2016-02-24/…``; an empty prefix
gives ``2016-02-24/…``). The date is the UTC date of the file's *first record timestamp*, not
the wall clock (the original uses the upload date), so a retry after a crash writes exactly the
same object name. Beside them, ``<prefix>/last_chunk_index.<topic>-<partition %05d>.txt`` holds
the key of the partition's last index, the cursor the original resumes from.

Newline escaping rule (values are bytes)
----------------------------------------
A line is the value itself when the value contains neither LF (``0x0A``) nor CR (``0x0D``) and
does not start with the byte RS (``0x1E``, ASCII "record separator"). That is the common case
(JSON, CSV, log lines), and such files are identical to the original connector's output.

Otherwise the line is RS followed by the value with three substitutions, applied left to right:
``\\`` → ``\\\\``, LF → ``\\n``, CR → ``\\r``. A null value (a Kafka tombstone) is a line that
is RS alone — unambiguous, because an empty value needs no escaping and is an empty line.
Decoding: a line without a leading RS is the value; RS alone is null; otherwise drop the RS and
undo the three escapes. CR is escaped too because common line readers (Spark's text source,
Python's universal newlines) also split on CR. Every record is therefore exactly one line and
``gzip -dc FILE | wc -l`` counts records.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from itertools import accumulate
from typing import Any, BinaryIO

#: The seed's default block size: 64 MiB of uncompressed records.
DEFAULT_BLOCK_SIZE = 67_108_864
#: zlib level: the original connector uses Java's default deflater level, which is 6.
DEFAULT_LEVEL = 6
#: ``wbits`` for zlib's gzip wrapper (header + CRC32 + ISIZE trailer) with a 32 KiB window.
_GZIP_WBITS = 16 + zlib.MAX_WBITS
#: Feed the compressor in pieces of about this size: large enough that per-call overhead
#: vanishes, small enough that a block's pending lines never hold much memory.
_FEED_BYTES = 1 << 20

RS = b"\x1e"
NULL_LINE = RS
LF = b"\n"
CR = b"\r"

GZ_SUFFIX = ".gz"
INDEX_SUFFIX = ".index.json"


class BlockGzipError(ValueError):
    """Malformed archive data (bad index, truncated block, out-of-order offsets)."""


# --------------------------------------------------------------------------------------------
# Records ↔ lines
# --------------------------------------------------------------------------------------------


def encode_value(value: bytes | None) -> bytes:
    """The line for ``value`` (without its LF), following the module's escaping rule."""
    if value is None:
        return NULL_LINE
    if LF in value or CR in value or value[:1] == RS:
        return RS + value.replace(b"\\", b"\\\\").replace(LF, b"\\n").replace(CR, b"\\r")
    return bytes(value)


_UNESCAPE = {b"\\": b"\\", b"n": LF, b"r": CR}
_ESCAPE_RE = re.compile(rb"\\(.)", re.DOTALL)


def _unescape_match(match: re.Match[bytes]) -> bytes:
    try:
        return _UNESCAPE[match.group(1)]
    except KeyError:
        raise BlockGzipError(f"invalid escape sequence {match.group(0)!r} in an escaped record") from None


def decode_line(line: bytes) -> bytes | None:
    """The value a line (without its LF) stands for; ``None`` for a tombstone."""
    if line[:1] != RS:
        return line
    if len(line) == 1:
        return None
    body = line[1:]
    if b"\\" not in body:
        return body
    if body.endswith(b"\\") and (len(body) - len(body.rstrip(b"\\"))) % 2 == 1:
        raise BlockGzipError("escaped record ends with a lone backslash")
    return _ESCAPE_RE.sub(_unescape_match, body)


def split_lines(data: bytes) -> list[bytes]:
    """Decompressed block bytes → lines without LF. Every record line ends with LF."""
    if not data:
        return []
    if not data.endswith(LF):
        raise BlockGzipError("block does not end with a newline (truncated or not Block-GZIP)")
    return data[:-1].split(LF)


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


# --------------------------------------------------------------------------------------------
# Object names
# --------------------------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def date_folder(timestamp_ms: int) -> str:
    """``yyyy-mm-dd`` (UTC) of a record timestamp in epoch milliseconds."""
    # timedelta arithmetic also covers pre-1970 timestamps (Kafka's -1 "no timestamp").
    return (_EPOCH + timedelta(milliseconds=timestamp_ms)).strftime("%Y-%m-%d")


def key_prefix(prefix: str) -> str:
    """``s3.prefix`` as the start of object keys, by the original's rule: a non-empty prefix
    ends with ``/`` (added when missing, never doubled); an empty one stays empty.

    Why the original's rule: a store it wrote (``systest`` → ``systest/2016-02-24/…``) must be
    found and continued with the same ``s3.prefix`` value, and vice versa."""
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


def object_key(prefix: str, topic: str, partition: int, first_offset: int, first_timestamp_ms: int) -> str:
    """The ``.gz`` object key of a file whose first record is (``first_offset``, timestamp)."""
    return (f"{key_prefix(prefix)}{date_folder(first_timestamp_ms)}/"
            f"{topic}-{partition:05d}-{first_offset:012d}{GZ_SUFFIX}")


def cursor_key(prefix: str, topic: str, partition: int) -> str:
    """The original's per-partition cursor: an object holding the key of the partition's last
    ``.index.json``, the only thing the original reads to resume (this connector lists the
    files instead, but keeps the cursor current so the original can take over a store)."""
    return f"{key_prefix(prefix)}last_chunk_index.{topic}-{partition:05d}.txt"


def index_key(gz_key: str) -> str:
    """The ``.index.json`` key beside a ``.gz`` key."""
    if not gz_key.endswith(GZ_SUFFIX):
        raise ValueError(f"not a Block-GZIP file name: {gz_key!r}")
    return gz_key[: -len(GZ_SUFFIX)] + INDEX_SUFFIX


def gz_key_for(key: str) -> str:
    """The ``.gz`` key for either a ``.gz`` or an ``.index.json`` key."""
    if key.endswith(INDEX_SUFFIX):
        return key[: -len(INDEX_SUFFIX)] + GZ_SUFFIX
    return key


_NAME_RE = re.compile(
    r"^(?P<prefix>.*?)(?P<date>\d{4}-\d{2}-\d{2})/(?P<topic>[^/]+)-(?P<partition>\d{5,})-(?P<offset>\d{12,})"
    r"(?P<suffix>\.gz|\.index\.json)$"
)


@dataclass(frozen=True)
class ArchiveName:
    """The parts of an archive object key."""

    prefix: str
    date: str
    topic: str
    partition: int
    first_offset: int
    suffix: str

    @property
    def gz_key(self) -> str:
        return (f"{self.prefix}{self.date}/{self.topic}-{self.partition:05d}-"
                f"{self.first_offset:012d}{GZ_SUFFIX}")

    @property
    def index_key(self) -> str:
        return index_key(self.gz_key)


def parse_object_key(key: str, prefix: str = "") -> ArchiveName | None:
    """Split an object key into its parts; None when it is not an archive file under ``prefix``.

    Topic names may contain ``-``: the partition and offset are taken from the right.
    """
    prefix = key_prefix(prefix)
    if not key.startswith(prefix):
        return None
    match = _NAME_RE.match(key[len(prefix):])
    if match is None or match.group("prefix"):
        return None
    return ArchiveName(prefix, match.group("date"), match.group("topic"), int(match.group("partition")),
                       int(match.group("offset")), match.group("suffix"))


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


def decompress_block(data: bytes) -> bytes:
    """Decompress exactly one gzip member (the bytes of one index chunk)."""
    decompressor = zlib.decompressobj(_GZIP_WBITS)
    try:
        out = decompressor.decompress(data)
    except zlib.error as exc:
        raise BlockGzipError(f"not a gzip block: {exc}") from None
    if not decompressor.eof:
        raise BlockGzipError("gzip block is truncated")
    if decompressor.unused_data:
        raise BlockGzipError("byte range holds more than one gzip member")
    return out


def read_block(data: bytes) -> list[bytes | None]:
    """The record values of one block."""
    return [decode_line(line) for line in split_lines(decompress_block(data))]


def iter_members(data: bytes) -> Iterator[bytes]:
    """Decompressed bytes of each gzip member of a whole file (or of a run of blocks)."""
    view = data
    while view:
        decompressor = zlib.decompressobj(_GZIP_WBITS)
        try:
            out = decompressor.decompress(view)
        except zlib.error as exc:
            raise BlockGzipError(f"not a gzip stream: {exc}") from None
        if not decompressor.eof:
            raise BlockGzipError("gzip stream is truncated")
        yield out
        view = decompressor.unused_data


def read_records(data: bytes) -> list[bytes | None]:
    """Every record value of a whole file (any number of members)."""
    values: list[bytes | None] = []
    for member in iter_members(data):
        values.extend(decode_line(line) for line in split_lines(member))
    return values


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
