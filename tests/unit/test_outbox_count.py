"""The convert stages' outbox row count: asked of the store once, then moved by their own appends."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from pubsub_connect.io.tables import TableRef
from pubsub_connect.pipelines.outbox_count import OutboxRowCount

OUTBOX = TableRef("outbox", "conn")


class CountingStore:
    """Answers ``row_count`` with what the table holds and counts the questions; ``append_batch``
    writes the frame it is given (one Spark action, like a Delta append) unless told to skip (a
    replayed batch), to fail, or to write without reading the frame (no count comes back)."""

    def __init__(self, rows: int):
        self.rows = rows
        self.asked: list[TableRef] = []
        self.outcome = "append"

    def row_count(self, table: TableRef) -> int:
        self.asked.append(table)
        return self.rows

    def append_batch(self, table: TableRef, df: Any, app_id: str, batch_id: int) -> bool:
        assert table == OUTBOX
        if self.outcome == "fail":
            raise RuntimeError("commit failed")
        if self.outcome == "skip":
            return False
        if self.outcome == "unread":
            self.rows += 1
            return True
        self.rows += len(df.collect())
        return True


def store_and_count(rows: int) -> tuple[CountingStore, OutboxRowCount]:
    store = CountingStore(rows)
    count: Any = OutboxRowCount(store, OUTBOX)  # type: ignore[arg-type]  # only these two methods are used
    return store, count


def test_the_store_is_asked_once_and_appends_move_the_count(spark: Any) -> None:
    store, count = store_and_count(40)
    assert count.current() == 40
    assert count.append_batch(spark.range(7), "app", 1) is True
    assert count.current() == 47
    count.append_batch(spark.range(3), "app", 2)
    assert count.current() == 50 == store.rows
    assert store.asked == [OUTBOX]


def test_the_rows_are_counted_by_the_appends_own_job(spark: Any, tmp_path: Path) -> None:
    """A frame that counts differently once written (as the Cloud Pub/Sub source's frame leaves
    out the message ids the outbox holds; here it leaves out every row once a file exists) is
    counted as the append read it, with no job of its own."""
    written = tmp_path / "written"
    store, count = store_and_count(0)
    count.current()
    frame = spark.range(10).filter(F.udf(lambda _id: not os.path.exists(written), "boolean")("id"))

    def append_then_change(table: TableRef, df: Any, app_id: str, batch_id: int) -> bool:
        written.write_text(str(len(df.collect())))
        return True

    store.append_batch = append_then_change  # type: ignore[method-assign]
    jobs_before = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    assert count.append_batch(frame, "app", 1) is True
    assert written.read_text() == "10" and count.current() == 10
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup()) - jobs_before == 1  # the append's
    assert frame.count() == 0  # computed again, it would count nothing


def test_after_a_skipped_append_the_store_is_asked_again(spark: Any) -> None:
    store, count = store_and_count(10)
    assert count.current() == 10
    store.outcome, store.rows = "skip", 15  # the batch was already in the table
    assert count.append_batch(spark.range(5), "app", 1) is False
    assert count.current() == 15
    assert store.asked == [OUTBOX, OUTBOX]


def test_after_a_failed_append_the_store_is_asked_again(spark: Any) -> None:
    store, count = store_and_count(10)
    assert count.current() == 10
    store.outcome = "fail"
    with pytest.raises(RuntimeError, match="commit failed"):
        count.append_batch(spark.range(5), "app", 1)
    store.rows = 12  # whatever the failed commit left
    assert count.current() == 12
    assert store.asked == [OUTBOX, OUTBOX]


def test_an_append_that_brought_no_count_has_the_store_asked_again(spark: Any) -> None:
    store, count = store_and_count(10)
    assert count.current() == 10
    store.outcome = "unread"
    assert count.append_batch(spark.range(5), "app", 1) is True
    assert count.current() == 11 == store.rows
    assert store.asked == [OUTBOX, OUTBOX]


def test_appends_before_the_first_look_up_are_not_counted_twice(spark: Any) -> None:
    store, count = store_and_count(9)
    count.append_batch(spark.range(4), "app", 1)  # nothing known yet: the look-up includes these rows
    assert count.current() == 13 == store.rows and store.asked == [OUTBOX]
