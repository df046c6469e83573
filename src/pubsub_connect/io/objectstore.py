"""Object stores for the archive sink: S3, local directories and Databricks Volumes.

Why one small interface: the archive connector's exactly-once guarantee rests on three store
properties, and each target provides them differently:

1. **Atomic whole objects** — a reader (or a restarted connector) never sees part of a file.
   S3: a single ``PutObject`` for small files, otherwise a multipart upload that is *completed
   only after every part was uploaded* (an interrupted upload stays invisible; it is aborted on
   errors, and a crash leaves an incomplete upload that a bucket lifecycle rule
   ``AbortIncompleteMultipartUpload`` removes). Local directories: write a temporary file in a
   hidden ``.tmp`` folder of the same root, ``fsync`` it, ``rename`` it over the final name,
   ``fsync`` the directory. Volumes (``/Volumes/...``, a FUSE mount backed by cloud storage):
   the same through the plain file API, tolerating the calls that mount does not implement.
2. **Deterministic overwrite** — writing a key again replaces the object, so a retry that
   rewrites the same name with the same bytes is harmless.
3. **Listing and ranged reads** — the connector resumes from what the store holds, and
   ``archive read`` fetches a single block by byte range.

Keys are ``/``-separated strings; a local store maps them below its root directory.

Stores are used in Spark executors, not only on the driver: a store object is pickled into the
tasks that write archive files, so it must carry everything those processes need.
:meth:`ObjectStore.portable` gives that copy (for S3, the credentials, region and endpoint the
driver resolved; a local root is just a path).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import socket
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from pubsub_connect.model.blockgzip import ArchiveName, key_prefix, parse_object_key

if TYPE_CHECKING:
    from pubsub_connect.config import ConnectorConfig

log = logging.getLogger(__name__)

#: S3's minimum part size (except the last part) is 5 MiB; 16 MiB parts keep the number of
#: requests low for the default 1 GiB files (64 parts) while bounding memory per part.
DEFAULT_PART_SIZE = 16 * 1024 * 1024
#: Files up to this size go up in one PutObject (atomic by itself, one request).
DEFAULT_MULTIPART_THRESHOLD = 16 * 1024 * 1024
MIN_PART_SIZE = 5 * 1024 * 1024

#: Hidden folder of a local/Volumes root holding files being written. Hidden so that listing
#: tools and Spark (which skips names starting with ``.`` or ``_``) never see partial files.
TMP_DIR = ".tmp"


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


# --------------------------------------------------------------------------------------------
# S3
# --------------------------------------------------------------------------------------------


def _s3_error(exc: BaseException, what: str) -> ObjectStoreError:
    """A one-line message for boto errors (no traceback, no request ids)."""
    code = ""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = str(response.get("Error", {}).get("Code", ""))
        message = str(response.get("Error", {}).get("Message", "")) or str(exc)
    else:
        message = str(exc)
    detail = f"{code}: {message}" if code else message
    return ObjectStoreError(f"{what}: {detail}")


@dataclass(frozen=True)
class S3Credentials:
    """An access key pair (and session token) resolved once, to hand to another process.
    The secret parts never appear in a ``repr`` (logs, Spark plans)."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


