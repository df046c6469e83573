"""Spark streaming checkpoints as Kafka Connect offsets: read where a stage is, or replace it.

Why read the files directly: ``pubsub-connect offsets`` and the worker's offsets endpoints must
answer for a stopped connector without starting a Spark session. A checkpoint keeps, per
micro-batch N, ``offsets/N`` (written when the batch is planned: the version line, the batch
metadata, then one JSON line per source with the offsets the batch reads up to) and ``commits/N``
(written when the batch is done). The position of a stage is the source line of the newest
offsets file that has a commit: everything before it is durably in the stage's table.

Moving a position is done by replacing the checkpoint, never by editing it: a new checkpoint has
a new query id, so the stage's Delta transaction ids (``<name>/<stage>@<query id>``) start afresh
and the exactly-once bookkeeping stays consistent; the stage starts from the position it is
given instead (``startingOffsets``, or the system's own cursor).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


class CheckpointError(RuntimeError):
    """A checkpoint cannot be read or replaced; ``str()`` is one line."""


#: Reads a whole text file at a remote location (Spark's reader where no local path exists).
TextReader = Callable[[str], str]


def _remote(checkpoint: str) -> bool:
    return "://" in checkpoint and not checkpoint.startswith("file:")


def is_remote(checkpoint: str) -> bool:
    """Whether the checkpoint is at a URL (``abfss://…``, ``s3://…``) rather than a path (a local
    folder, or a ``/Volumes`` or ``/dbfs`` mount): files beside it cannot be read or written here."""
    return _remote(checkpoint)


def _local(checkpoint: str) -> Path:
    if checkpoint.startswith("file:"):
        return Path(checkpoint.removeprefix("file:").removeprefix("//"))
    if _remote(checkpoint):
        raise CheckpointError(f"checkpoint {checkpoint}: only local paths (and /Volumes or /dbfs mounts) can be "
                              "read or replaced here")
    return Path(checkpoint)


def _batch_ids(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def exists(checkpoint: str) -> bool:
    """Whether the stage has ever planned a micro-batch from this checkpoint."""
    return bool(_batch_ids(_local(checkpoint) / "offsets"))


def started(checkpoint: str) -> bool:
    """Whether the stage already has a position of its own in this checkpoint. A remote checkpoint
    (``scheme://``) is taken to have one: only a local one can be looked at without Spark."""
    return True if _remote(checkpoint) else exists(checkpoint)


def _source_line(text: str, where: str) -> Any:
    lines = text.splitlines()
    if len(lines) < 3:
        raise CheckpointError(f"{where} has no source offsets")
    try:
        return json.loads(lines[2])
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{where} is not JSON ({exc})") from None


def read_text(checkpoint: str, name: str, remote: TextReader | None = None) -> str:
    """A file of the checkpoint (``metadata``, ``offsets/3``…): directly from a local path,
    through ``remote`` from any other location."""
    if not _remote(checkpoint):
        return (_local(checkpoint) / name).read_text()
    if remote is None:
        raise CheckpointError(f"checkpoint {checkpoint}: a remote checkpoint needs a reader")
    return remote(f"{checkpoint.rstrip('/')}/{name}")


def batch_offsets(checkpoint: str, batch_id: int, remote: TextReader | None = None) -> Any:
    """The offsets micro-batch ``batch_id`` reads up to (its ``offsets`` file, written before the
    batch runs), for use while the batch is running."""
    return _source_line(read_text(checkpoint, f"offsets/{batch_id}", remote),
                        f"checkpoint {checkpoint}: offsets/{batch_id}")


def committed_source_offsets(checkpoint: str) -> Any | None:
    """The first source's offsets (parsed JSON) up to which the stage has committed, or None
    when no micro-batch has completed."""
    root = _local(checkpoint)
    committed = set(_batch_ids(root / "commits"))
    for batch in reversed(_batch_ids(root / "offsets")):
        if batch not in committed:
            continue
        return _source_line((root / "offsets" / str(batch)).read_text(), f"checkpoint {checkpoint}: offsets/{batch}")
    return None


def newest_source_offsets(checkpoint: str, count: int) -> list[Any]:
    """The first source's offsets (parsed JSON) of the ``count`` newest micro-batches the stage
    planned, committed or not, newest first (none without a local checkpoint)."""
    if _remote(checkpoint):
        return []
    root = _local(checkpoint)
    return [_source_line((root / "offsets" / str(batch)).read_text(), f"checkpoint {checkpoint}: offsets/{batch}")
            for batch in reversed(_batch_ids(root / "offsets")[-count:])]


def initial_source_offsets(checkpoint: str) -> Any | None:
    """The offsets the first source started from (``sources/0/0``, written by Spark's Kafka source
    before its first micro-batch: the one batch whose progress has no start), or None when the
    checkpoint is remote or has none."""
    if _remote(checkpoint):
        return None
    try:
        text = (_local(checkpoint) / "sources" / "0" / "0").read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        return json.loads(text.splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return None


def remove(checkpoint: str) -> bool:
    """Delete the checkpoint so the stage starts afresh; returns whether there was one."""
    root = _local(checkpoint)
    if not root.exists():
        return False
    shutil.rmtree(root)
    return True


def lite_start_path(checkpoint: str) -> Path:
    """Beside a Lite source's pull checkpoint: the start its offsets were moved to, kept until the
    pull stage has a checkpoint again (a new checkpoint otherwise never starts behind bronze)."""
    return _local(checkpoint).parent / f"{_local(checkpoint).name}.start.json"


def write_lite_start(checkpoint: str, positions: dict[int, int]) -> None:
    write_json(lite_start_path(checkpoint), {str(p): o for p, o in sorted(positions.items())})


def beside(checkpoint: str, name: str) -> Path:
    """A file beside a connector's stage checkpoints (``<checkpoints>/<connector>/<name>``): the
    connector's bookkeeping that no single stage owns, such as its pipeline mode."""
    return _local(checkpoint).parent / name


def read_json(path: Path) -> Any | None:
    """A bookkeeping file's JSON, None when there is none."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def write_json(path: Path, value: Any) -> None:
    """Replace a bookkeeping file at once (a crash leaves the old content or the new, never half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(".tmp")
    temp.write_text(json.dumps(value))
    temp.replace(path)
