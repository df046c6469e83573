"""The convert stages' outbox row count: asked of the store once, then moved by their own appends."""

from __future__ import annotations

from typing import Any

import pytest

from pubsub_connect.io.tables import TableRef
from pubsub_connect.pipelines.outbox_count import OutboxRowCount

OUTBOX = TableRef("outbox", "conn")


class CountingStore:
    """Answers ``row_count`` with what the table holds and counts the questions; ``append_batch``
    adds the rows it is given unless told to skip (a replayed batch) or to fail."""

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
        self.rows += len(df)
        return True


def store_and_count(rows: int) -> tuple[CountingStore, OutboxRowCount]:
    store = CountingStore(rows)
    count: Any = OutboxRowCount(store, OUTBOX)  # type: ignore[arg-type]  # only these two methods are used
    return store, count


def test_the_store_is_asked_once_and_appends_move_the_count() -> None:
    store, count = store_and_count(40)
    assert count.current() == 40
    assert count.append_batch([0] * 7, 7, "app", 1) is True
    assert count.current() == 47
    count.append_batch([0] * 3, 3, "app", 2)
    assert count.current() == 50 == store.rows
    assert store.asked == [OUTBOX]


def test_after_a_skipped_append_the_store_is_asked_again() -> None:
    store, count = store_and_count(10)
    assert count.current() == 10
    store.outcome, store.rows = "skip", 15  # the batch was already in the table
    assert count.append_batch([0] * 5, 5, "app", 1) is False
    assert count.current() == 15
    assert store.asked == [OUTBOX, OUTBOX]


def test_after_a_failed_append_the_store_is_asked_again() -> None:
    store, count = store_and_count(10)
    assert count.current() == 10
    store.outcome = "fail"
    with pytest.raises(RuntimeError, match="commit failed"):
        count.append_batch([0] * 5, 5, "app", 1)
    store.rows = 12  # whatever the failed commit left
    assert count.current() == 12
    assert store.asked == [OUTBOX, OUTBOX]


def test_appends_before_the_first_look_up_are_not_counted_twice() -> None:
    store, count = store_and_count(9)
    count.append_batch([0] * 4, 4, "app", 1)  # nothing known yet: the look-up includes these rows
    assert count.current() == 13 == store.rows and store.asked == [OUTBOX]
