"""The convert stages' outbox row count: asked of the store once, then moved by their own appends."""

from __future__ import annotations

from typing import Any

from pubsub_connect.io.tables import TableRef
from pubsub_connect.pipelines.outbox_count import OutboxRowCount

OUTBOX = TableRef("outbox", "conn")


class CountingStore:
    """Answers ``row_count`` with what the table holds, and counts the questions."""

    def __init__(self, rows: int):
        self.rows = rows
        self.asked: list[TableRef] = []

    def row_count(self, table: TableRef) -> int:
        self.asked.append(table)
        return self.rows


def store_and_count(rows: int) -> tuple[CountingStore, OutboxRowCount]:
    store = CountingStore(rows)
    count: Any = OutboxRowCount(store, OUTBOX)  # type: ignore[arg-type]  # only row_count is used
    return store, count


def test_the_store_is_asked_once_and_appends_move_the_count() -> None:
    store, count = store_and_count(40)
    assert count.current() == 40
    store.rows += 7
    count.appended(7)
    assert count.current() == 47
    store.rows += 3
    count.appended(3)
    assert count.current() == 50 == store.rows
    assert store.asked == [OUTBOX]


def test_after_forget_the_store_is_asked_again() -> None:
    store, count = store_and_count(10)
    assert count.current() == 10
    count.appended(5)  # a batch the store skipped as already appended: the stage forgets instead
    count.forget()
    store.rows = 12
    assert count.current() == 12
    assert store.asked == [OUTBOX, OUTBOX]


def test_appends_before_the_first_look_up_are_not_counted_twice() -> None:
    store, count = store_and_count(9)
    count.appended(4)  # nothing known yet: the look-up will include these rows
    assert count.current() == 9 and store.asked == [OUTBOX]
