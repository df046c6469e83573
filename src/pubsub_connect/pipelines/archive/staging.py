"""Staging directories under ``local.buffer.dir``: one per run (its checkpoint) and per task
(files being compressed).
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from pathlib import Path

from pubsub_connect.io.processes import pid_alive


def new_staging_dir(buffer_dir: Path, connector: str, kind: str = "run") -> Path:
    """A fresh ``<buffer>/<connector>/<kind>-<host>-<pid>-<id>`` directory (``run``: the driver's,
    for the per-run checkpoint; ``task``: a task's, for files being compressed). Removes the ones
    left by dead processes of this host (their content is never reused: the store is the source
    of truth)."""
    base = buffer_dir / connector
    base.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    for entry in base.iterdir():
        parts = entry.name.rsplit("-", 2)
        if (entry.is_dir() and len(parts) == 3 and parts[0] in (f"run-{host}", f"task-{host}")
                and parts[1].isdigit() and not pid_alive(int(parts[1]))):
            shutil.rmtree(entry, ignore_errors=True)
    staging = base / f"{kind}-{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    return staging
