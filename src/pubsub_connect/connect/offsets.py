"""A connector's offsets in Kafka Connect's shapes (KIP-875): read, alter, reset.

Why it is here and not in the connectors: both the worker's REST API (``GET|PATCH|DELETE
/connectors/{name}/offsets``) and ``pubsub-connect offsets show|alter|reset`` answer for a
connector that is not running, from its stored position alone (no Spark session).

What a position is, per connector:

- **sinks** (Cloud Pub/Sub, Lite): the ingest stage's checkpoint, in Connect's sink shape
  ``{"partition": {"kafka_topic", "kafka_partition"}, "offset": {"kafka_offset"}}`` (the next
  offset to read). A sink without a checkpoint is where it would start: the offsets of consumer
  group ``connect-<name>``. Altering or resetting writes that group (as Connect does) and
  replaces the checkpoint, so the next start begins exactly there (``kafka_position``);
- **Pub/Sub Lite source**: the pull stage's checkpoint (else the subscription's committed
  cursors), as ``{"partition": {"subscription", "partition"}, "offset": {"offset"}}``;
  altering commits the cursors and replaces the checkpoint (the next pull starts exactly there);
  there is no reset, since Lite itself keeps the cursors a new checkpoint starts from;
- **Cloud Pub/Sub source**: none, as for Google's connector: the position is the subscription's
  acknowledgements, kept by Pub/Sub (moved with a subscription seek);
- **archive**: its files (read only: the object store is the position; moving it means moving
  files).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pubsub_connect.config import loader as cfg
from pubsub_connect.config.keys import ARCHIVE, CPS_SINK, CPS_SOURCE, LITE_SINK, LITE_SOURCE
from pubsub_connect.io import checkpoints
from pubsub_connect.io.checkpoints import write_lite_start
from pubsub_connect.io.kafka.groups import ConsumerGroupError, ConsumerGroupOffsets, Positions, connect_group
from pubsub_connect.io.tables import checkpoint_location
from pubsub_connect.pipelines.context import librdkafka_client
from pubsub_connect.pipelines.kafka_position import offsets_json_positions, subscribed_partitions

#: The stage whose checkpoint is a connector's position.
POSITION_STAGE = {CPS_SINK: "ingest", LITE_SINK: "ingest", LITE_SOURCE: "pull"}

ALTERED = "The offsets for this connector have been altered successfully"
RESET = "The offsets for this connector have been reset successfully"


class OffsetsError(Exception):
    """A request for offsets that cannot be served; ``status`` is the HTTP status Connect uses."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def position_checkpoint(worker: cfg.WorkerConfig, name: str, stage: str) -> str:
    return checkpoint_location(worker.storage_root, name, stage)


def _kafka_groups(worker: cfg.WorkerConfig, config: cfg.ConnectorConfig) -> ConsumerGroupOffsets:
    return ConsumerGroupOffsets(librdkafka_client(worker, "consumer", config), connect_group(config.name))


def _sink_positions(worker: cfg.WorkerConfig, config: cfg.ConnectorConfig) -> Positions:
    committed = checkpoints.committed_source_offsets(position_checkpoint(worker, config.name, "ingest"))
    if committed is not None:
        return offsets_json_positions(committed)
    from pubsub_connect.pipelines.kafka_ingest import kafka_read_options

    groups = _kafka_groups(worker, config)
    try:
        # only the subscription is read from the options (no Spark client gets them)
        return groups.read(subscribed_partitions(kafka_read_options(worker, config, shaded_kafka=False)))
    except ConsumerGroupError as exc:
        raise OffsetsError(str(exc), 500) from None
    finally:
        groups.close()


def _lite_cursors(config: cfg.ConnectorConfig) -> Any:
    """The Lite subscription's cursor client (``subscription_path`` names the subscription)."""
    from pubsub_connect.io.pubsublite.offsets import OffsetClient
    from pubsub_connect.pipelines.pubsub_settings import lite_connection

    conn = lite_connection(config)
    return OffsetClient(conn, conn.subscription_path(str(config.get("pubsublite.subscription"))))


def _lite_positions(worker: cfg.WorkerConfig, config: cfg.ConnectorConfig, cursors: Any) -> dict[int, int]:
    """The pull checkpoint's position, else the subscription's committed cursors."""
    from pubsub_connect.io.pubsublite.connection import LiteIOError

    committed = checkpoints.committed_source_offsets(position_checkpoint(worker, config.name, "pull"))
    if committed is not None:
        return {int(p): int(o) for p, o in dict(committed).items() if int(o) >= 0}
    try:
        return cursors.committed_cursors()
    except LiteIOError as exc:
        raise OffsetsError(str(exc), 500) from None


def _kafka_entries(positions: Mapping[tuple[str, int], int]) -> list[dict[str, Any]]:
    """Positions in Connect's sink shape, sorted by topic and partition."""
    return [{"partition": {"kafka_topic": topic, "kafka_partition": partition}, "offset": {"kafka_offset": offset}}
            for (topic, partition), offset in sorted(positions.items())]


