"""``archive read``: records of one archive file from an offset, with one range request."""

from __future__ import annotations

from pubsub_connect.io.objectstore.base import ObjectStore, ObjectStoreError
from pubsub_connect.io.objectstore.locations import store_for_location
from pubsub_connect.model.blockgzip.blocks import iter_members
from pubsub_connect.model.blockgzip.index import Chunk, find_chunk, parse_index
from pubsub_connect.model.blockgzip.lines import BlockGzipError, decode_line, split_lines
from pubsub_connect.model.blockgzip.names import gz_key_for, index_key
from pubsub_connect.pipelines.archive.settings import ArchiveReadError


def read_archive_records(location: str, offset: int, count: int | None = None,
                         store: ObjectStore | None = None) -> list[tuple[int, bytes | None]]:
    """``(offset, value)`` records of one archive file starting at ``offset``.

    Reads the index, then fetches with a single range request only the block holding
    ``offset`` (``count`` None: to the end of that block) or the run of blocks covering
    ``count`` records (stopping at the end of the file). ``location`` is the ``.gz`` or its
    ``.index.json``, as ``s3://bucket/key`` or a path (``/Volumes/...`` included); with
    ``store`` it is a key in that store.
    """
    if count is not None and count < 0:
        raise ArchiveReadError(f"--count must be positive, got {count}")
    try:
        if store is None:
            store, key = store_for_location(location)
        else:
            key = location
        gz = gz_key_for(key)
        if not gz.endswith(".gz"):
            raise ArchiveReadError(f"{location}: expected a .gz archive file or its .index.json")
        chunks = parse_index(store.read(index_key(gz)))
        first = find_chunk(chunks, offset)
        if first is None:
            held = f"{chunks[0].first_record_offset}..{chunks[-1].end_offset - 1}" if chunks else "nothing"
            raise ArchiveReadError(f"offset {offset} is not in {store.url(gz)} (it holds offsets {held})")
        if count == 0:
            return []
        last = first
        if count is not None:
            while last + 1 < len(chunks) and chunks[last].end_offset < offset + count:
                last += 1
        selected: list[Chunk] = chunks[first:last + 1]
        data = store.read(gz, selected[0].byte_offset, selected[-1].byte_end)
        out: list[tuple[int, bytes | None]] = []
        for chunk, member in zip(selected, iter_members(data), strict=True):
            lines = split_lines(member)
            if len(lines) != chunk.num_records:
                raise ArchiveReadError(f"{store.url(gz)}: block at byte {chunk.byte_offset} holds {len(lines)} "
                                       f"records, its index says {chunk.num_records}")
            for position, line in enumerate(lines):
                if chunk.first_record_offset + position >= offset:
                    out.append((chunk.first_record_offset + position, decode_line(line)))
    except (ObjectStoreError, BlockGzipError, ValueError) as exc:
        raise ArchiveReadError(f"{location}: {exc}") from None
    return out if count is None else out[:count]


def archive_read(path_or_url: str, offset: int, count: int | None = None) -> list[bytes]:
    """The values of the records from ``offset`` (see :func:`read_archive_records`), as bytes for
    printing: a null value (tombstone) is returned as ``b""``."""
    records = read_archive_records(path_or_url, offset, count)
    return [value if value is not None else b"" for _, value in records]
