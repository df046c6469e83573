"""A Kafka record's journey through a sink connector: ``pubsub-connect trace NAME --topic T
--partition P --offset O``, and the explore notebook's trace cell (a source's messages:
:mod:`.source_trace`, with the helpers here).

Why from the tables and the checkpoint alone: the question comes after the fact ("did offset 42
reach Pub/Sub, and as what?"), when the record is long gone from the stages' memory. Bronze holds
the record as ingested; the outbox the message the convert stage made of it (what the publish
stage sent), or the dead letters why there is none; the publish stage's checkpoint which of its
micro-batches read the outbox version the row was committed in (the commit that added the row's
file, followed back through compactions), and when that batch committed, which is when Pub/Sub
had accepted every message of it.
A message the outbox no longer holds (its retention, or the fused mode, which has no outbox) is
made again by the connector's data model from the bronze row, and marked so.

The Pub/Sub message id is not recorded: it would cost the publish stage a second write per
micro-batch (a Delta append is 0.3-0.4 s on two cores, ``benchmarks/README.md``), where its
whole batch is a few tenths of a second.
"""

from __future__ import annotations

import datetime as dt
import json
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import CPS_SINK, LITE_SINK
from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.explore.checkpoints import batch_ids, local_path, parse_offset_log
from pubsub_connect.explore.tables import display_value
from pubsub_connect.io import delta_log, table_maintenance
from pubsub_connect.io.tables import BRONZE, DLQ, OUTBOX, SparkDeltaTableStore, TableRef, TableStore
from pubsub_connect.pipelines.maintenance import consumed_below
from pubsub_connect.pipelines.modes import FUSED, stored_mode

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: A bronze row (a one-row frame) → the message the data model makes of it, or None.
MessageMaker = Callable[["DataFrame"], "dict[str, Any] | None"]

UTC = dt.timezone.utc
#: Where a shown message comes from.
FROM_OUTBOX = "outbox"
REMADE = "made again from bronze by the current data model"


@dataclass
class Journey:
    """What the tables and the publish checkpoint know of one record."""

    record: str
    bronze: dict[str, Any] | None = None
    message: dict[str, Any] | None = None
    message_from: str | None = None
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    published: str | None = None
    #: What sending is called: a sink publishes a message, a source produces a record.
    sent: str = "published"
    #: What the outbox row is: the message a sink sent, the Kafka record a source produced.
    sent_as: str = "message"

    def as_dict(self) -> dict[str, Any]:
        sent_as = self.sent_as.replace(" ", "_")
        return {"record": self.record, "bronze": self.bronze, sent_as: self.message,
                f"{sent_as}_from": self.message_from, "dead_letters": self.dead_letters, self.sent: self.published}

    def lines(self) -> list[str]:
        out = [self.record]
        if self.bronze is not None:
            out.append(f"  bronze: {_fields(self.bronze)}")
        if self.message is not None:
            out.append(f"  {self.sent_as} ({self.message_from}): {_fields(self.message)}")
        out.extend(f"  dead letter: {_fields(row)}" for row in self.dead_letters)
        if self.published is not None:
            out.append(f"  {self.sent}: {self.published}")
        return out


def _fields(row: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value!r}" for key, value in row.items())


def _shown(row: Any, width: int = 200) -> dict[str, Any]:
    return {k: (v.astimezone(UTC).isoformat() if isinstance(v, dt.datetime) else display_value(v, width))
            for k, v in row.asDict(recursive=False).items()}


def kafka_record(topic: str, partition: int, offset: int) -> Column:
    """The rows of Kafka record ``topic``/``partition``@``offset``."""
    return (F.col("topic") == topic) & (F.col("partition") == partition) & (F.col("offset") == offset)


def trace(store: TableStore, name: str, topic: str, partition: int, offset: int,
          remake: MessageMaker | None = None) -> Journey:
    """The journey of Kafka record ``topic``/``partition``@``offset`` through sink connector
    ``name``; ``remake`` (:func:`message_maker`) makes its message again when the outbox has
    none. Raises :class:`ConfigError` (one line) when none of its tables holds the record."""
    journey = Journey(f"{topic}/{partition}@{offset}")
    tables = {kind: TableRef(kind, name) for kind in (BRONZE, OUTBOX, DLQ)}
    record = kafka_record(topic, partition, offset)
    journey.bronze, bronze_version = row_and_version(store, tables[BRONZE], record)
    journey.dead_letters = dead_letters(store, tables[DLQ], record)
    if journey.bronze is None and not journey.dead_letters:
        raise ConfigError(f"{name}: no record {journey.record} in its bronze table or dead letters"
                          f"{_held(store, tables[BRONZE], topic, partition)}")
    message, version = row_and_version(store, tables[OUTBOX], record)
    if message is not None:  # what the publish stage sent
        journey.message = {k: v for k, v in message.items() if k not in ("topic", "partition", "offset")}
        journey.message_from = FROM_OUTBOX
    elif journey.bronze is not None and not journey.dead_letters and remake is not None:
        journey.message = remake(store.read(tables[BRONZE]).filter(record).limit(1))
        journey.message_from = REMADE if journey.message is not None else None
    if journey.message is None:
        return journey
    if stored_mode(store, name) == FUSED:
        journey.published = "by the fused query, in the micro-batch that landed it in bronze"
    elif journey.message_from == FROM_OUTBOX:
        journey.published = batch_that_read(store, name, "publish", version)
    elif bronze_version is not None and consumed_below(store.checkpoint(name, "convert")) <= bronze_version:
        journey.published = "not yet: waiting in bronze for the convert stage"
    else:  # converted, and its outbox row deleted: retention deletes only what the publish stage read
        journey.published = "by the publish stage; its outbox row has expired since (outbox.retention.ms)"
    return journey


