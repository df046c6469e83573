"""The table store: where each connector's bronze, outbox and dead-letter tables live.

Why one small interface: every stage of every connector does the same three things — append a
micro-batch exactly once, read a table, stream the appends of the previous stage — and must do
them on Databricks (native Delta, Unity Catalog names) and locally (delta-rs, no jars) alike.

Exactly-once appends: a micro-batch is appended once per (app id, batch id), the app id being
``<connector>/<stage>@<query id>``. On Delta Lake (:class:`SparkDeltaTableStore`) each append's
commit carries a mark in its ``userMetadata`` (:mod:`.batch_marks`), read back by the first batch
after a start, the only one a stream can replay, which also carries a Delta transaction id;
delta-rs (:class:`DeltaRsTableStore`) records a Delta transaction id (``txn``) with every append,
which it reads cheaply, and checks it before each. A replayed batch therefore leaves the table
unchanged.

Why one module: the three stores are one interface and its implementations side by side,
and a change to the interface (a new operation every stage relies on) has to be made, and read, in
all of them at once.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pubsub_connect.io.batch_marks import batch_mark, last_marked_batch
from pubsub_connect.io.spark import Capabilities

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

BRONZE = "bronze"
OUTBOX = "outbox"
DLQ = "dlq"
KINDS = (BRONZE, OUTBOX, DLQ)

#: Table properties of every table a store creates, under the ones a caller gives. Stages append
#: a commit per micro-batch, and Delta Lake writes a log checkpoint every
#: ``delta.checkpointInterval`` commits (10 by default). Measured on 2 cores (1,000-row appends in
#: a warm session): every tenth append then took 1.7-2.7 s instead of 0.3-0.4 s, the mean append
#: 0.47-0.83 s against 0.29-0.39 s every 100 commits. Nothing on the stages' paths reads the whole
#: table state, which is what the longer tail of JSON commits after a checkpoint would slow: the
#: appends carry no transaction id past a start's first, and the next stage's stream reads the
#: new commits themselves.
STAGE_TABLE_PROPERTIES: Mapping[str, str] = {"delta.checkpointInterval": "100"}


#: One lock per table path in this process: held by each append of a :class:`SparkDeltaTableStore`
#: and by a row deletion beside them (:meth:`SparkDeltaTableStore.appends_held`).
_APPEND_LOCKS: dict[str, threading.Lock] = {}
_APPEND_LOCKS_GUARD = threading.Lock()


def _append_lock(path: str) -> threading.Lock:
    with _APPEND_LOCKS_GUARD:
        return _APPEND_LOCKS.setdefault(path, threading.Lock())


def created_table_properties(properties: Mapping[str, str] | None) -> dict[str, str]:
    """What ``ensure`` creates a table with: :data:`STAGE_TABLE_PROPERTIES` under ``properties``."""
    return {**STAGE_TABLE_PROPERTIES, **(properties or {})}


def create_table_sql(name: str, schema: StructType, properties: Mapping[str, str]) -> str:
    """``CREATE TABLE`` of a Delta table under a (quoted) catalog name: fails when it exists."""
    columns = ", ".join(f"`{f.name.replace('`', '``')}` {f.dataType.simpleString()}" for f in schema.fields)
    tblproperties = ", ".join(f"'{key}' = '{value}'" for key, value in properties.items())
    return f"CREATE TABLE {name} ({columns}) USING delta TBLPROPERTIES ({tblproperties})"


@dataclass(frozen=True)
class TableRef:
    """A connector's table: ``kind`` is bronze | outbox | dlq, ``connector`` the connector name."""

    kind: str
    connector: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"table kind must be one of {KINDS}, got {self.kind!r}")


def table_basename(table: TableRef) -> str:
    """``<kind>_<connector>`` with the connector name made a valid table identifier: the name of
    a connector's table in a catalog schema, for the jobs (Unity Catalog) and the declarative
    pipelines alike."""
    connector = table.connector.replace("-", "_").replace(".", "_")
    return f"{table.kind}_{connector}"


def join_location(root: str, *parts: str) -> str:
    """``parts`` under ``root``: a URI joined with ``/``, a local path resolved by ``pathlib``."""
    if "://" in root:
        return posixpath.join(root, *parts)
    return str(Path(root).joinpath(*parts))


