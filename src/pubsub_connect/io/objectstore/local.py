"""Local directories and Databricks Volumes as object stores: a temporary file in a hidden folder
of the same root, renamed over the final name (Volumes: written directly where the mount
refuses the rename).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from pubsub_connect.io.objectstore.base import ObjectInfo, ObjectStore, ObjectStoreError
from pubsub_connect.io.processes import pid_alive

if TYPE_CHECKING:
    pass


log = logging.getLogger(__name__)

#: Hidden folder of a local/Volumes root holding files being written. Hidden so that listing
#: tools and Spark (which skips names starting with ``.`` or ``_``) never see partial files.
TMP_DIR = ".tmp"

# --------------------------------------------------------------------------------------------
# Local directories and Databricks Volumes
# --------------------------------------------------------------------------------------------


def _fsync_dir(path: Path, tolerant: bool) -> None:
    """Persist a rename: the directory entry must reach the disk too, not only the file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        if tolerant:
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not tolerant:
            raise
    finally:
        os.close(fd)


class LocalStore(ObjectStore):
    """A directory tree: key ``a/b.gz`` is ``<root>/a/b.gz``.

    Temporary files are named ``<host>-<pid>-<random>`` under ``<root>/.tmp`` (same file
    system as the targets, so the final ``rename`` is atomic); :meth:`cleanup_temp` removes the
    ones left by dead processes of this host (a ``kill -9`` between write and rename).
    """

    #: Volumes: fsync/rename may be unimplemented by the mount; see :class:`VolumesStore`.
    tolerant = False

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def url(self, key: str = "") -> str:
        return str(self.root / key) if key else str(self.root)

    def _path(self, key: str) -> Path:
        parts = [p for p in key.split("/") if p]
        if any(p in (".", "..") for p in parts) or not parts:
            raise ObjectStoreError(f"invalid object key {key!r}")
        return self.root.joinpath(*parts)

    def check(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ObjectStoreError(f"output.path={str(self.root)!r}: cannot create it ({exc.strerror})") \
                from None
        if not os.access(self.root, os.W_OK):
            raise ObjectStoreError(f"output.path={str(self.root)!r} is not writable")

    def _tmp_path(self) -> Path:
        tmp = self.root / TMP_DIR
        tmp.mkdir(parents=True, exist_ok=True)
        return tmp / f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex}"

    def _publish(self, tmp: Path, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, target)
        _fsync_dir(target.parent, self.tolerant)

    def _write_tmp(self, write: Any) -> Path:
        tmp = self._tmp_path()
        try:
            with open(tmp, "wb") as out:
                write(out)
                out.flush()
                try:
                    os.fsync(out.fileno())
                except OSError:
                    if not self.tolerant:
                        raise
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        return tmp

    def put_bytes(self, key: str, data: bytes) -> None:
        target = self._path(key)
        self._put(target, lambda out: out.write(data))

    def put_file(self, key: str, path: str | Path) -> None:
        target = self._path(key)

        def copy(out: BinaryIO) -> None:
            with open(path, "rb") as source:
                shutil.copyfileobj(source, out, 1 << 20)

        self._put(target, copy)

    def _put(self, target: Path, write: Any) -> None:
        try:
            tmp = self._write_tmp(write)
            try:
                self._publish(tmp, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    tmp.unlink()
                raise
        except OSError as exc:
            raise ObjectStoreError(f"cannot write {target}: {exc.strerror or exc}") from None

    def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        path = self._path(key)
        try:
            with open(path, "rb") as source:
                source.seek(start)
                return source.read() if end is None else source.read(max(0, end - start))
        except FileNotFoundError:
            raise ObjectStoreError(f"{path} does not exist") from None
        except OSError as exc:
            raise ObjectStoreError(f"cannot read {path}: {exc.strerror}") from None

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Like S3: whole objects under ``prefix`` in key order; hidden names (the ``.tmp``
        folder, other tools' temp files) are never listed."""
        if not self.root.is_dir():
            return
        # Walk only below the deepest directory the prefix names.
        directory, _, _ = prefix.rpartition("/")
        start = self.root.joinpath(*[p for p in directory.split("/") if p]) if directory else self.root
        if not start.is_dir():
            return
        found: list[ObjectInfo] = []
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel_dir = Path(dirpath).relative_to(self.root).as_posix()
            for name in filenames:
                if name.startswith("."):
                    continue
                key = name if rel_dir == "." else f"{rel_dir}/{name}"
                if key.startswith(prefix):
                    with contextlib.suppress(FileNotFoundError):
                        found.append(ObjectInfo(key, os.path.getsize(os.path.join(dirpath, name))))
        found.sort(key=lambda info: info.key)
        yield from found

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()

    def cleanup_temp(self) -> int:
        """Remove temporary files of dead processes on this host; returns how many."""
        tmp = self.root / TMP_DIR
        if not tmp.is_dir():
            return 0
        host = socket.gethostname()
        removed = 0
        for entry in tmp.iterdir():
            parts = entry.name.rsplit("-", 2)  # <host>-<pid>-<uuid>; host names may contain '-'
            if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
                continue
            if pid_alive(int(parts[1])):
                continue
            with contextlib.suppress(OSError):
                entry.unlink()
                removed += 1
        return removed


#: errno values a FUSE mount returns for calls it does not implement.
_UNSUPPORTED = {errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.EPERM, errno.EXDEV}


class VolumesStore(LocalStore):
    """A Databricks Unity Catalog Volume (``/Volumes/<catalog>/<schema>/<volume>/…``) through the
    plain file API, as Databricks recommends for non-Spark writers.

    The Volumes FUSE mount is backed by cloud object storage: it supports sequential writes of
    whole files but not appends or random writes, and some calls (``fsync``, ``rename``) may be
    unimplemented (delta-rs reports ``ENOSYS`` for its rename). So: write the temporary file
    sequentially, rename it; if the mount refuses the rename, write the final name directly in
    one sequential pass — the mount uploads a file when it is closed, so readers still see a
    whole object, just without the temp-file indirection.
    """

    tolerant = True

    def _publish(self, tmp: Path, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(tmp, target)
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED:
                raise
            log.debug("rename unsupported on %s (%s): writing %s directly", self.root, exc, target)
            with open(tmp, "rb") as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
            with contextlib.suppress(OSError):
                tmp.unlink()


def is_volumes_path(path: str) -> bool:
    return path == "/Volumes" or path.startswith("/Volumes/")


def local_store(path: str | Path) -> LocalStore:
    """A :class:`VolumesStore` for ``/Volumes/...`` paths, else a :class:`LocalStore`."""
    text = str(path)
    if text.startswith("file://"):
        text = text[len("file://"):]
    return VolumesStore(text) if is_volumes_path(text) else LocalStore(text)