class S3Store(ObjectStore):
    """An S3 bucket (or any S3 API: MinIO, moto, R2 …) through boto3.

    Credentials come from boto3's default chain (environment, shared config/credentials files,
    SSO, container/instance roles), as the original connector used the AWS SDK's default
    provider, unless ``credentials`` are given (see :meth:`portable`). ``endpoint`` defaults to
    AWS (or ``AWS_ENDPOINT_URL_S3``); ``path_style`` forces ``https://host/bucket/key``
    addressing (S3-compatible stores, tests).
    """

    def __init__(self, bucket: str, *, endpoint: str | None = None, path_style: bool = False,
                 region: str | None = None, part_size: int = DEFAULT_PART_SIZE,
                 multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD, client: Any = None,
                 credentials: S3Credentials | None = None):
        if part_size < MIN_PART_SIZE:
            raise ValueError(f"S3 parts must be at least {MIN_PART_SIZE} bytes, got {part_size}")
        self.bucket = bucket
        self.endpoint = endpoint
        self.path_style = path_style
        self.region = region
        self.part_size = part_size
        self.multipart_threshold = multipart_threshold
        self.credentials = credentials
        self._client = client

    def __getstate__(self) -> dict[str, Any]:
        # A boto3 client holds sockets and locks: each process builds its own from the settings.
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def __repr__(self) -> str:
        return (f"S3Store(bucket={self.bucket!r}, endpoint={self.endpoint!r}, path_style={self.path_style}, "
                f"region={self.region!r}, credentials={self.credentials!r})")

    def portable(self) -> S3Store:
        """A copy with the credentials, region and endpoint that boto3 resolves *here*.

        Why: Spark executors are other processes, on a cluster other machines, whose environment
        is not the driver's (environment variables set after Spark started, a profile only the
        driver has). Frozen credentials from a refreshing source (a role) expire; callers take a
        fresh copy for every micro-batch. When this process finds no credentials at all, the copy
        has none either and the executors use their own default chain (e.g. an instance profile).
        """
        import boto3

        session = boto3.session.Session()
        credentials = self.credentials
        if credentials is None:
            found = session.get_credentials()
            if found is not None:
                frozen = found.get_frozen_credentials()
                credentials = S3Credentials(frozen.access_key, frozen.secret_key, frozen.token)
        endpoint = (self.endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
                    or None)
        return S3Store(self.bucket, endpoint=endpoint, path_style=self.path_style,
                       region=self.region or session.region_name, part_size=self.part_size,
                       multipart_threshold=self.multipart_threshold, credentials=credentials)

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            config = Config(
                s3={"addressing_style": "path" if self.path_style else "auto"},
                retries={"max_attempts": 5, "mode": "standard"},
            )
            keys: dict[str, str | None] = {}
            if self.credentials is not None:
                keys = {"aws_access_key_id": self.credentials.access_key_id,
                        "aws_secret_access_key": self.credentials.secret_access_key,
                        "aws_session_token": self.credentials.session_token}
            self._client = boto3.session.Session().client(
                "s3", endpoint_url=self.endpoint or None, region_name=self.region or None, config=config, **keys
            )
        return self._client

    def url(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key}"

    def check(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchBucket"):
                raise ObjectStoreError(f"s3.bucket={self.bucket!r} does not exist"
                                       f"{' at ' + self.endpoint if self.endpoint else ''}") from None
            if code in ("403", "AccessDenied"):
                raise ObjectStoreError(f"s3.bucket={self.bucket!r}: access denied for the current AWS "
                                       "credentials") from None
            raise _s3_error(exc, f"s3.bucket={self.bucket!r}") from None
        except BotoCoreError as exc:
            raise ObjectStoreError(f"s3.bucket={self.bucket!r}: {exc}") from None

    def put_bytes(self, key: str, data: bytes) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data)
        except (BotoCoreError, ClientError) as exc:
            raise _s3_error(exc, f"cannot write {self.url(key)}") from None

    def put_file(self, key: str, path: str | Path) -> None:
        size = os.path.getsize(path)
        with open(path, "rb") as source:
            if size <= self.multipart_threshold:
                self.put_bytes(key, source.read())
            else:
                self._multipart(key, source)

    def _multipart(self, key: str, source: BinaryIO) -> None:
        """Upload in parts; the object appears only when ``CompleteMultipartUpload`` succeeds.
        Any failure (including KeyboardInterrupt) aborts the upload so no parts are left behind."""
        from botocore.exceptions import BotoCoreError, ClientError

        client = self.client
        try:
            upload_id = client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
        except (BotoCoreError, ClientError) as exc:
            raise _s3_error(exc, f"cannot start an upload of {self.url(key)}") from None
        parts: list[dict[str, Any]] = []
        try:
            number = 1
            while True:
                body = source.read(self.part_size)
                if not body and parts:
                    break
                response = client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload_id,
                                              PartNumber=number, Body=body)
                parts.append({"PartNumber": number, "ETag": response["ETag"]})
                number += 1
                if len(body) < self.part_size:
                    break
            client.complete_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id,
                                             MultipartUpload={"Parts": parts})
        except BaseException as exc:
            with contextlib.suppress(Exception):
                client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            if isinstance(exc, (BotoCoreError, ClientError)):
                raise _s3_error(exc, f"cannot upload {self.url(key)}") from None
            raise

    def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if start or end is not None:
            if end is not None and end <= start:
                return b""
            kwargs["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        try:
            return bytes(self.client.get_object(**kwargs)["Body"].read())
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404"):
                raise ObjectStoreError(f"{self.url(key)} does not exist") from None
            raise _s3_error(exc, f"cannot read {self.url(key)}") from None
        except BotoCoreError as exc:
            raise _s3_error(exc, f"cannot read {self.url(key)}") from None

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        from botocore.exceptions import BotoCoreError, ClientError

        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    yield ObjectInfo(item["Key"], int(item["Size"]))
        except (BotoCoreError, ClientError) as exc:
            raise _s3_error(exc, f"cannot list {self.url(prefix)}") from None

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code", "")) in ("404", "NoSuchKey", "NotFound"):
                return False
            raise _s3_error(exc, f"cannot read {self.url(key)}") from None
        return True

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=key)

    def incomplete_uploads(self, prefix: str = "") -> list[str]:
        """Keys of multipart uploads started but neither completed nor aborted (crash leftovers;
        invisible to readers, billed until a lifecycle rule or :meth:`abort_incomplete` removes them)."""
        response = self.client.list_multipart_uploads(Bucket=self.bucket, Prefix=prefix)
        return [u["Key"] for u in response.get("Uploads", [])]

    def abort_incomplete(self, prefix: str = "") -> int:
        """Abort every incomplete multipart upload under ``prefix``; returns how many. Only safe
        when no other writer is uploading under that prefix."""
        response = self.client.list_multipart_uploads(Bucket=self.bucket, Prefix=prefix)
        uploads = response.get("Uploads", [])
        for upload in uploads:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=upload["Key"],
                                               UploadId=upload["UploadId"])
        return len(uploads)


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
            if _pid_alive(int(parts[1])):
                continue
            with contextlib.suppress(OSError):
                entry.unlink()
                removed += 1
        return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