def checkpoint_location(storage_root: str, connector: str, stage: str) -> str:
    """``<storage.root>/checkpoints/<connector>/<stage>`` (a local root made absolute), where a
    stage keeps its checkpoint; also read without a session by the offsets tools."""
    root = storage_root if "://" in storage_root else str(Path(storage_root).resolve())
    return join_location(root, "checkpoints", connector, stage)


class TableStore(ABC):
    """Tables under ``storage.root``: ``<root>/<kind>/<connector>``; checkpoints under
    ``<root>/checkpoints/<connector>/<stage>``."""

    def __init__(self, spark: SparkSession, root: str):
        self.spark = spark
        self.root = root if "://" in root else str(Path(root).resolve())

    def path(self, table: TableRef) -> str:
        return join_location(self.root, table.kind, table.connector)

    def checkpoint(self, connector: str, stage: str) -> str:
        return checkpoint_location(self.root, connector, stage)

    @abstractmethod
    def exists(self, table: TableRef) -> bool: ...

    @abstractmethod
    def ensure(self, table: TableRef, schema: StructType, properties: Mapping[str, str] | None = None) -> None:
        """Create the table empty with ``schema`` and Delta table ``properties`` (over
        :data:`STAGE_TABLE_PROPERTIES`) when it does not exist (so the next stage can start
        streaming from it before the first record arrives)."""

    @abstractmethod
    def append_batch(self, table: TableRef, df: DataFrame, app_id: str, batch_id: int) -> bool:
        """Append ``df`` once per (``app_id``, ``batch_id``). Returns False when skipped because
        that batch id was already committed (a replay)."""

    @abstractmethod
    def append_rows(self, table: TableRef, rows: object, schema: StructType) -> None:
        """Append an Arrow table built on the driver (pulled messages), without a transaction id.

        For callers that tolerate a duplicate: the pull stage acks what it appended only after
        this returns, so a crash in between already means a redelivery, which the next stage
        removes by message id, and a failed append is never retried under the same batch number.
        A transaction id could prevent nothing more, and on Delta Lake each append carrying one
        rebuilds the table's transaction state first, the longest part of a small append."""

    def row_count(self, table: TableRef) -> int:
        """Rows in the table, from metadata where the backend keeps it."""
        return self.count(table)

    @abstractmethod
    def version(self, table: TableRef) -> int:
        """The table's newest committed Delta version."""

    @abstractmethod
    def commit_note(self, table: TableRef, note: str) -> int:
        """Commit a version that changes no data, carrying ``note`` (table property
        ``pubsub-connect.note``); returns it. Why: a new stream can start at it (Delta's
        ``startingVersion`` must name a version that exists), and everything before it is then
        behind that stream, whatever another writer appends meanwhile."""

    @abstractmethod
    def committed_version(self, table: TableRef, app_id: str) -> int | None:
        """Highest batch id committed by ``app_id``, None when it never wrote."""

    @abstractmethod
    def read(self, table: TableRef) -> DataFrame: ...

    @abstractmethod
    def read_stream(self, table: TableRef, max_files_per_trigger: int | None = None,
                    max_bytes_per_trigger: int | None = None, starting_version: int | None = None) -> DataFrame:
        """Stream the table's appends, a micro-batch bounded by Delta Lake's ``maxFilesPerTrigger`` /
        ``maxBytesPerTrigger`` (soft bounds: a batch takes one file at least; the fallback reader
        takes whole commits); ``starting_version``: a new checkpoint reads the commits from that
        version on (Delta's ``startingVersion``), not the table from its start."""

    def count(self, table: TableRef) -> int:
        return self.read(table).count() if self.exists(table) else 0


