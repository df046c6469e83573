"""The fallback's Delta stream reader learns the latest version by probing commit files."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from pubsub_connect.io.delta_rs_source import newest_version_from, table_version


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
