"""An S3 bucket (or any S3 API) as an object store: single puts for small files, multipart
uploads completed only once every part is up.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from pubsub_connect.io.objectstore.base import ObjectInfo, ObjectStore, ObjectStoreError

if TYPE_CHECKING:
    pass


#: S3's minimum part size (except the last part) is 5 MiB; 16 MiB parts keep the number of
#: requests low for the default 1 GiB files (64 parts) while bounding memory per part.
DEFAULT_PART_SIZE = 16 * 1024 * 1024
#: Files up to this size go up in one PutObject (atomic by itself, one request).
DEFAULT_MULTIPART_THRESHOLD = 16 * 1024 * 1024
MIN_PART_SIZE = 5 * 1024 * 1024

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
