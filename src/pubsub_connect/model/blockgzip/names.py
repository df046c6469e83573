"""Object keys of the archive: data files, their indexes and the per-partition cursor, named like
the original connector's (see the package docstring).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

GZ_SUFFIX = ".gz"
INDEX_SUFFIX = ".index.json"

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
