"""A Python data source that reads Delta tables written by delta-rs, as a batch or a stream.

Why: without Delta's jars Spark cannot ``readStream.format("delta")``. Our tables are
append-only, so a streaming read is simple and exact: the offset is the Delta table version,
and a micro-batch from version ``a`` (exclusive) to ``b`` (inclusive) reads the data files that
the commits ``a+1 … b`` added (``add`` actions in ``_delta_log/<version>.json``). A replayed
batch re-reads exactly the same files. Rows are returned as Arrow record batches.

Options: ``path`` (the table), ``maxFilesPerTrigger`` and ``maxBytesPerTrigger`` (read limits,
as Delta Lake's: a micro-batch stops before the commit that would pass either, but takes at
least one commit; whole commits are never split so a commit's rows are processed together),
``startingVersion`` (default: from the beginning).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pubsub_connect.model.schemas import to_arrow

FORMAT_NAME = "pubsub_connect_delta"
_READ_BATCH_ROWS = 65_536


def _log_path(table_path: str, version: int) -> str:
    return posixpath.join(table_path, "_delta_log", f"{version:020d}.json")


def _filesystem(table_path: str) -> tuple[Any, str]:
    """A pyarrow filesystem and the path within it (local paths and URIs alike)."""
    from pyarrow import fs

    if "://" in table_path:
        return fs.FileSystem.from_uri(table_path)
    return fs.LocalFileSystem(), table_path


def added_files(table_path: str, version: int) -> list[str]:
    """Data files added by one commit, as paths relative to the table (in commit order)."""
    return [path for path, _size in added_file_sizes(table_path, version)]


def added_file_sizes(table_path: str, version: int) -> list[tuple[str, int]]:
    """``(path relative to the table, size in bytes)`` of the data files one commit added."""
    filesystem, root = _filesystem(table_path)
    with filesystem.open_input_stream(_log_path(root, version)) as stream:
        text = stream.read().decode("utf-8")
    files: list[tuple[str, int]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        add = action.get("add")
        if add is not None and add.get("dataChange", True):
            files.append((unquote(add["path"]), int(add.get("size") or 0)))
        if action.get("remove") is not None and action["remove"].get("dataChange", True):
            # a deletion (retention) rewrites rows the stream read when they were appended:
            # the commit is skipped whole, as Delta's skipChangeCommits does
            return []
    return files


def table_version(table_path: str) -> int:
    """Latest committed version, -1 when the table does not exist yet."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(table_path):
        return -1
    return int(DeltaTable(table_path).version())


def newest_version_from(table_path: str, known: int) -> int:
    """The latest committed version, found by probing the commit files after ``known``.

    Why: a stream asks for the latest version every trigger, mostly to learn that nothing
    changed. Loading the table replays its log (checkpoint plus every commit since), which a
    few streams polling every 100 ms turn into most of a small driver's CPU; a commit file's
    existence is what makes a version committed (commits are written atomically and never
    removed before newer ones), so one ``stat`` per new version answers the same question.
    """
    from pyarrow import fs

    if known < 0:
        return table_version(table_path)
    filesystem, root = _filesystem(table_path)
    version = known
    while filesystem.get_file_info(_log_path(root, version + 1)).type != fs.FileType.NotFound:
        version += 1
    return version


def table_schema(table_path: str) -> StructType:
    from deltalake import DeltaTable
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(pa.schema(DeltaTable(table_path).schema().to_arrow()))


class FilesPartition(InputPartition):
    """Files to read in one task (absolute paths or URIs)."""

    def __init__(self, files: list[str]):
        super().__init__(files)
        self.files = files


def _read_files(files: Sequence[str], schema: StructType) -> Iterator[pa.RecordBatch]:
    """Stream the files' rows as Arrow batches conformed to ``schema`` (order and types)."""
    import pyarrow.parquet as pq

    target = to_arrow(schema)
    for file in files:
        filesystem, path = _filesystem(file)
        with filesystem.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            for batch in parquet.iter_batches(batch_size=_READ_BATCH_ROWS, columns=target.names):
                yield pa.RecordBatch.from_arrays(
                    [batch.column(name).cast(field.type) for name, field in zip(target.names, target, strict=True)],
                    schema=target,
                )