class DeltaRsTableStore(TableStore):
    """The embedded default: real Delta tables written by delta-rs, read through
    :mod:`pubsub_connect.io.delta_rs_source`. Micro-batches are collected to the driver as
    Arrow (fine locally; on a cluster the native store is used)."""

    def __init__(self, spark: SparkSession, root: str, storage_options: dict[str, str] | None = None):
        super().__init__(spark, root)
        self.storage_options = storage_options
        from pubsub_connect.io.delta_rs_source import DeltaRsDataSource

        spark.dataSource.register(DeltaRsDataSource)

    def exists(self, table: TableRef) -> bool:
        from deltalake import DeltaTable

        return bool(DeltaTable.is_deltatable(self.path(table), storage_options=self.storage_options))

    def ensure(self, table: TableRef, schema: StructType, properties: Mapping[str, str] | None = None) -> None:
        from deltalake import DeltaTable

        from pubsub_connect.model.schemas import to_arrow

        if self.exists(table):
            return
        try:
            DeltaTable.create(self.path(table), schema=to_arrow(schema), mode="ignore",
                              configuration=created_table_properties(properties),
                              storage_options=self.storage_options)
        except Exception as exc:  # a concurrent stage created it first
            if not self.exists(table):
                raise RuntimeError(f"cannot create table {self.path(table)}: {exc}") from exc

    def committed_version(self, table: TableRef, app_id: str) -> int | None:
        from deltalake import DeltaTable

        if not self.exists(table):
            return None
        version = DeltaTable(self.path(table), storage_options=self.storage_options).transaction_version(app_id)
        return None if version is None else int(version)

    def append_batch(self, table: TableRef, df: DataFrame, app_id: str, batch_id: int) -> bool:
        return self.append_arrow(table, df.toArrow(), app_id, batch_id)

    def append_rows(self, table: TableRef, rows: object, schema: StructType) -> None:
        self.append_arrow(table, rows, None, 0)

    def row_count(self, table: TableRef) -> int:
        """Sum of the ``numRecords`` statistics delta-rs writes for every file: no data is read."""
        from deltalake import DeltaTable

        if not self.exists(table):
            return 0
        actions = DeltaTable(self.path(table), storage_options=self.storage_options).get_add_actions(flatten=True)
        import pyarrow as pa

        column = pa.table(actions).column("num_records")
        return int(sum(v for v in column.to_pylist() if v is not None))

    def append_arrow(self, table: TableRef, data: object, app_id: str | None, batch_id: int) -> bool:
        """Append an Arrow table, once per (``app_id``, ``batch_id``) unless ``app_id`` is None;
        retried on a concurrent-commit conflict."""
        from deltalake import CommitProperties, Transaction, write_deltalake
        from deltalake.exceptions import CommitFailedError

        transactions = [] if app_id is None else [Transaction(app_id, batch_id)]
        for attempt in range(5):
            committed = None if app_id is None else self.committed_version(table, app_id)
            if committed is not None and committed >= batch_id:
                log.info("%s: batch %d of %s already committed (at %d); skipped", self.path(table), batch_id,
                         app_id, committed)
                return False
            try:
                write_deltalake(
                    self.path(table),
                    data,  # type: ignore[arg-type]
                    mode="append",
                    storage_options=self.storage_options,
                    commit_properties=CommitProperties(app_transactions=transactions),
                )
                return True
            except CommitFailedError:
                time.sleep(0.05 * (attempt + 1))
        raise RuntimeError(f"{self.path(table)}: could not commit batch {batch_id} of {app_id} after retries")

    def read(self, table: TableRef) -> DataFrame:
        return self.spark.read.format("pubsub_connect_delta").load(self.path(table))

    def version(self, table: TableRef) -> int:
        from deltalake import DeltaTable

        return int(DeltaTable(self.path(table), storage_options=self.storage_options).version())

    def commit_note(self, table: TableRef, note: str) -> int:
        from deltalake import DeltaTable

        delta = DeltaTable(self.path(table), storage_options=self.storage_options)
        delta.alter.set_table_properties({"pubsub-connect.note": note}, raise_if_not_exists=False)
        return self.version(table)

    def read_stream(self, table: TableRef, max_files_per_trigger: int | None = None,
                    max_bytes_per_trigger: int | None = None, starting_version: int | None = None) -> DataFrame:
        reader = self.spark.readStream.format("pubsub_connect_delta")
        if starting_version is not None:
            reader = reader.option("startingVersion", str(starting_version))
        if max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", str(max_files_per_trigger))
        if max_bytes_per_trigger:
            reader = reader.option("maxBytesPerTrigger", str(max_bytes_per_trigger))
        return reader.load(self.path(table))


