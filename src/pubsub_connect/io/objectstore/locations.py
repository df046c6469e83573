"""Which store a connector's config or a location string (``s3://…``, a path, ``/Volumes/…``)
names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from pubsub_connect.io.objectstore.base import ObjectStore, ObjectStoreError
from pubsub_connect.io.objectstore.local import local_store
from pubsub_connect.io.objectstore.s3 import S3Store

if TYPE_CHECKING:
    from pubsub_connect.config.loader import ConnectorConfig


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