def read_offsets(worker: cfg.WorkerConfig, config: cfg.ConnectorConfig) -> list[dict[str, Any]]:
    """``GET /connectors/{name}/offsets``'s ``offsets`` list, sorted by partition."""
    if config.kind in (CPS_SINK, LITE_SINK):
        return _kafka_entries(_sink_positions(worker, config))
    if config.kind == LITE_SOURCE:
        cursors = _lite_cursors(config)
        return [{"partition": {"subscription": cursors.subscription_path, "partition": partition},
                 "offset": {"offset": offset}}
                for partition, offset in sorted(_lite_positions(worker, config, cursors).items())]
    if config.kind == ARCHIVE:
        from pubsub_connect.io.objectstore.locations import open_store
        from pubsub_connect.pipelines.archive.resume import resume_offsets
        from pubsub_connect.pipelines.archive.settings import ArchiveSettings

        try:
            resume = resume_offsets(open_store(config), ArchiveSettings.from_config(config).prefix)
        except Exception as exc:  # an unreachable store: one line
            raise OffsetsError(f"{config.name}: cannot read the archive's position: {exc}", 500) from None
        return _kafka_entries(resume)
    return []


def _not_movable(config: cfg.ConnectorConfig) -> OffsetsError:
    if config.kind == CPS_SOURCE:
        return OffsetsError(f"{config.name}: a Cloud Pub/Sub source has no offsets of its own: its position is the "
                            "subscription's acknowledgements, kept by Pub/Sub (move it with "
                            "'gcloud pubsub subscriptions seek')")
    return OffsetsError(f"{config.name}: the archive's position is its files in the object store; it resumes after "
                        "the last complete file of each partition")


def _int_field(mapping: Mapping[str, Any], key: str, what: str) -> int:
    value = mapping.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise OffsetsError(f"{what}: '{key}' must be a non-negative integer, got {json.dumps(value)}")
    return value


def parse_request(config: cfg.ConnectorConfig, body: Any) -> dict[Any, int | None]:
    """``PATCH`` body ``{"offsets": [{"partition": …, "offset": … | null}]}`` → partition key →
    new offset (None: forget that partition's offset)."""
    entries = body.get("offsets") if isinstance(body, dict) else None
    if not isinstance(entries, list) or not entries:
        raise OffsetsError('the request body must be {"offsets": [{"partition": {...}, "offset": {...}}, ...]} with '
                           "at least one entry")
    wanted: dict[Any, int | None] = {}
    for number, entry in enumerate(entries):
        what = f"offsets[{number}]"
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if not isinstance(partition, dict):
            raise OffsetsError(f"{what}: 'partition' must be an object")
        offset = entry.get("offset")
        if offset is not None and not isinstance(offset, dict):
            raise OffsetsError(f"{what}: 'offset' must be an object or null")
        if config.kind in (CPS_SINK, LITE_SINK):
            topic = partition.get("kafka_topic")
            if not isinstance(topic, str) or not topic:
                raise OffsetsError(f"{what}: 'kafka_topic' must be a topic name")
            key: Any = (topic, _int_field(partition, "kafka_partition", what))
            wanted[key] = None if offset is None else _int_field(offset, "kafka_offset", what)
        else:
            key = _int_field(partition, "partition", what)
            if offset is None:
                raise OffsetsError(f"{what}: a Lite subscription partition always has a cursor; give an offset")
            wanted[key] = _int_field(offset, "offset", what)
    return wanted


def alter_offsets(worker: cfg.WorkerConfig, config: cfg.ConnectorConfig, body: Any) -> str:
    """``PATCH /connectors/{name}/offsets`` for a stopped connector: the listed partitions move,
    the others keep their position; takes effect when the connector starts next."""
    if config.kind not in POSITION_STAGE:
        raise _not_movable(config)
    wanted = parse_request(config, body)
    if config.kind == LITE_SOURCE:
        _alter_lite(worker, config, wanted)
        return ALTERED
    positions = _sink_positions(worker, config)
    for key, offset in wanted.items():
        if offset is None:
            positions.pop(key, None)
        else:
            positions[key] = offset
    groups = _kafka_groups(worker, config)
    try:  # the group first: while it fails, the checkpoint still holds the old position
        groups.delete()
        groups.commit(positions)
    except ConsumerGroupError as exc:
        raise OffsetsError(str(exc), 500) from None
    finally:
        groups.close()
    checkpoints.remove(position_checkpoint(worker, config.name, "ingest"))
    return ALTERED


def _alter_lite(worker: cfg.WorkerConfig, config: cfg.ConnectorConfig, wanted: dict[Any, int | None]) -> None:
    from pubsub_connect.io.pubsublite.connection import LiteIOError

    cursors = _lite_cursors(config)
    moved = {**_lite_positions(worker, config, cursors), **{p: o for p, o in wanted.items() if o is not None}}
    try:
        cursors.commit(moved)
    except LiteIOError as exc:
        raise OffsetsError(str(exc), 500) from None
    checkpoint = position_checkpoint(worker, config.name, "pull")
    write_lite_start(checkpoint, moved)
    checkpoints.remove(checkpoint)


def reset_offsets(worker: cfg.WorkerConfig, config: cfg.ConnectorConfig) -> str:
    """``DELETE /connectors/{name}/offsets`` for a stopped sink: it starts as if new, at
    ``consumer.auto.offset.reset``. A Lite source has no such reset: a new checkpoint starts
    from the subscription's cursors, which Lite keeps (``PATCH`` moves them)."""
    if config.kind == LITE_SOURCE:
        raise OffsetsError(f"{config.name}: a Pub/Sub Lite source starts from its subscription's cursors, which "
                           "Pub/Sub Lite keeps; move them with PATCH (alter) instead of resetting")
    if config.kind not in POSITION_STAGE:
        raise _not_movable(config)
    try:
        _kafka_groups(worker, config).delete()
    except ConsumerGroupError as exc:
        raise OffsetsError(str(exc), 500) from None
    checkpoints.remove(position_checkpoint(worker, config.name, "ingest"))
    return RESET
