"""The table store on both backends — Delta Lake on Spark (the engine) and delta-rs (the fallback):
idempotent replay (the commits' batch marks on Delta Lake, Delta transaction ids on delta-rs), batch
and streaming reads."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql.types import (
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pubsub_connect.io.spark import Capabilities
from pubsub_connect.io.tables import (
    DeltaRsTableStore,
    SparkDeltaTableStore,
    TableRef,
    TableStore,
    _log_transactions,
    table_store,
)

SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("attributes", MapType(StringType(), StringType())),
    StructField("ts", TimestampType()),
    StructField("seq", LongType()),
])
UTC = dt.timezone.utc


def _rows(start: int, count: int) -> list[tuple]:
    return [(f"k{i}".encode(), {"i": str(i)}, dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=i), i)
            for i in range(start, start + count)]


@pytest.fixture(params=["delta-spark", "delta-rs"])
def store(request: pytest.FixtureRequest, spark, tmp_path: Path) -> TableStore:
    native = request.param == "delta-spark"
    chosen = table_store(spark, str(tmp_path / "root"), Capabilities(native_kafka=False, native_delta=native))
    assert isinstance(chosen, SparkDeltaTableStore if native else DeltaRsTableStore)
    return chosen


def _native_store(spark, tmp_path: Path) -> SparkDeltaTableStore:
    store = table_store(spark, str(tmp_path / "root"), Capabilities(native_kafka=False, native_delta=True))
    assert isinstance(store, SparkDeltaTableStore)
    return store


def _history_metadata(spark, store: TableStore, ref: TableRef) -> list[str | None]:
    rows = spark.sql(f"DESCRIBE HISTORY delta.`{store.path(ref)}`").collect()
    return [row.userMetadata for row in sorted(rows, key=lambda row: row.version)]


def test_native_appends_mark_their_commits_instead_of_delta_transaction_ids(spark, tmp_path: Path) -> None:
    """Each append's commit says which batch of which app id it is (``userMetadata``); only the
    first append of an app id after a start also writes a ``txn`` action, since checking one
    rebuilds the table's state. A new store (a restart) finds the newest mark, behind another app
    id's commits too."""
    store = _native_store(spark, tmp_path)
    ref = TableRef("outbox", "marks")
    store.ensure(ref, SCHEMA)
    for batch in range(3):
        assert store.append_batch(ref, spark.createDataFrame(_rows(batch, 1), SCHEMA), "marks/convert@q1", batch)
    assert store.append_batch(ref, spark.createDataFrame(_rows(9, 1), SCHEMA), "marks/convert-dlq@q1", 2)
    assert _history_metadata(spark, store, ref) == [
        None, "pubsub-connect batch 0 of marks/convert@q1", "pubsub-connect batch 1 of marks/convert@q1",
        "pubsub-connect batch 2 of marks/convert@q1", "pubsub-connect batch 2 of marks/convert-dlq@q1"]
    assert _log_transactions(spark, store.path(ref)) == {"marks/convert@q1": 0, "marks/convert-dlq@q1": 2}
    restarted = _native_store(spark, tmp_path)
    assert restarted.committed_version(ref, "marks/convert@q1") == 2
    assert restarted.append_batch(ref, spark.createDataFrame(_rows(99, 1), SCHEMA), "marks/convert@q1", 2) is False
    assert restarted.append_batch(ref, spark.createDataFrame(_rows(3, 1), SCHEMA), "marks/convert@q1", 3) is True
    assert sorted(r.seq for r in store.read(ref).collect()) == [0, 1, 2, 3, 9]


