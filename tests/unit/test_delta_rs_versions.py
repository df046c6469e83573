"""The fallback's Delta stream reader learns the latest version by probing commit files."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from pubsub_connect.io.spark import fallback_engine_available

if not fallback_engine_available():
    pytest.skip("the fallback engine needs Spark 4.2 or newer", allow_module_level=True)

from pubsub_connect.io.delta_rs_source import newest_version_from, table_version  # after the skip


def _append(path: Path, value: int) -> None:
    write_deltalake(str(path), pa.table({"v": [value]}), mode="append")


def test_probe_finds_every_commit_after_the_known_version(tmp_path: Path) -> None:
    table = tmp_path / "t"
    assert newest_version_from(str(table), -1) == -1  # no table yet
    _append(table, 0)
    assert newest_version_from(str(table), -1) == 0
    for value in (1, 2, 3):
        _append(table, value)
    assert newest_version_from(str(table), 0) == 3 == table_version(str(table))
    assert newest_version_from(str(table), 3) == 3  # nothing new: one probe, same answer


def test_probe_ignores_files_that_are_not_commits(tmp_path: Path) -> None:
    table = tmp_path / "t"
    _append(table, 0)
    log = table / "_delta_log"
    (log / f"{1:020d}.json.tmp").write_text("{}")  # a writer's temporary file is not a commit
    (log / f"{1:020d}.crc").write_text("{}")
    assert newest_version_from(str(table), 0) == 0


def _stream_reader(path: Path, **options: str):
    from pyspark.sql.types import LongType, StructField, StructType

    from pubsub_connect.io.delta_rs_source import DeltaRsStreamReader

    return DeltaRsStreamReader(str(path), StructType([StructField("v", LongType())]), options)


def test_a_micro_batch_stops_before_the_commit_that_passes_the_byte_bound(tmp_path: Path) -> None:
    from pubsub_connect.io.delta_rs_source import added_file_sizes

    table = tmp_path / "t"
    for value in range(5):
        _append(table, value)
    (_, one_file), = added_file_sizes(str(table), 0)
    reader = _stream_reader(table, maxBytesPerTrigger=str(2 * one_file))
    limit = reader.getDefaultReadLimit()
    assert reader.latestOffset({"version": -1}, limit) == {"version": 1}  # two commits fit exactly
    assert reader.latestOffset({"version": 1}, limit) == {"version": 3}
    assert reader.latestOffset({"version": 3}, limit) == {"version": 4}  # the rest
    # at least one commit, however small the bound
    small = _stream_reader(table, maxBytesPerTrigger="1")
    assert small.latestOffset({"version": -1}, small.getDefaultReadLimit()) == {"version": 0}


def test_files_and_bytes_bound_together_and_the_tighter_one_wins(tmp_path: Path) -> None:
    table = tmp_path / "t"
    for value in range(4):
        _append(table, value)
    reader = _stream_reader(table, maxBytesPerTrigger=str(10**9), maxFilesPerTrigger="3")
    assert reader.latestOffset({"version": -1}, reader.getDefaultReadLimit()) == {"version": 2}
    unbounded = _stream_reader(table)
    assert unbounded.latestOffset({"version": -1}, unbounded.getDefaultReadLimit()) == {"version": 3}
