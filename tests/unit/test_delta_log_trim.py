"""Trimming a local Delta log (:mod:`pubsub_connect.io.delta_log`) on log folders laid out as Delta
Lake and Hadoop's local file system write them: exactly the files of the versions before the chosen
checkpoint go, with the ``.crc`` files beside them; nothing else does. And the version a stage's
restart reads from, which maintenance keeps."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pubsub_connect.io.batch_marks import batch_mark
from pubsub_connect.io.delta_log import (
    LogTrim,
    commits,
    complete_checkpoints,
    first_version_since,
    interval_ms,
    last_checkpoint,
    local_log,
    trim,
)
from pubsub_connect.pipelines.maintenance import MARK_REACH, consumed_below, newest_marks_from, resumes_at


def commit_files(version: int) -> list[str]:
    """What one commit leaves: its JSON and checksum, and the local file system's .crc of each."""
    return [f"{version:020d}.json", f".{version:020d}.json.crc", f"{version:020d}.crc", f".{version:020d}.crc.crc"]


def log_folder(tmp_path: Path, commits: int, checkpoints: list[str], last: int | None) -> Path:
    log = tmp_path / "t" / "_delta_log"
    log.mkdir(parents=True)
    for version in range(commits):
        for name in commit_files(version):
            (log / name).write_text("{}\n")
    for name in checkpoints:
        (log / name).write_bytes(b"PAR1")
        (log / f".{name}.crc").write_bytes(b"")
    if last is not None:
        (log / "_last_checkpoint").write_text(json.dumps({"version": last, "size": 3}))
    (log / ".00000000000000000012.json.3f1c.tmp").write_text("")  # a write in progress
    return log


def test_trim_removes_the_versions_before_the_newest_checkpoint_it_may_start_at(tmp_path: Path) -> None:
    log = log_folder(tmp_path, 13, ["00000000000000000004.checkpoint.parquet",
                                    "00000000000000000008.checkpoint.parquet",
                                    "00000000000000000012.checkpoint.parquet"], last=12)
    (log / "00000000000000000001.00000000000000000003.compacted.json").write_text("{}\n")
    (log / "00000000000000000005.00000000000000000009.compacted.json").write_text("{}\n")
    before = set(os.listdir(log))

    result = trim(log, keep_from=10)

    kept = {*(name for v in range(8, 13) for name in commit_files(v)), "_last_checkpoint",
            "00000000000000000008.checkpoint.parquet", ".00000000000000000008.checkpoint.parquet.crc",
            "00000000000000000012.checkpoint.parquet", ".00000000000000000012.checkpoint.parquet.crc",
            "00000000000000000005.00000000000000000009.compacted.json", ".00000000000000000012.json.3f1c.tmp"}
    assert set(os.listdir(log)) == kept
    assert (result.removed, result.starts_at, result.files) == (len(before) - len(kept), 8, len(kept))
    assert trim(log, keep_from=10) == LogTrim(0, None, len(kept))  # nothing more to remove


def test_trim_never_passes_the_checkpoint_writers_start_from(tmp_path: Path) -> None:
    # checkpoint 12 is being written: _last_checkpoint still names 8
    log = log_folder(tmp_path, 13, ["00000000000000000008.checkpoint.parquet",
                                    "00000000000000000012.checkpoint.parquet"], last=8)
    assert trim(log, keep_from=12).starts_at == 8
    assert sorted(int(n[:20]) for n in os.listdir(log) if n.endswith(".json")) == list(range(8, 13))


def test_trim_keeps_everything_without_a_complete_checkpoint_old_enough(tmp_path: Path) -> None:
    parts = [f"00000000000000000006.checkpoint.{i:010d}.0000000003.parquet" for i in (1, 3)]  # part 2 missing
    log = log_folder(tmp_path, 10, [*parts, "00000000000000000009.checkpoint.parquet"], last=9)
    before = sorted(os.listdir(log))
    assert trim(log, keep_from=8) == LogTrim(0, None, len(before))
    assert sorted(os.listdir(log)) == before
    assert trim(log_folder(tmp_path / "none", 5, [], last=None), keep_from=4).removed == 0


def test_a_multi_part_checkpoint_counts_once_whole(tmp_path: Path) -> None:
    parts = [f"00000000000000000006.checkpoint.{i:010d}.0000000002.parquet" for i in (1, 2)]
    assert complete_checkpoints([*parts, "00000000000000000003.checkpoint.0000000001.0000000002.parquet"]) == [6]
    log = log_folder(tmp_path, 10, parts, last=6)
    assert trim(log, keep_from=9).starts_at == 6
    assert last_checkpoint(log) == 6