def _absolute(table_path: str, relative: str) -> str:
    return relative if "://" in relative else posixpath.join(table_path, relative)


class DeltaRsBatchReader(DataSourceReader):
    def __init__(self, path: str, schema: StructType):
        self.path = path
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.path):
            return []
        uris = DeltaTable(self.path).file_uris()
        return [FilesPartition([uri]) for uri in uris]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Spark may hand an empty InputPartition(None) when a batch planned no files.
        yield from _read_files(partition.value or [], self.schema)


class DeltaRsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"version": N}``: everything committed up to and including version N."""

    def __init__(self, path: str, schema: StructType, options: Mapping[str, str]):
        self.path = path
        self.schema = schema
        self.max_files = int(options["maxFilesPerTrigger"]) if options.get("maxFilesPerTrigger") else None
        self.max_bytes = int(options["maxBytesPerTrigger"]) if options.get("maxBytesPerTrigger") else None
        self.starting_version = int(options.get("startingVersion", "0"))
        self._available_now_end: int | None = None
        #: The newest version seen so far: later polls probe only for commits after it.
        self._latest_seen = -1

    def _latest_version(self) -> int:
        self._latest_seen = newest_version_from(self.path, self._latest_seen)
        return self._latest_seen

    def initialOffset(self) -> dict:
        return {"version": self.starting_version - 1}

    def getDefaultReadLimit(self) -> ReadLimit:
        # Python sources get one limit object, not Delta's composite of both: the limit says
        # "bounded", and latestOffset applies both options itself.
        if self.max_files:
            return ReadMaxFiles(self.max_files)
        if self.max_bytes:
            return ReadMaxBytes(self.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_end = self._latest_version()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        latest = self._latest_version()
        if self._available_now_end is not None:
            latest = min(latest, self._available_now_end)
        begin = int(start["version"])
        if latest <= begin:
            return {"version": begin}
        if isinstance(limit, ReadAllAvailable):
            return {"version": latest}
        files_left = self.max_files if self.max_files else None
        bytes_left = self.max_bytes if self.max_bytes else None
        end = begin
        for version in range(begin + 1, latest + 1):
            added = added_file_sizes(self.path, version)
            count, size = len(added), sum(s for _, s in added)
            over = (files_left is not None and count > files_left) or (bytes_left is not None and size > bytes_left)
            if end > begin and over:
                break
            end = version
            if files_left is not None:
                files_left -= count
            if bytes_left is not None:
                bytes_left -= size
            if (files_left is not None and files_left <= 0) or (bytes_left is not None and bytes_left <= 0):
                break
        return {"version": end}

    def reportLatestOffset(self) -> dict | None:
        return {"version": self._latest_seen}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        parts: list[InputPartition] = []
        for version in range(int(start["version"]) + 1, int(end["version"]) + 1):
            files = [_absolute(self.path, f) for f in added_files(self.path, version)]
            parts.extend(FilesPartition([f]) for f in files)
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Spark may hand an empty InputPartition(None) when a batch planned no files.
        yield from _read_files(partition.value or [], self.schema)

    def commit(self, end: dict) -> None:
        """Nothing to release: the table is the source of truth and is never modified here."""


class DeltaRsDataSource(DataSource):
    """``spark.read[Stream].format("pubsub_connect_delta").load(path)`` over a delta-rs table."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def _path(self) -> str:
        path = self.options.get("path")
        if not path:
            raise ValueError(f"{FORMAT_NAME}: the path option (or load(path)) is required")
        return str(path)

    def schema(self) -> StructType:
        return table_schema(self._path())

    def reader(self, schema: StructType) -> DataSourceReader:
        return DeltaRsBatchReader(self._path(), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return DeltaRsStreamReader(self._path(), schema, self.options)
