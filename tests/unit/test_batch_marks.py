"""The marks a stage's appends leave in their commits, and the search for the newest one."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pubsub_connect.io.batch_marks import batch_mark, last_marked_batch, parse_batch_mark, query_part, stage_app_id

APP = "orders/ingest@1b9d6bcd-bbfd-4b2d-9b5d-ab8dfbbd4bed"
EARLIER = "orders/ingest@0c6f2e2a-7f51-4c8e-a3b5-9d4e1f0a2b3c"


class History:
    """A table's commits' ``userMetadata``, newest first, counting what each search read."""

    def __init__(self, newest_first: Sequence[str | None]):
        self.metadata = list(newest_first)
        self.asked: list[int] = []

    def __call__(self, count: int) -> list[str | None]:
        self.asked.append(count)
        return self.metadata[:count]


def test_a_mark_reads_back_as_its_app_id_and_batch() -> None:
    assert batch_mark(APP, 42) == f"pubsub-connect batch 42 of {APP}"
    assert parse_batch_mark(batch_mark(APP, 42)) == (APP, 42)
    assert parse_batch_mark(batch_mark("a/b", 0)) == ("a/b", 0)
    for other in (None, "", "nightly load", "pubsub-connect batch x of a", "pubsub-connect batch 3 of "):
        assert parse_batch_mark(other) is None
    assert query_part(APP) == "orders/ingest" and query_part("orders/convert-dlq@q") == "orders/convert-dlq"
    assert query_part("no-query-id") == "no-query-id"
    assert stage_app_id("orders/ingest", "1b9d6bcd-bbfd-4b2d-9b5d-ab8dfbbd4bed") == APP
    assert query_part(stage_app_id("orders/convert-dlq", "q")) == "orders/convert-dlq"


def test_the_newest_mark_of_the_app_id_is_found_behind_other_commits() -> None:
    history = History([None, "OPTIMIZE by hand", batch_mark("orders/convert-dlq@q", 9), batch_mark(APP, 7),
                       batch_mark(APP, 6)])
    assert last_marked_batch(history, APP) == 7
    assert history.asked == [10]


def test_the_search_widens_its_window_until_a_mark_settles_it() -> None:
    history = History([None] * 150 + [batch_mark(APP, 3)] + [None] * 10)
    assert last_marked_batch(history, APP, windows=(10, 100, 1000)) == 3
    assert history.asked == [10, 100, 1000]


def test_an_earlier_query_of_the_same_stage_ends_the_search_without_a_batch() -> None:
    history = History([batch_mark("orders/convert@q", 5), batch_mark(EARLIER, 40), batch_mark(APP, 2)])
    assert last_marked_batch(history, APP) is None
    assert history.asked == [10]


@pytest.mark.parametrize("metadata, windows, asked", [
    ([], (10, 100), [10]),  # an empty log
    ([None] * 12, (10, 100), [10, 100]),  # the table's first commit reached in the second window
    ([None] * 30, (10, 20), [10, 20]),  # the windows end first
])
def test_no_mark_of_the_app_id_gives_none(metadata: list[str | None], windows: tuple[int, ...],
                                          asked: list[int]) -> None:
    history = History(metadata)
    assert last_marked_batch(history, APP, windows=windows) is None
    assert history.asked == asked