def test_tables_with_v2_checkpoints_are_left_alone(tmp_path: Path) -> None:
    log = log_folder(tmp_path, 6, ["00000000000000000004.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.json"],
                     last=4)
    before = sorted(os.listdir(log))
    refused = LogTrim(0, None, len(before), "Delta log not trimmed: the table has v2 checkpoints")
    assert trim(log, keep_from=5) == refused
    assert sorted(os.listdir(log)) == before


def test_first_version_since_dates_commits_by_their_files(tmp_path: Path) -> None:
    log = log_folder(tmp_path, 5, [], last=None)
    for version in range(5):
        os.utime(log / f"{version:020d}.json", (1_000 + version * 10, 1_000 + version * 10))
    assert first_version_since(log, 1_020) == 2
    assert first_version_since(log, 1_021) == 3
    assert first_version_since(log, 2_000) is None


@pytest.mark.parametrize(("text", "expected"), [
    ("interval 30 days", 30 * 86_400_000), ("interval 1 hour", 3_600_000), ("2 weeks", 14 * 86_400_000),
    ("INTERVAL 90 SECONDS", 90_000), ("interval 1 day 2 hours", None), ("forever", None)])
def test_interval_ms(text: str, expected: int | None) -> None:
    assert interval_ms(text) == expected


def test_only_a_log_on_this_machine_is_trimmed(tmp_path: Path) -> None:
    log = log_folder(tmp_path, 1, [], last=None)
    assert local_log(str(tmp_path / "t")) == log
    assert local_log(f"file:{tmp_path / 't'}") == log
    assert local_log(f"file://{tmp_path / 't'}") == log
    assert local_log("s3a://bucket/t") is None
    assert local_log("abfss://c@a.dfs.core.windows.net/t") is None
    assert local_log(str(tmp_path / "missing")) is None


def offsets_file(reservoir_version: int, starting: bool = False) -> str:
    """A Delta source's line in a streaming checkpoint's ``offsets/<batch>`` file, as Spark writes it."""
    delta = {"sourceVersion": 1, "reservoirId": "r", "reservoirVersion": reservoir_version, "index": -1,
             "isStartingVersion": starting}
    return "v1\n" + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}) + "\n" + json.dumps(delta)


def test_a_stage_restart_reads_from_the_end_of_the_batch_before_its_last(tmp_path: Path) -> None:
    checkpoint = tmp_path / "convert"
    assert resumes_at(str(checkpoint)) == 0  # nothing planned yet: it would read the table from its start
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    (checkpoint / "offsets" / "0").write_text(offsets_file(4, starting=True))
    assert resumes_at(str(checkpoint)) == 4
    for batch, version in ((1, 9), (2, 15)):
        (checkpoint / "offsets" / str(batch)).write_text(offsets_file(version))
        (checkpoint / "commits" / str(batch)).write_text("v1\n{}")
    assert (consumed_below(str(checkpoint)), resumes_at(str(checkpoint))) == (15, 9)
    (checkpoint / "offsets" / "3").write_text(offsets_file(21))  # planned, not committed
    assert (consumed_below(str(checkpoint)), resumes_at(str(checkpoint))) == (15, 15)


def test_the_log_keeps_each_writers_newest_mark_within_the_search_reach(tmp_path: Path) -> None:
    log = tmp_path / "_delta_log"
    log.mkdir()
    writers = {3: "c/ingest@q1", 5: "c/fused@q2", 6: "c/ingest@q3", 7: None, 8: "c/fused@q2", 9: None}
    for version in range(10):
        info = {"timestamp": 0, "operation": "WRITE"}
        if writers.get(version):
            info["userMetadata"] = batch_mark(writers[version], version)
        (log / f"{version:020d}.json").write_text(json.dumps({"commitInfo": info}) + '\n{"add": {}}\n')
    assert [(c.version, c.mark) for c in commits(log, 7, 9)] == [(7, None), (8, ("c/fused@q2", 8)), (9, None)]
    # ingest's newest mark is 6 (a later query of the same stage than 3's), fused's 8
    assert newest_marks_from(log, 9) == 6
    assert newest_marks_from(log, 5) == 3
    # a mark further back than a restart searches holds nothing
    assert newest_marks_from(log, 6 + MARK_REACH) == 8  # searched: 7 on
    assert newest_marks_from(log, 2) == 2
