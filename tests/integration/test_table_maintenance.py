"""Compaction on a real Delta Lake table (local Spark): ``OPTIMIZE`` rewrites only the files below
the threshold maintenance gives it, so a file an earlier compaction wrote is not rewritten each turn
(Delta's own threshold equals the size it writes files up to), and the session's setting is left
as it was."""

from __future__ import annotations

import os
from pathlib import Path

from pubsub_connect.io.table_maintenance import OPTIMIZE_MIN_FILE_SIZE, Compaction, optimize


def _table_with_one_large_file_and_small_ones(spark, path: Path, small: int) -> str:
    rows = [(i, os.urandom(1_000)) for i in range(300)]  # incompressible: one file of about 300 kB
    spark.createDataFrame(rows, "id long, payload binary").coalesce(1).write.format("delta").save(str(path))
    for i in range(small):
        spark.createDataFrame([(1_000 + i, b"x")], "id long, payload binary").write.format("delta").mode(
            "append").save(str(path))
    return f"delta.`{path}`"


def _files(spark, path: Path) -> dict[str, int]:
    """The table's current data files and their sizes."""
    names = {os.path.basename(f) for f in spark.read.format("delta").load(str(path)).inputFiles()}
    return {name: (path / name).stat().st_size for name in names}


def test_files_above_the_threshold_are_left_alone_and_the_small_ones_compacted(spark, tmp_path: Path) -> None:
    path = tmp_path / "table"
    target = _table_with_one_large_file_and_small_ones(spark, path, small=5)
    files = _files(spark, path)
    large = {name for name, size in files.items() if size > 100_000}
    assert len(large) == 1 and len(files) == 6
    assert spark.conf.get(OPTIMIZE_MIN_FILE_SIZE, None) is None

    small_bytes = sum(size for name, size in files.items() if name not in large)
    assert optimize(spark, target, below_bytes=100_000) == Compaction(5, 1, 100_000, small_bytes)
    files = _files(spark, path)
    assert len(files) == 2 and large < files.keys()
    assert spark.conf.get(OPTIMIZE_MIN_FILE_SIZE, None) is None  # set for that command alone
    assert spark.read.format("delta").load(str(path)).count() == 305

    # Delta's own threshold (1 GiB) takes the large file too
    assert optimize(spark, target) == Compaction(2, 1, None, sum(files.values()))
    assert len(_files(spark, path)) == 1 and not large & _files(spark, path).keys()


def test_a_threshold_the_user_set_is_the_ceiling_and_is_kept(spark, tmp_path: Path) -> None:
    path = tmp_path / "table"
    target = _table_with_one_large_file_and_small_ones(spark, path, small=3)
    files = _files(spark, path)
    large = {name for name, size in files.items() if size > 100_000}
    spark.conf.set(OPTIMIZE_MIN_FILE_SIZE, "100000")
    try:
        compaction = optimize(spark, target, below_bytes=1 << 30)
        assert spark.conf.get(OPTIMIZE_MIN_FILE_SIZE) == "100000"
    finally:
        spark.conf.unset(OPTIMIZE_MIN_FILE_SIZE)
    assert compaction == Compaction(3, 1, 100_000, sum(size for name, size in files.items() if name not in large))
    assert len(_files(spark, path)) == 2 and large < _files(spark, path).keys()