def open_store(config: ConnectorConfig) -> ObjectStore:
    """The archive connector's target from its config (``s3.*`` keys or ``output.path``)."""
    bucket = config.get("s3.bucket")
    if bucket:
        return S3Store(bucket, endpoint=config.get("s3.endpoint"),
                       path_style=bool(config.get("s3.path_style")), region=config.get("s3.region"))
    return local_store(config.get("output.path"))


def store_for_location(location: str, *, endpoint: str | None = None, path_style: bool | None = None,
                       region: str | None = None) -> tuple[ObjectStore, str]:
    """``s3://bucket/key`` or a file path → (store, key). For S3 the endpoint defaults to
    ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL`` (boto3 reads them) and path-style addressing is
    used whenever an explicit endpoint is given, the usual need of S3-compatible stores."""
    if location.startswith("s3://") or location.startswith("s3a://"):
        bucket, _, key = location.split("://", 1)[1].partition("/")
        if not bucket or not key:
            raise ObjectStoreError(f"{location!r}: expected s3://BUCKET/KEY")
        custom = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        style = bool(custom) if path_style is None else path_style
        return S3Store(bucket, endpoint=endpoint, path_style=style, region=region), key
    path = Path(location[len("file://"):] if location.startswith("file://") else location)
    return local_store(path.parent), path.name


# --------------------------------------------------------------------------------------------
# Archive files per topic-partition
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArchiveObject:
    """A complete archive file in a store: its parsed name and sizes."""

    name: ArchiveName
    size: int
    has_index: bool


def list_archive_files(store: ObjectStore, prefix: str = "") -> dict[tuple[str, int], list[ArchiveObject]]:
    """Archive files under ``prefix`` grouped by (topic, partition), ordered by first offset.

    A file counts only when its ``.gz`` exists (the connector writes the index first and the
    ``.gz`` last, so a visible ``.gz`` is a committed file); an index without its ``.gz`` is a
    crash leftover and is ignored (the retry rewrites both under the same names). ``prefix`` is
    ``s3.prefix``: ``systest`` means the keys under ``systest/``, as for the original.
    """
    prefix = key_prefix(prefix)
    gz: dict[str, tuple[ArchiveName, int]] = {}
    indexes: set[str] = set()
    for info in store.list(prefix):
        name = parse_object_key(info.key, prefix)
        if name is None:
            continue
        if name.suffix == ".gz":
            gz[name.gz_key] = (name, info.size)
        else:
            indexes.add(name.gz_key)
    grouped: dict[tuple[str, int], list[ArchiveObject]] = {}
    for key, (name, size) in gz.items():
        grouped.setdefault((name.topic, name.partition), []).append(ArchiveObject(name, size, key in indexes))
    for files in grouped.values():
        files.sort(key=lambda f: (f.name.first_offset, f.name.date))
    return grouped