class SparkDeltaTableStore(TableStore):
    """Native Delta (Databricks, or any Spark with Delta's jars). With ``catalog``/``schema``
    tables are Unity Catalog managed tables named ``<catalog>.<schema>.<kind>_<connector>``;
    otherwise path-based tables under the root."""

    def __init__(self, spark: SparkSession, root: str, catalog: str | None = None, schema: str | None = None):
        super().__init__(spark, root)
        self.catalog = catalog
        self.schema = schema
        #: ``(table path, app id)`` → the batch id this store last appended for it (see append_batch)
        self._appended: dict[tuple[str, str], int] = {}
        #: Paths of the tables this store created and has not appended to since: they hold no
        #: batch, so their marks and their row count need no reading (a new connector's first run,
        #: where each look-up is a Delta log read of about a second in a cold driver).
        self._created_empty: set[str] = set()

    def table_name(self, table: TableRef) -> str | None:
        if not (self.catalog and self.schema):
            return None
        return f"`{self.catalog}`.`{self.schema}`.`{table_basename(table)}`"

    def exists(self, table: TableRef) -> bool:
        name = self.table_name(table)
        if name:
            return bool(self.spark.catalog.tableExists(name.replace("`", "")))
        # Delta's own check reads the log; a read probe would cost a Spark job, and every stage
        # start asks for each of its tables.
        from delta.tables import DeltaTable

        return bool(DeltaTable.isDeltaTable(self.spark, self.path(table)))

    def ensure(self, table: TableRef, schema: StructType, properties: Mapping[str, str] | None = None) -> None:
        if self.exists(table):
            return
        from delta.tables import DeltaTable

        # a CREATE TABLE commit (not an empty WRITE): the log then shows the table's creation apart
        # from the data its stages append. ``create``, not ``createIfNotExists``: it fails when the
        # table exists, so a success means this store made it, empty.
        name = self.table_name(table)
        try:
            if name:
                # SQL, not DeltaTableBuilder.tableName: open-source Delta parses that name as
                # [database.]table and refuses a catalog's three-level name
                self.spark.sql(create_table_sql(name, schema, created_table_properties(properties)))
            else:
                builder = DeltaTable.create(self.spark).addColumns(schema).location(self.path(table))
                for key, value in created_table_properties(properties).items():
                    builder = builder.property(key, value)
                builder.execute()
        except Exception as exc:  # a concurrent stage created it first
            if not self.exists(table):
                raise RuntimeError(f"cannot create table {name or self.path(table)}: {exc}") from exc
            return
        self._created_empty.add(self.path(table))

    def location(self, table: TableRef) -> str:
        """Where the table's files (and ``_delta_log``) are: its path, or a catalog table's location."""
        name = self.table_name(table)
        if not name:
            return self.path(table)
        return str(self.spark.sql(f"DESCRIBE DETAIL {name}").select("location").first()[0])

    def committed_version(self, table: TableRef, app_id: str) -> int | None:
        """The batch id of ``app_id``'s newest marked append among the table's newest commits
        (:mod:`.batch_marks`); when the search stops without one, the version Delta recorded for
        ``app_id`` as a transaction id (``SetTransaction``, read from the table's current
        snapshot), which is how batches were appended before marks existed. A table this store
        created and has not appended to since holds no batch: nothing is read.

        ``DESCRIBE HISTORY`` cannot answer the second: open-source Delta does not record the txn
        ids of a WRITE in ``operationParameters``."""
        if self.path(table) in self._created_empty or not self.exists(table):
            return None
        marked = last_marked_batch(lambda count: self._newest_user_metadata(table, count), app_id)
        if marked is not None:
            return marked
        location = self.location(table)
        versions = _jvm_transactions(self.spark, location)
        if versions is None:  # no py4j JVM (Spark Connect, shared clusters): read the log itself
            versions = _log_transactions(self.spark, location)
        version = versions.get(app_id)
        return None if version is None else int(version)

    def _newest_user_metadata(self, table: TableRef, count: int) -> list[str | None]:
        """The ``userMetadata`` of the table's ``count`` newest commits, newest first: the history
        reads only those commits' files, not the table's state."""
        name = self.table_name(table)
        target = name or "delta.`{}`".format(self.path(table).replace("`", "``"))
        rows = self.spark.sql(f"DESCRIBE HISTORY {target} LIMIT {int(count)}").select("version", "userMetadata")
        return [row.userMetadata for row in sorted(rows.collect(), key=lambda row: -row.version)]

    def sql_target(self, table: TableRef) -> str:
        return self.table_name(table) or "delta.`{}`".format(self.path(table).replace("`", "``"))

    def version(self, table: TableRef) -> int:
        return int(self.spark.sql(f"DESCRIBE HISTORY {self.sql_target(table)} LIMIT 1").select("version").first()[0])

    def commit_note(self, table: TableRef, note: str) -> int:
        # a property change always commits a version (an empty append commits none on Delta Lake)
        text = note.replace("\\", "\\\\").replace("'", "\\'")
        self.spark.sql(f"ALTER TABLE {self.sql_target(table)} SET TBLPROPERTIES ('pubsub-connect.note' = '{text}')")
        return self.version(table)

    def append_batch(self, table: TableRef, df: DataFrame, app_id: str, batch_id: int) -> bool:
        """Append with ``app_id``'s mark for ``batch_id`` in the commit's ``userMetadata``; False
        (nothing written) when that batch is already in the table.

        Only the first batch after this store appended something else looks for the table's
        marks: a stream replays a batch only after its query restarts, so the batch that directly
        follows one this store appended is new by construction (Spark's offset log lets one
        query write a new batch id). That first batch also carries Delta's transaction id
        (``txnAppId``/``txnVersion``): two processes restarted on one checkpoint may replay the
        same batch at once, and Delta then skips the second append (or refuses it, when both
        commit at once). An append that raised may
        still have committed (a failure after the commit), so it is forgotten and the next
        attempt looks again."""
        key = (self.path(table), app_id)
        first_after_start = self._appended.pop(key, None) != batch_id - 1
        options = {"userMetadata": batch_mark(app_id, batch_id)}
        if first_after_start:
            committed = self.committed_version(table, app_id)
            if committed is not None and committed >= batch_id:
                log.info("%s: batch %d of %s already committed (at %d); skipped", self.path(table), batch_id,
                         app_id, committed)
                self._appended[key] = committed
                return False
            options.update(txnAppId=app_id, txnVersion=str(batch_id))
        self._append(table, df, **options)
        self._appended[key] = batch_id
        return True

    def append_rows(self, table: TableRef, rows: object, schema: StructType) -> None:
        self._append(table, self.spark.createDataFrame(rows, schema))

    def row_count(self, table: TableRef) -> int:
        return 0 if self.path(table) in self._created_empty else super().row_count(table)

    @contextlib.contextmanager
    def appends_held(self, table: TableRef) -> Iterator[None]:
        """Holds this process's appends to ``table`` (they wait) while the body runs.

        Why: a Delta ``DELETE`` or ``MERGE`` reads the whole table, and open-source Delta Lake
        checks it at Serializable isolation (the only level it accepts): an append committed while
        it runs, as a stage running continuously commits one every trigger, makes it fail with
        ``ConcurrentAppendException``, every time. Retention deletes under this hold, so the stages
        in the same process (``run``, the worker) wait for it instead: one batch per turn is slower
        by the deletion's time. Databricks' Delta (WriteSerializable by default) lets blind appends
        pass a deletion; there the hold only orders them."""
        with _append_lock(self.path(table)):
            yield

    def _append(self, table: TableRef, df: DataFrame, **options: str) -> None:
        self._created_empty.discard(self.path(table))  # before the write: a failed one may have committed
        writer = df.write.format("delta").mode("append").option("mergeSchema", "false").options(**options)
        name = self.table_name(table)
        with self.appends_held(table):
            if name:
                writer.saveAsTable(name.replace("`", ""))
            else:
                writer.save(self.path(table))

    def read(self, table: TableRef) -> DataFrame:
        name = self.table_name(table)
        return self.spark.read.table(name.replace("`", "")) if name else \
            self.spark.read.format("delta").load(self.path(table))

    def read_stream(self, table: TableRef, max_files_per_trigger: int | None = None,
                    max_bytes_per_trigger: int | None = None, starting_version: int | None = None) -> DataFrame:
        # a retention deletion or compaction commit is not new data for the next stage
        reader = self.spark.readStream.format("delta").option("skipChangeCommits", "true")
        if starting_version is not None:
            reader = reader.option("startingVersion", str(starting_version))
        if max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", str(max_files_per_trigger))
        if max_bytes_per_trigger:
            reader = reader.option("maxBytesPerTrigger", str(max_bytes_per_trigger))
        name = self.table_name(table)
        return reader.table(name.replace("`", "")) if name else reader.load(self.path(table))