def test_a_new_query_of_the_stage_starts_afresh_and_an_append_that_raised_after_its_commit_is_found(
        spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replaced checkpoint (new query id) is not mistaken for a replay: the earlier query's mark
    ends the search. An append that committed and then raised is looked up before its retry."""
    store = _native_store(spark, tmp_path)
    ref = TableRef("bronze", "fresh")
    for batch in range(2):
        assert store.append_batch(ref, spark.createDataFrame(_rows(batch, 1), SCHEMA), "fresh/ingest@q1", batch)
    assert store.committed_version(ref, "fresh/ingest@q2") is None
    append = SparkDeltaTableStore._append

    def commit_then_fail(self: SparkDeltaTableStore, *args: object, **options: str) -> None:
        append(self, *args, **options)
        raise RuntimeError("after the commit")

    monkeypatch.setattr(SparkDeltaTableStore, "_append", commit_then_fail)
    with pytest.raises(RuntimeError, match="after the commit"):
        store.append_batch(ref, spark.createDataFrame(_rows(10, 1), SCHEMA), "fresh/ingest@q2", 0)
    monkeypatch.setattr(SparkDeltaTableStore, "_append", append)
    assert store.append_batch(ref, spark.createDataFrame(_rows(10, 1), SCHEMA), "fresh/ingest@q2", 0) is False
    assert store.append_batch(ref, spark.createDataFrame(_rows(11, 1), SCHEMA), "fresh/ingest@q2", 1) is True
    assert sorted(r.seq for r in store.read(ref).collect()) == [0, 1, 10, 11]


def test_batches_appended_with_delta_transaction_ids_are_still_found(spark, tmp_path: Path) -> None:
    """Tables written with Delta transaction ids (as the fallback engine and earlier versions of
    the native store do): Delta records a write's txn id only as a ``txn`` action of the log (not
    in the history's operation parameters). Past a log checkpoint (every 10 commits) the id must
    still be found, through Delta's JVM API and through the log read that stands in where there
    is no py4j; the marked appends that follow continue from it."""
    store = _native_store(spark, tmp_path)
    ref = TableRef("bronze", "txn")
    path = store.path(ref)

    def txn_append(seq: int, app_id: str, batch: int) -> None:
        (spark.createDataFrame(_rows(seq, 1), SCHEMA).write.format("delta").mode("append")
         .option("txnAppId", app_id).option("txnVersion", str(batch)).save(path))

    for batch in range(12):
        txn_append(batch, "txn/pull-0", batch)
    txn_append(20, "txn/pull-1", 0)
    assert (tmp_path / "root" / "bronze" / "txn" / "_delta_log" / "_last_checkpoint").is_file()
    assert store.committed_version(ref, "txn/pull-0") == 11
    assert store.committed_version(ref, "txn/pull-1") == 0
    assert store.committed_version(ref, "txn/pull-2") is None
    assert _log_transactions(spark, path) == {"txn/pull-0": 11, "txn/pull-1": 0}
    # the replay is reported as skipped and leaves the table as it was
    assert store.append_batch(ref, spark.createDataFrame(_rows(99, 1), SCHEMA), "txn/pull-0", 11) is False
    assert store.count(ref) == 13
    assert store.append_batch(ref, spark.createDataFrame(_rows(12, 1), SCHEMA), "txn/pull-0", 12) is True
    assert _native_store(spark, tmp_path).committed_version(ref, "txn/pull-0") == 12
    assert store.count(ref) == 14


def test_layout_under_storage_root(store: DeltaRsTableStore, tmp_path: Path) -> None:
    root = tmp_path / "root"
    assert store.path(TableRef("bronze", "c1")) == str(root / "bronze" / "c1")
    assert store.path(TableRef("dlq", "c1")) == str(root / "dlq" / "c1")
    assert store.checkpoint("c1", "ingest") == str(root / "checkpoints" / "c1" / "ingest")
    with pytest.raises(ValueError, match="table kind"):
        TableRef("silver", "c1")


def test_replayed_batch_leaves_table_unchanged(spark, store: TableStore) -> None:
    ref = TableRef("bronze", "replay")
    batch0 = spark.createDataFrame(_rows(0, 3), SCHEMA)
    batch1 = spark.createDataFrame(_rows(3, 2), SCHEMA)
    assert store.append_batch(ref, batch0, "replay/ingest", 0) is True
    assert store.append_batch(ref, batch1, "replay/ingest", 1) is True
    version_before = DeltaTable(store.path(ref)).version()
    # Spark replays the last planned batch after a crash: same batch id, must be skipped
    assert store.append_batch(ref, batch1, "replay/ingest", 1) is False
    assert store.append_batch(ref, batch0, "replay/ingest", 0) is False
    assert DeltaTable(store.path(ref)).version() == version_before
    assert store.committed_version(ref, "replay/ingest") == 1
    # another writer (app id) has its own sequence
    assert store.committed_version(ref, "replay/other") is None
    seqs = sorted(r.seq for r in store.read(ref).collect())
    assert seqs == [0, 1, 2, 3, 4]


def test_rows_appended_without_a_transaction_id_to_a_table_created_with_properties(store: TableStore) -> None:
    """``append_rows`` (the pull stage's append) records no transaction id, so appending the same
    rows twice keeps both; ``ensure`` writes the store's table properties and the caller's into the
    table's metadata."""
    import pyarrow as pa

    ref = TableRef("bronze", "pulled")
    store.ensure(ref, SCHEMA, {"delta.logRetentionDuration": "interval 7 days"})
    arrow_schema = pa.schema([("key", pa.binary()), ("attributes", pa.map_(pa.string(), pa.string())),
                              ("ts", pa.timestamp("us", tz="UTC")), ("seq", pa.int64())])
    rows = pa.Table.from_pylist([{"key": b"k1", "attributes": [("i", "1")], "ts": None, "seq": 1},
                                 {"key": None, "attributes": None, "ts": None, "seq": 2}], schema=arrow_schema)
    store.append_rows(ref, rows, SCHEMA)
    store.append_rows(ref, rows, SCHEMA)
    assert sorted((r.seq, r.key, r.attributes) for r in store.read(ref).collect()) == \
        [(1, b"k1", {"i": "1"}), (1, b"k1", {"i": "1"}), (2, None, None), (2, None, None)]
    table = DeltaTable(store.path(ref))
    assert table.metadata().configuration == {"delta.checkpointInterval": "100",
                                              "delta.logRetentionDuration": "interval 7 days"}
    assert table.version() == 2  # the creation, then one commit per append
    assert _log_transactions(store.spark, store.path(ref)) == {}


def test_batch_read_roundtrips_types(spark, store: TableStore) -> None:
    ref = TableRef("outbox", "types")
    store.append_batch(ref, spark.createDataFrame([*_rows(7, 1), (None, None, None, 8)], SCHEMA), "a", 0)
    rows = sorted(store.read(ref).collect(), key=lambda r: r.seq)
    assert rows[0].key == b"k7" and rows[0].attributes == {"i": "7"} and rows[0].seq == 7
    assert rows[0].ts == dt.datetime(2024, 1, 1, 0, 0, 7)  # session time zone is UTC
    assert (rows[1].key, rows[1].attributes, rows[1].ts) == (None, None, None)
    assert store.read(ref).schema == SCHEMA


def test_stream_reads_each_commit_once_across_restarts(spark, store: TableStore, tmp_path: Path) -> None:
    ref = TableRef("bronze", "stream")
    store.ensure(ref, SCHEMA)
    assert store.count(ref) == 0
    checkpoint = str(tmp_path / "cp")
    seen: list[tuple[int, list[int]]] = []

    def collect(df, batch_id: int) -> None:
        seen.append((batch_id, sorted(r.seq for r in df.collect())))

    def drain(max_files: int | None = None) -> None:
        query = (store.read_stream(ref, max_files).writeStream.foreachBatch(collect)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None

    for i in range(3):  # three commits of two rows
        store.append_batch(ref, spark.createDataFrame(_rows(i * 2, 2), SCHEMA).coalesce(1), "w", i)
    drain(max_files=1)
    assert [rows for _, rows in seen] == [[0, 1], [2, 3], [4, 5]]
    store.append_batch(ref, spark.createDataFrame(_rows(6, 3), SCHEMA).coalesce(1), "w", 3)
    drain()  # a new query on the same checkpoint resumes after the last committed version
    assert [rows for _, rows in seen][3:] == [[6, 7, 8]]
    assert [batch for batch, _ in seen] == [0, 1, 2, 3]


def test_a_batch_following_the_stores_own_is_not_checked_and_a_concurrent_replay_is_refused(
        spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The native store reads the table's marks only before the first batch after a start (the
    batch that follows one it appended is new: Spark runs a new batch id in one query only), and
    that first batch carries Delta's transaction id: of two processes restarted at once that both
    replay a batch (both found it missing), Delta refuses the second's commit."""
    capabilities = Capabilities(native_kafka=False, native_delta=True)
    first = table_store(spark, str(tmp_path / "root"), capabilities)
    ref = TableRef("bronze", "follow")
    assert first.append_batch(ref, spark.createDataFrame(_rows(0, 2), SCHEMA), "follow/ingest", 0) is True
    looked: list[int] = []
    committed_version = SparkDeltaTableStore.committed_version

    def counted(self: SparkDeltaTableStore, table: TableRef, app_id: str) -> int | None:
        looked.append(1)
        return committed_version(self, table, app_id)

    monkeypatch.setattr(SparkDeltaTableStore, "committed_version", counted)
    assert first.append_batch(ref, spark.createDataFrame(_rows(2, 2), SCHEMA), "follow/ingest", 1) is True
    assert looked == []
    assert _log_transactions(spark, first.path(ref)) == {"follow/ingest": 0}
    # two restarted processes replay batch 2: both looked before either committed
    second, third = (table_store(spark, str(tmp_path / "root"), capabilities) for _ in range(2))
    monkeypatch.setattr(SparkDeltaTableStore, "committed_version", lambda *_args: 1)
    assert second.append_batch(ref, spark.createDataFrame(_rows(4, 2), SCHEMA), "follow/ingest", 2) is True
    version = DeltaTable(first.path(ref)).version()
    assert third.append_batch(ref, spark.createDataFrame(_rows(50, 3), SCHEMA), "follow/ingest", 2) is True
    assert DeltaTable(first.path(ref)).version() == version
    assert sorted(r.seq for r in first.read(ref).collect()) == [0, 1, 2, 3, 4, 5]
    assert _log_transactions(spark, first.path(ref)) == {"follow/ingest": 2}


def test_a_table_the_store_created_is_known_empty_until_its_first_append(
        spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new connector's first run: the table the store has just created holds no batch, so its
    first append looks up no marks and its row count needs no read; the append still carries
    Delta's transaction id. A store that found the table existing looks as before, and after the
    creator's own append its counts are read again."""
    creator = _native_store(spark, tmp_path)
    ref = TableRef("outbox", "created")
    looked: list[str] = []
    newest_marks, count = SparkDeltaTableStore._newest_user_metadata, SparkDeltaTableStore.count

    def counted_marks(self: SparkDeltaTableStore, table: TableRef, newest: int) -> list[str | None]:
        looked.append("marks")
        return newest_marks(self, table, newest)

    def counted_rows(self: SparkDeltaTableStore, table: TableRef) -> int:
        looked.append("rows")
        return count(self, table)

    monkeypatch.setattr(SparkDeltaTableStore, "_newest_user_metadata", counted_marks)
    monkeypatch.setattr(SparkDeltaTableStore, "count", counted_rows)
    creator.ensure(ref, SCHEMA)
    other = _native_store(spark, tmp_path)
    other.ensure(ref, SCHEMA)  # exists: this store did not create it
    assert creator.row_count(ref) == 0 and looked == []
    assert creator.append_batch(ref, spark.createDataFrame(_rows(0, 3), SCHEMA), "created/convert@q1", 0) is True
    assert looked == []
    assert _log_transactions(spark, creator.path(ref)) == {"created/convert@q1": 0}
    assert creator.row_count(ref) == 3 and looked == ["rows"]
    assert other.append_batch(ref, spark.createDataFrame(_rows(9, 3), SCHEMA), "created/convert@q1", 0) is False
    assert other.row_count(ref) == 3 and looked == ["rows", "marks", "rows"]
