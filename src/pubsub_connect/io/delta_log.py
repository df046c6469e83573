"""A local table's Delta log: its commits read, and the log trimmed to the versions someone still reads.

Reading: the explorer's throughput, ``trace`` (which commit added a row's file) and maintenance
(which batch each writing stage marked last) all read ``<version>.json`` files; :func:`parse_commit`
is the one reader of their actions, so the three agree on what a commit says.

Trimming: every snapshot of a Delta table — one per append, so one per micro-batch of each stage —
lists the table's ``_delta_log`` folder. On an object store Delta lists from the newest
checkpoint's key on; on a local file system Hadoop lists the whole folder and stats every entry
(about 11 µs each on two cores: ``benchmarks/delta_log.py``). Each commit leaves four entries (its
JSON, its checksum, and the local file system's ``.crc`` beside each), and Delta removes them only
after ``delta.logRetentionDuration`` — 30 days by default, rounded down to whole days, checked
when it writes a checkpoint. A stage that commits every second thus lists 345,600 more entries for
each day it has run, about four seconds more per commit, until the thirty days are reached.

:func:`trim` removes every file of the versions before a complete checkpoint: what is kept reads
exactly as before (the checkpoint holds the table's state at its version, and every commit after
it is kept), so time travel, ``DESCRIBE HISTORY`` and streaming readers reach any version from the
checkpoint on. Which checkpoint is the caller's decision (the versions its readers still need).
Tables with v2 checkpoints (sidecar files) are left alone: their files are shared across versions.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pubsub_connect.io.batch_marks import parse_batch_mark

#: ``<version>.json`` (a commit) and ``<version>.crc`` (its checksum).
_COMMIT = re.compile(r"(\d{20})\.(?:json|crc)")
#: A classic checkpoint: ``<version>.checkpoint.parquet`` or part ``i`` of ``n`` of one.
_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet")
#: A v2 checkpoint, ``<version>.checkpoint.<uuid>.json|parquet``: sidecars make its files shared.
_V2_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(?:json|parquet)")
#: A log compaction of commits ``first`` to ``last``.
_COMPACTED = re.compile(r"(\d{20})\.(\d{20})\.compacted\.json")


@dataclass(frozen=True)
class LogTrim:
    """What :func:`trim` did: the files removed, the version the log now starts at (its oldest
    checkpoint; None when it removed nothing), the files left, and why it removed nothing where
    that is worth saying."""

    removed: int
    starts_at: int | None
    files: int
    note: str | None = None


def local_log(location: str) -> Path | None:
    """The ``_delta_log`` folder of a table at ``location`` when it is on this machine's file
    system (a path or a ``file:`` URL); None for any other store."""
    path = location.removeprefix("file://").removeprefix("file:")
    if "://" in path or not path.startswith("/"):
        return None
    log = Path(path) / "_delta_log"
    return log if log.is_dir() else None


def _own_name(name: str) -> str:
    """The log file an entry belongs to: Hadoop's local file system writes ``.<name>.crc`` beside
    each file."""
    return name[1:-4] if name.startswith(".") and name.endswith(".crc") else name


def _version_of(name: str) -> int | None:
    """The newest version a log file belongs to (None: not a versioned file, e.g. ``_last_checkpoint``
    or a write's temporary file)."""
    own = _own_name(name)
    for pattern in (_COMMIT, _CHECKPOINT, _V2_CHECKPOINT):
        match = pattern.fullmatch(own)
        if match:
            return int(match.group(1))
    compacted = _COMPACTED.fullmatch(own)
    return int(compacted.group(2)) if compacted else None


def complete_checkpoints(names: list[str]) -> list[int]:
    """The versions with a complete classic checkpoint among ``names`` (every part of a multi-part
    one), oldest first."""
    parts: dict[int, set[int]] = {}
    expected: dict[int, int] = {}
    for name in names:
        match = _CHECKPOINT.fullmatch(name)
        if not match:
            continue
        version = int(match.group(1))
        part, of = (int(match.group(2)), int(match.group(3))) if match.group(2) else (1, 1)
        parts.setdefault(version, set()).add(part)
        expected[version] = of
    return sorted(v for v, found in parts.items() if found == set(range(1, expected[v] + 1)))


def last_checkpoint(log: Path) -> int | None:
    """The version ``_last_checkpoint`` names: Delta writes it after the checkpoint is whole."""
    try:
        return int(json.loads((log / "_last_checkpoint").read_text(encoding="utf-8"))["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def first_version_since(log: Path, epoch_s: float) -> int | None:
    """The oldest commit written at or after ``epoch_s`` (its file's time, as Delta's own log
    clean-up dates it); None when every commit is older."""
    for version in commit_versions(log):
        try:
            if (log / f"{version:020d}.json").stat().st_mtime >= epoch_s:
                return version
        except FileNotFoundError:  # removed meanwhile
            pass
    return None


@dataclass(frozen=True)
class Commit:
    """One Delta table version: when it was committed, what it did, how many rows it added, and
    the stage micro-batch it appended (``app_id``, ``batch_id``: its mark, else its transaction)."""

    version: int
    timestamp: dt.datetime
    operation: str
    rows: int | None
    app_id: str | None = None
    batch_id: int | None = None
    #: The commit's ``userMetadata`` as written (a stage's batch mark, or a user's own text).
    user_metadata: str | None = None

    @property
    def mark(self) -> tuple[str, int] | None:
        """The stage batch the commit's mark names (None: unmarked, e.g. a maintenance commit)."""
        return parse_batch_mark(self.user_metadata)


#: Where a commit's added rows are counted, by writer: Spark's writes, Delta's Python writers.
_ROW_METRICS = ("numOutputRows", "num_added_rows", "numAddedRows")


def rows_from_metrics(metrics: Mapping[str, Any] | None) -> int | None:
    """The rows a commit added, from its ``operationMetrics`` (None: no writer's key is there)."""
    for key in _ROW_METRICS:
        if metrics and metrics.get(key) is not None:
            return int(metrics[key])
    return None


def stage_batch(txn_app_id: str | None, txn_version: object,
                user_metadata: str | None) -> tuple[str | None, int | None]:
    """The stage micro-batch a commit appended: its mark (``userMetadata``), or the Delta
    transaction id of a table written before marks existed (and by the fallback engine)."""
    mark = parse_batch_mark(user_metadata)
    if mark is not None:
        return mark
    return txn_app_id, int(str(txn_version)) if txn_version is not None else None


def parse_commit(version: int, text: str) -> Commit:
    """One ``<version>.json`` file (newline-delimited actions). Rows come from the writer's
    metrics, else from the added files' statistics (writers that record no metrics)."""
    info: dict[str, Any] = {}
    txn: dict[str, Any] = {}
    stats_rows: int | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "commitInfo" in action:
            info = action["commitInfo"]
        elif "txn" in action:
            txn = action["txn"]
        elif "add" in action and action["add"].get("stats"):
            records = json.loads(action["add"]["stats"]).get("numRecords")
            if records is not None:
                stats_rows = (stats_rows or 0) + int(records)
    rows = rows_from_metrics(info.get("operationMetrics"))
    if rows is None:
        rows = stats_rows
    stamp = dt.datetime.fromtimestamp(int(info.get("timestamp") or 0) / 1000, dt.timezone.utc)
    user_metadata = info.get("userMetadata")
    app_id, batch_id = stage_batch(txn.get("appId"), txn.get("version"), user_metadata)
    return Commit(version, stamp, str(info.get("operation", "")), rows, app_id, batch_id, user_metadata)


def commit_versions(log: Path) -> list[int]:
    """The versions whose commit file the log still has, oldest first."""
    return sorted(int(entry.name[:20]) for entry in os.scandir(log)
                  if _COMMIT.fullmatch(entry.name) and entry.name.endswith(".json"))


def commits(log: Path, first: int = 0, last: int | None = None) -> list[Commit]:
    """The commits from ``first`` to ``last`` (the newest when None) the log still has, oldest first."""
    found = []
    for version in commit_versions(log):
        if version < first or (last is not None and version > last):
            continue
        try:
            text = (log / f"{version:020d}.json").read_text(encoding="utf-8")
        except FileNotFoundError:  # trimmed meanwhile
            continue
        found.append(parse_commit(version, text))
    return found


def trim(log: Path, keep_from: int) -> LogTrim:
    """Remove the files of every version before the newest complete checkpoint at or before
    ``keep_from`` (and at or before the one ``_last_checkpoint`` names, which writers start from)."""
    names = os.listdir(log)
    if (log / "_sidecars").exists() or any(_V2_CHECKPOINT.fullmatch(_own_name(n)) for n in names):
        return LogTrim(0, None, len(names), "Delta log not trimmed: the table has v2 checkpoints")
    newest = last_checkpoint(log)
    candidates = [v for v in complete_checkpoints(names) if newest is not None and v <= min(keep_from, newest)]
    if not candidates:
        return LogTrim(0, None, len(names))
    start = candidates[-1]
    removed = 0
    for name in names:
        version = _version_of(name)
        if version is not None and version < start:
            try:
                (log / name).unlink()
                removed += 1
            except FileNotFoundError:  # Delta's own clean-up got there first
                pass
    return LogTrim(removed, start if removed else None, len(names) - removed)


_INTERVAL = re.compile(r"\s*(?:interval\s+)?(\d+)\s*(second|minute|hour|day|week)s?\s*", re.IGNORECASE)
_UNIT_MS = {"second": 1_000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000, "week": 604_800_000}


def interval_ms(text: str) -> int | None:
    """A Delta interval property (``interval 30 days``) in milliseconds; None when it is not one
    number of one unit."""
    match = _INTERVAL.fullmatch(text)
    return int(match.group(1)) * _UNIT_MS[match.group(2).lower()] if match else None
