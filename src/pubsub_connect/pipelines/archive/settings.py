"""Settings of the archive stage (``ArchiveSettings``) and its errors."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pubsub_connect.model.blockgzip.names import key_prefix
from pubsub_connect.model.blockgzip.rotation import RotationPolicy
from pubsub_connect.pipelines.context import ConnectorError

if TYPE_CHECKING:
    from pubsub_connect.config.loader import ConnectorConfig

TopicPartition = tuple[str, int]


class ArchiveReadError(ConnectorError):
    """``archive read`` cannot serve the request (offset not in the file, no index, unreachable
    store…). A :class:`ConnectorError`, so the CLI prints its one-line message."""


class ArchiveWriteError(ConnectorError):
    """A task cannot write archive files (no staging directory on its host…): one line."""


@dataclass(frozen=True)
class ArchiveSettings:
    """The archive keys of a connector config, checked once."""

    prefix: str
    policy: RotationPolicy
    buffer_dir: Path

    @classmethod
    def from_config(cls, config: ConnectorConfig) -> ArchiveSettings:
        buffer_dir = Path(str(config.get("local.buffer.dir")))
        # The original connector requires the directory to exist: creating it silently could stage gigabytes
        # on the wrong disk because of a typo.
        if not buffer_dir.is_dir():
            raise ConnectorError(f"{config.source}: local.buffer.dir={str(buffer_dir)!r} does not exist "
                                 "(create it first; blocks are staged there before upload)")
        if not os.access(buffer_dir, os.W_OK):
            raise ConnectorError(f"{config.source}: local.buffer.dir={str(buffer_dir)!r} is not writable")
        policy = RotationPolicy(
            block_size=int(config.get("compressed_block_size")),
            chunks_per_file=int(config.get("chunks.per.file")),
            flush_size=int(config.get("flush.size")),
            rotate_interval_ms=int(config.get("rotate.interval.ms")),
        )
        return cls(key_prefix(str(config.get("s3.prefix") or "")), policy, buffer_dir)
