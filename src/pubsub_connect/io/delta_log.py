"""A local table's Delta log, trimmed to the versions someone still reads.

Why: every snapshot of a Delta table — one per append, so one per micro-batch of each stage —
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

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

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
    versions = []
    for entry in os.scandir(log):
        match = _COMMIT.fullmatch(entry.name)
        if match and entry.name.endswith(".json"):
            try:
                if entry.stat().st_mtime >= epoch_s:
                    versions.append(int(match.group(1)))
            except FileNotFoundError:  # removed meanwhile
                pass
    return min(versions) if versions else None


def commit_user_metadata(log: Path, first: int, last: int) -> dict[int, str | None]:
    """The ``userMetadata`` of each commit from ``first`` to ``last`` the log still has (from its
    ``commitInfo`` action; None where it has none)."""
    found: dict[int, str | None] = {}
    for version in range(max(first, 0), last + 1):
        try:
            lines = (log / f"{version:020d}.json").read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:  # before the log's first version
            continue
        info = next((json.loads(line)["commitInfo"] for line in lines if line.startswith('{"commitInfo"')), {})
        found[version] = info.get("userMetadata")
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
