"""One process at a time per connector: a lock file under ``storage.root``.

Why: two processes running the same connector would race on its checkpoints, and moving a
connector's offsets while it runs would be undone by its next batch. ``pubsub-connect run`` and
the worker hold ``<storage.root>/connect/locks/<name>.<stage>.lock`` for each stage they run;
the offsets tools take the lock of the stage whose checkpoint is the position before they touch
it. The lock is an ``flock``: the kernel releases it
when its process dies, even by ``kill -9``, so a crash never leaves a connector locked.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence
from pathlib import Path


class ConnectorBusyError(RuntimeError):
    """The connector is running in another process (or another runner of this one)."""


class StageLock:
    """The lock of one stage of one connector."""

    def __init__(self, storage_root: str, name: str, stage: str):
        self.what = f"connector {name} (stage {stage})"
        self.path = None if "://" in storage_root else \
            Path(storage_root).resolve() / "connect" / "locks" / f"{name}.{stage}.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or say who holds it (remote storage roots are not locked)."""
        if self.path is None or self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ConnectorBusyError(f"{self.what} is running (pid {holder}); stop it first") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class ConnectorLock:
    """The locks of the stages a process runs (``run --stage`` runs some stages of a connector in
    one process and others in another, as the tasks of a job do)."""

    def __init__(self, storage_root: str, name: str, stages: Sequence[str]):
        self.locks = [StageLock(storage_root, name, stage) for stage in stages]

    def acquire(self) -> ConnectorLock:
        try:
            for lock in self.locks:
                lock.acquire()
        except ConnectorBusyError:
            self.release()
            raise
        return self

    def release(self) -> None:
        for lock in self.locks:
            lock.release()

    def __enter__(self) -> ConnectorLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