def dead_letters(store: TableStore, dlq: TableRef, where: Column) -> list[dict[str, Any]]:
    """The dead letters of one record or message, oldest first."""
    if not store.exists(dlq):
        return []
    return [_shown(row) for row in store.read(dlq).filter(where).orderBy("failed_at").collect()]


def _held(store: TableStore, bronze: TableRef, topic: str, partition: int) -> str:
    """What bronze holds of the partition, for the one-line answer to an unknown offset."""
    if not store.exists(bronze):
        return " (it has no bronze table yet)"
    bounds = (store.read(bronze).filter((F.col("topic") == topic) & (F.col("partition") == partition))
              .agg(F.min("offset"), F.max("offset"), F.count(F.lit(1))).first())
    if not bounds or not bounds[2]:
        return f" (bronze holds nothing of {topic}/{partition})"
    return f" (bronze holds {bounds[2]:,} records of {topic}/{partition}, offsets {bounds[0]}..{bounds[1]})"


def row_and_version(store: TableStore, table: TableRef, where: Column) -> tuple[dict[str, Any] | None, int | None]:
    """The row ``where`` picks in a stage table (None: not there) and the version it was committed
    in: from row tracking where the table keeps it, else from the Delta log (:func:`_version_from_log`)."""
    if not store.exists(table):
        return None, None
    rows = store.read(table).filter(where) \
        .withColumn("_file", F.col("_metadata.file_path")) \
        .withColumn("_file_time", F.col("_metadata.file_modification_time"))
    tracked = isinstance(store, SparkDeltaTableStore) and table_maintenance.describe(
        store.spark, store.sql_target(table)).row_tracking
    if tracked:
        rows = rows.withColumn("_version", F.col("_metadata.row_commit_version"))
    found = rows.limit(1).collect()
    if not found:
        return None, None
    row = _shown(found[0])
    for hidden in ("_file", "_file_time"):
        row.pop(hidden)
    version = row.pop("_version", None)
    if version is None:
        version = _version_from_log(store, table, where, found[0]["_file"], found[0]["_file_time"])
    return row, None if version is None else int(version)


#: The operations of a stage's own appends; any other commit that adds a file rewrote rows the
#: table already held (OPTIMIZE, or the MERGE of retention keeping a file's other rows).
APPENDS = frozenset({"WRITE", "STREAMING UPDATE", "CREATE TABLE AS SELECT"})
#: How many rewrites back a row is followed (each is one look at an earlier snapshot).
MOST_REWRITES = 20


def _version_from_log(store: TableStore, table: TableRef, where: Column, file: str,
                      file_time: dt.datetime | None) -> int | None:
    """The version a row was committed in, without row tracking: the commit that added its file
    (found from the file's time onwards: one stage appends to bronze or the outbox, so its files
    are written after the last commit and before their own). When that commit rewrote rows the
    table already held (compaction, retention), the row is looked up in the snapshot before it and
    followed back the same way. None when the log is not on a path this process can read, or the
    snapshot before a rewrite can no longer be read (VACUUM removed its files)."""
    location = store.location(table) if isinstance(store, SparkDeltaTableStore) else store.path(table)
    try:
        log = local_path(location) / "_delta_log"
        versions = delta_log.commit_versions(log)
    except (ValueError, OSError):
        return None
    for _ in range(MOST_REWRITES):
        added = _commit_adding(log, versions, Path(urllib.parse.urlparse(file).path).name, file_time)
        if added is None:
            return None
        version, operation = added
        if operation in APPENDS or not isinstance(store, SparkDeltaTableStore):
            return version
        try:  # rewritten here: where the row was just before
            earlier = store.spark.sql(f"SELECT *, _metadata.file_path AS _file, "
                                      f"_metadata.file_modification_time AS _file_time "
                                      f"FROM {store.sql_target(table)} VERSION AS OF {version - 1}") \
                .filter(where).select("_file", "_file_time").limit(1).collect()
        except Exception:  # its files vacuumed, or its log entry cleaned up
            return None
        if not earlier:
            return None
        file, file_time = earlier[0]["_file"], earlier[0]["_file_time"]
    return None


