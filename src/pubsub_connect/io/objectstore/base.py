"""The object store interface the archive connector relies on (see the package docstring for the
three properties every store must provide).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


class ObjectStoreError(RuntimeError):
    """The store cannot be reached or refuses an operation — one-line message for the user."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int


class ObjectStore(ABC):
    """Where archive objects go. Implementations: :class:`S3Store`, :class:`LocalStore`,
    :class:`VolumesStore`."""

    @abstractmethod
    def url(self, key: str = "") -> str:
        """A printable location of ``key`` (``s3://bucket/key`` or a path)."""

    @abstractmethod
    def check(self) -> None:
        """Fail with :class:`ObjectStoreError` when the target is unusable (no bucket, no access)."""

    @abstractmethod
    def put_bytes(self, key: str, data: bytes) -> None:
        """Write ``data`` as ``key`` atomically (replacing an existing object)."""

    @abstractmethod
    def put_file(self, key: str, path: str | Path) -> None:
        """Upload the local file ``path`` as ``key`` atomically (replacing an existing object)."""

    @abstractmethod
    def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of ``key`` (to the end when ``end`` is None): a ranged read."""

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every whole object whose key starts with ``prefix`` (never files being written)."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key`` (no error when it does not exist)."""

    def portable(self) -> ObjectStore:
        """This store as another process (a Spark executor, possibly another machine) must see
        it: settings that the current process resolved from its environment are made explicit,
        since the executor's environment is not the driver's. A local root needs nothing."""
        return self
