"""The archive's complete files in a store, per topic-partition (a ``.gz`` is committed once
visible; an index without its ``.gz`` is a crash leftover).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pubsub_connect.io.objectstore.base import ObjectStore
from pubsub_connect.model.blockgzip.names import ArchiveName, key_prefix, parse_object_key

if TYPE_CHECKING:
    pass


# --------------------------------------------------------------------------------------------
# Archive files per topic-partition
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArchiveObject:
    """A complete archive file in a store: its parsed name and sizes."""

    name: ArchiveName
    size: int
    has_index: bool


def list_archive_files(store: ObjectStore, prefix: str = "") -> dict[tuple[str, int], list[ArchiveObject]]:
    """Archive files under ``prefix`` grouped by (topic, partition), ordered by first offset.

    A file counts only when its ``.gz`` exists (the connector writes the index first and the
    ``.gz`` last, so a visible ``.gz`` is a committed file); an index without its ``.gz`` is a
    crash leftover and is ignored (the retry rewrites both under the same names). ``prefix`` is
    ``s3.prefix``: ``systest`` means the keys under ``systest/``, as for the original.
    """
    prefix = key_prefix(prefix)
    gz: dict[str, tuple[ArchiveName, int]] = {}
    indexes: set[str] = set()
    for info in store.list(prefix):
        name = parse_object_key(info.key, prefix)
        if name is None:
            continue
        if name.suffix == ".gz":
            gz[name.gz_key] = (name, info.size)
        else:
            indexes.add(name.gz_key)
    grouped: dict[tuple[str, int], list[ArchiveObject]] = {}
    for key, (name, size) in gz.items():
        grouped.setdefault((name.topic, name.partition), []).append(ArchiveObject(name, size, key in indexes))
    for files in grouped.values():
        files.sort(key=lambda f: (f.name.first_offset, f.name.date))
    return grouped
