"""Where each partition resumes: the store is the offset store (its last complete file per
topic-partition and that file's index give the next offset).
"""

from __future__ import annotations

import logging

from pubsub_connect.io.objectstore.archive_files import list_archive_files
from pubsub_connect.io.objectstore.base import ObjectStore
from pubsub_connect.model.blockgzip.blocks import read_records
from pubsub_connect.model.blockgzip.index import parse_index
from pubsub_connect.model.blockgzip.names import index_key
from pubsub_connect.pipelines.archive.settings import TopicPartition
from pubsub_connect.pipelines.context import ConnectorError

log = logging.getLogger(__name__)


def file_end_offset(store: ObjectStore, gz_key: str, first_offset: int, size: int,
                    has_index: bool) -> int:
    """The offset after the last record of a complete file, from its index.

    Without an index (a crash leftover of the original Java connector, which uploads the
    ``.gz`` before its index) the file is read and its records counted, assuming consecutive
    offsets as that connector did.
    """
    if has_index:
        chunks = parse_index(store.read(index_key(gz_key)))
        if not chunks or chunks[0].first_record_offset != first_offset or chunks[-1].byte_end != size:
            raise ConnectorError(f"{store.url(gz_key)} does not match its index (first offset or size "
                                 "differ); move the file away or restore its index")
        return chunks[-1].end_offset
    log.warning("%s has no index: counting its records", store.url(gz_key))
    return first_offset + len(read_records(store.read(gz_key)))


def resume_offsets(store: ObjectStore, prefix: str) -> dict[TopicPartition, int]:
    """Next offset to archive per topic-partition, from the last complete file of each."""
    offsets: dict[TopicPartition, int] = {}
    for tp, files in list_archive_files(store, prefix).items():
        last = files[-1]
        offsets[tp] = file_end_offset(store, last.name.gz_key, last.name.first_offset, last.size,
                                      last.has_index)
    return offsets