def _commit_adding(log: Path, versions: list[int], file_name: str,
                   file_time: dt.datetime | None) -> tuple[int, str | None] | None:
    """The first version not older than ``file_time`` whose commit adds ``file_name``, and that
    commit's operation (:func:`~pubsub_connect.io.delta_log.parse_commit`)."""
    stamp = file_time.timestamp() if file_time is not None else 0.0
    for version in versions:
        entry = log / f"{version:020d}.json"
        if entry.stat().st_mtime < stamp:
            continue
        text = entry.read_text(encoding="utf-8")
        if any(_added_name(json.loads(line)) == file_name for line in text.splitlines() if line.strip()):
            return version, delta_log.parse_commit(version, text).operation
    return None


def _added_name(action: dict[str, Any]) -> str | None:
    """The file name an ``add`` action of the Delta log adds (its path is relative and URL-encoded)."""
    added = action.get("add")
    return urllib.parse.unquote(added.get("path", "")).rsplit("/", 1)[-1] if added else None


def message_maker(config: ConnectorConfig) -> MessageMaker:
    """What the connector's current data model makes of a bronze row: its message (None when it
    makes none, e.g. of a record without value and attributes, or a dead letter)."""
    if config.kind not in (CPS_SINK, LITE_SINK):
        raise ConfigError(f"{config.name}: trace follows a record through a Cloud Pub/Sub or Lite connector's "
                          f"tables; a {config.kind} has none")

    def remake(row: DataFrame) -> dict[str, Any] | None:
        if config.kind == CPS_SINK:
            from pubsub_connect.model.cps_sink.batch import CpsSinkConversion
            from pubsub_connect.pipelines.cps_sink import OUTBOX_COLUMNS, sink_settings
            from pubsub_connect.pipelines.writer_schemas import body_schema_check, writer_schema_lookup

            conversion = CpsSinkConversion(sink_settings(config), schemas=writer_schema_lookup(config),
                                           body_schemas=body_schema_check(config))
            converted = conversion.to_outbox(row)
            columns = [c for c in OUTBOX_COLUMNS if c not in ("topic", "partition", "offset")]
        else:
            from pubsub_connect.pipelines.lite_sink import converted_rows

            converted = converted_rows(row, config)
            columns = ["key", "data", "attributes", "event_time"]
        found = converted.filter(F.col("error_class").isNull() & F.col("data").isNotNull()).select(*columns).collect()
        return _shown(found[0]) if found else None

    return remake


def batch_that_read(store: TableStore, name: str, stage: str, version: int | None) -> str:
    """Which micro-batch of ``stage`` (the publish or the produce stage) sent the outbox version
    ``version``, and when."""
    checkpoint = local_path(store.checkpoint(name, stage))
    committed = batch_ids(checkpoint / "commits")
    if version is None:
        return ("unknown (neither row tracking nor a Delta log on a path this process reads dates its row, "
                "or it was compacted longer ago than the table keeps the files before, or committed before "
                "the first version its trimmed log keeps)")
    for batch in committed:
        offsets = checkpoint / "offsets" / str(batch)
        if not offsets.is_file():
            continue
        _, sources = parse_offset_log(offsets.read_text(encoding="utf-8"))
        raw = sources[0].raw if sources else None
        if not isinstance(raw, dict) or raw.get("isStartingVersion"):
            continue
        read_through = int(raw["reservoirVersion"]) - 1  # a version part-read counts once read whole
        if read_through >= version:
            when = dt.datetime.fromtimestamp((checkpoint / "commits" / str(batch)).stat().st_mtime, UTC)
            # Spark keeps the newest batches' files only: the oldest kept may stand for earlier ones
            oldest = " (or earlier: the oldest batch the checkpoint keeps)" if batch == committed[0] > 0 else ""
            return f"by {stage} batch {batch}{oldest}, committed {when.isoformat(timespec='seconds')}"
    return f"not yet: waiting in the outbox for the {stage} stage"


def parse_record(text: str) -> tuple[str, int, int]:
    """``topic/partition@offset`` (how :class:`Journey` names a record) → its three parts."""
    topic, _, rest = text.rpartition("/")
    partition, _, offset = rest.partition("@")
    if not topic or not partition.isdigit() or not offset.isdigit():
        raise ConfigError(f"trace {text!r}: name the record as topic/partition@offset, e.g. orders/0@42")
    return topic, int(partition), int(offset)


def notebook_maker(connector: str) -> MessageMaker | None:
    """The notebook's message maker: from the connector's ``.properties`` when it names one and
    they load here (a secret reference that only a job resolves leaves none: the outbox's message
    is then the only one shown)."""
    if not connector.endswith(".properties"):
        return None
    from pubsub_connect.config import loader as cfg
    from pubsub_connect.config.properties import read_properties

    try:
        return message_maker(cfg.validate_connector(read_properties(connector), connector))
    except ConfigError:
        return None