class PipelineTableStore(SparkDeltaTableStore):
    """The tables of a connector run as a local declarative pipeline (``pubsub-connect pipeline
    run``): the pipeline owns the tables it defines (``managed`` kinds), which live in its
    warehouse as ``<warehouse>/<kind>_<connector>``; a table a job stage writes for it (the
    source connectors' pulled bronze) and the job stages' checkpoints stay in the usual layout
    under ``root``. Path-based, so the job stages need no access to the pipeline's metastore."""

    def __init__(self, spark: SparkSession, root: str, warehouse: str, managed: frozenset[str]):
        super().__init__(spark, root)
        self.warehouse = warehouse
        self.managed = managed

    def path(self, table: TableRef) -> str:
        if table.kind in self.managed:
            return join_location(self.warehouse, table_basename(table))
        return super().path(table)


#: The Delta log class: open-source Delta Lake, then the Databricks Runtime's.
DELTA_LOG_CLASSES = ("org.apache.spark.sql.delta.DeltaLog", "com.databricks.sql.transaction.tahoe.DeltaLog")


def _jvm_transactions(spark: SparkSession, location: str) -> dict[str, int] | None:
    """``{appId: version}`` of the table's newest snapshot through Delta's JVM API; None when the
    session has no py4j JVM or no Delta log class."""
    try:
        jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    except Exception:  # Spark Connect has no SparkContext
        return None
    if jvm is None:
        return None
    for class_name in DELTA_LOG_CLASSES:
        delta_log = jvm
        for part in class_name.split("."):
            delta_log = getattr(delta_log, part)
        try:
            snapshot = delta_log.forTableWithSnapshot(spark._jsparkSession, location)._2()
        except Exception as exc:
            if "does not exist" in str(exc) or "not callable" in str(exc):
                continue  # this runtime has the other class
            raise
        transactions = snapshot.transactions()
        out: dict[str, int] = {}
        keys = transactions.keys().iterator()
        while keys.hasNext():
            key = keys.next()
            out[str(key)] = int(transactions.apply(key))
        return out
    return None


