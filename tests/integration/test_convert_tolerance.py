"""``errors.tolerance=none`` folded into a convert stage's write, on both table backends: one
Spark job converts and appends, and a record that cannot be converted fails it before anything
is committed; the connector then names the first such record in Kafka order."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyspark.sql import functions as F

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.spark import Capabilities
from pubsub_connect.io.tables import OUTBOX, TableRef, TableStore, table_store
from pubsub_connect.model.schemas import PUBSUB_OUTBOX
from pubsub_connect.pipelines.context import ConnectorError
from pubsub_connect.pipelines.cps_sink import OUTBOX_COLUMNS, split_pubsub_outbox
from pubsub_connect.pipelines.dead_letters import append_converted, stop_at_unconvertible
from pubsub_connect.pipelines.observed_counts import ObservedCounts

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CONFIG = cfg.validate_connector({
    "name": "folded", "connector.class": "com.google.pubsub.kafka.sink.CloudPubSubSinkConnector",
    "topics": "t", "cps.project": "p", "cps.topic": "s"}, "<folded>")


@pytest.fixture(params=["delta-spark", "delta-rs"])
def store(request: pytest.FixtureRequest, spark, tmp_path: Path) -> TableStore:
    chosen = table_store(spark, str(tmp_path / "root"),
                         Capabilities(native_kafka=False, native_delta=request.param == "delta-spark"))
    chosen.ensure(TableRef(OUTBOX, "folded"), PUBSUB_OUTBOX)
    return chosen


def _converted(spark, failing: set[tuple[int, int]]):
    """``to_outbox``-shaped rows of three partitions, spread over four Spark partitions; the
    (partition, offset) pairs in ``failing`` could not be converted."""
    rows = [(p, o, None if (p, o) in failing else f"{p}-{o}".encode(),
             "DataException" if (p, o) in failing else None,
             f"bad record {p}@{o}" if (p, o) in failing else None)
            for p in range(3) for o in range(50)]
    raw = spark.createDataFrame(rows, "partition int, offset long, data binary, error_class string, "
                                      "error_message string").repartition(4)
    return raw.select(
        F.lit("t").alias("topic"), "partition", "offset", F.lit(None).cast("binary").alias("key"),
        F.col("data").alias("value"), "data", F.create_map().cast("map<string,string>").alias("attributes"),
        F.lit(None).cast("string").alias("ordering_key"), F.lit(0).cast("long").alias("kafka_timestamp"),
        "error_class", "error_message")


def _context(store: object) -> SimpleNamespace:
    """What ``append_converted`` uses of a pipeline context."""
    return SimpleNamespace(store=store, batch_app_id=lambda _config, stage: f"folded.{stage}")


def _append(store: TableStore, converted, batch_id: int) -> dict[str, int]:
    _, bad = split_pubsub_outbox(converted)
    return append_converted(_context(store), CONFIG, partial(store.append_batch, TableRef(OUTBOX, "folded")),  # type: ignore[arg-type]
                            TableRef("dlq", "folded"), converted, bad, batch_id, OUTBOX_COLUMNS,
                            F.col("data").isNotNull())


def test_convertible_rows_are_appended_in_one_write(spark, store: TableStore) -> None:
    assert _append(store, _converted(spark, set()), 0) == {"failed": 0}
    rows = store.read(TableRef(OUTBOX, "folded")).select("partition", "offset", "data").collect()
    assert sorted((r.partition, r.offset, r.data) for r in rows) == [
        (p, o, f"{p}-{o}".encode()) for p in range(3) for o in range(50)]


def test_a_bad_record_stops_the_write_naming_the_first_in_kafka_order(spark, store: TableStore) -> None:
    assert _append(store, _converted(spark, set()), 0) == {"failed": 0}
    with pytest.raises(ConnectorError) as err:
        _append(store, _converted(spark, {(2, 3), (1, 40), (1, 7)}), 1)
    assert str(err.value) == (
        "record t/1@7 cannot be converted: DataException: bad record 1@7 "
        "(errors.tolerance=none; set errors.tolerance=all to dead-letter such records)")
    assert store.count(TableRef(OUTBOX, "folded")) == 150  # the failed batch wrote nothing
    assert store.committed_version(TableRef(OUTBOX, "folded"), "folded.convert") == 0
    # fixed (the record dead-lettered or the converter changed), the batch is appended
    assert _append(store, _converted(spark, set()), 1) == {"failed": 0}
    assert store.count(TableRef(OUTBOX, "folded")) == 300


def test_any_other_failure_of_the_write_is_raised_as_it_is(spark, store: TableStore) -> None:
    converted = _converted(spark, set())
    _, bad = split_pubsub_outbox(converted)

    def broken(*_args: object) -> bool:
        raise OSError("disk full")

    with pytest.raises(OSError, match=r"^disk full$"):
        append_converted(_context(store), CONFIG, broken, TableRef("dlq", "folded"),  # type: ignore[arg-type]
                         converted, bad, 0, OUTBOX_COLUMNS, F.col("data").isNotNull())


def test_the_observed_counts_come_from_the_write_without_a_job_of_their_own(spark, store: TableStore) -> None:
    converted = _converted(spark, set()).withColumn(
        "data", F.when(F.col("offset") % 10 == 0, F.lit(None)).otherwise(F.col("data")))
    conditions = {"empty": F.col("data").isNull(), "second": F.col("partition") == 1}
    counts = ObservedCounts(converted, **conditions)
    guarded = stop_at_unconvertible(counts.observed, F.col("data").isNotNull()).select(*OUTBOX_COLUMNS)
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("observed-counts", "observed counts")
    try:
        assert store.append_batch(TableRef(OUTBOX, "folded"), guarded, "folded.convert", 0) is True
        jobs = len(tracker.getJobIdsForGroup("observed-counts"))
        assert counts.values() == {"empty": 15, "second": 50}
        observed = len(tracker.getJobIdsForGroup("observed-counts"))
        # never written: counted by a job instead of waiting for metrics that are not coming
        assert ObservedCounts(converted, **conditions).values() == {"empty": 15, "second": 50}
        counted = len(tracker.getJobIdsForGroup("observed-counts"))
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert jobs > 0 and observed == jobs and counted > observed
    assert store.count(TableRef(OUTBOX, "folded")) == 135


def test_the_observed_counts_of_an_action_whose_rows_were_all_filtered_out_before_a_shuffle(spark) -> None:
    """A fused source's window of rechecked messages only: every row is filtered out after the
    observed frame and before the shuffle of the produce. The counts still come (by a job)."""
    converted = _converted(spark, set())
    counts = ObservedCounts(converted, second=F.col("partition") == 1)
    rechecked = [row.offset for row in converted.select("offset").collect()]
    nothing = (counts.observed.filter(~F.col("offset").isin(rechecked)).select("offset").repartition(1)
               .sortWithinPartitions("offset").mapInArrow(lambda batches: batches, "offset long"))
    assert nothing.collect() == []
    assert counts.values() == {"second": 50}