def _log_transactions(spark: SparkSession, location: str) -> dict[str, int]:
    """``{appId: version}`` read from ``_delta_log`` with Spark: the newest classic checkpoint's
    ``txn`` actions, then those of every JSON commit after it (the later one wins)."""
    from pyspark.sql import functions as F

    log_dir = join_location(location, "_delta_log")
    after = -1
    sources = []
    try:
        last = spark.read.json(join_location(log_dir, "_last_checkpoint")).first()
    except Exception:  # no checkpoint yet
        last = None
    if last is not None and last["version"] is not None:
        after = int(last["version"])
        parts = last["parts"] if "parts" in last.asDict() and last["parts"] else None
        pattern = (f"{after:020d}.checkpoint.*.parquet" if parts else f"{after:020d}.checkpoint.parquet")
        checkpoint = spark.read.parquet(join_location(log_dir, pattern)).where("txn IS NOT NULL")
        sources.append(checkpoint.select(F.lit(after).alias("commit"), "txn.appId", "txn.version"))
    try:  # one read of the JSON commits (a log with none after a checkpoint has no such files)
        commits = spark.read.json(join_location(log_dir, "*.json"))
    except Exception:
        commits = None
    if commits is not None and "txn" in commits.columns:  # a column that no commit has cannot be read
        sources.append(commits.withColumn("file", F.input_file_name()).where("txn IS NOT NULL")
                       .select(F.regexp_extract("file", r"(\d{20})\.json$", 1).cast("long").alias("commit"),
                               "txn.appId", "txn.version")
                       .where(F.col("commit") > after))
    out: dict[str, int] = {}
    for source in sources:
        for row in source.orderBy("commit").collect():
            out[str(row["appId"])] = int(row["version"])
    return out


def table_store(spark: SparkSession, root: str, caps: Capabilities, catalog: str | None = None,
                schema: str | None = None) -> TableStore:
    """Pick the backend: native Delta when the session has it, delta-rs otherwise."""
    if caps.native_delta:
        return SparkDeltaTableStore(spark, root, catalog, schema)
    if catalog or schema:
        log.warning("storage.catalog/storage.schema need native Delta (Databricks); using paths under %s", root)
    return DeltaRsTableStore(spark, root)
