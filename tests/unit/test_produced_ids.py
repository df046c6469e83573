"""The fused Cloud Pub/Sub source's journal of produced message ids (``pipelines/produced_ids.py``):
what a restart knows, given what the Kafka marker topic says committed. The loop around it runs
end to end in ``e2e/test_cps_source_fused.py``."""

from __future__ import annotations

import json
from pathlib import Path

from pubsub_connect.pipelines.produced_ids import ProducedIds


def journal(tmp_path: Path, remembered: int = 100) -> ProducedIds:
    return ProducedIds(tmp_path / "fused", "c", remembered=remembered)


def test_a_restart_knows_the_committed_windows_and_aborts_the_others(tmp_path: Path) -> None:
    first = journal(tmp_path)
    first.recover(None)
    one = first.begin(["a", "b", "a"])
    first.committed(one, rows=2)
    two = first.begin(["c"])  # its transaction never committed: the process died
    assert (one.batch_id, one.counter, one.message_ids) == (0, 0, ("a", "b"))
    assert (two.batch_id, two.counter) == (1, 2)

    again = journal(tmp_path)
    assert again.sequence == first.sequence  # the markers' sequence outlives the process
    again.recover(last_committed=0)
    assert again.fresh(["a", "b", "c", "d"]) == [False, False, True, True]
    assert again.counter == 2
    assert json.loads((tmp_path / "fused" / f"{1:020d}.json").read_text())["aborted"] is True
    three = again.begin(["c", "d"])
    assert three.batch_id == 2  # never 1 again: its marker and dead-letter appends are once per number

    last = journal(tmp_path)
    last.recover(last_committed=0)  # window 2 did not commit either: window 1's file is no longer needed
    assert sorted(int(p.stem) for p in (tmp_path / "fused").glob("[0-9]*.json")) == [0, 2]
    assert last.begin(["c"]).batch_id == 3


def test_a_window_committed_before_its_file_was_completed_is_rechecked(tmp_path: Path) -> None:
    """The process died between the window's transaction and its dead letters: its ids come
    again to be converted again (those that convert are then left out of the produce), and the
    counter moves by every fresh id of it (an upper bound)."""
    first = journal(tmp_path)
    first.recover(None)
    first.begin(["a", "b", "c"])  # committed in Kafka; the process died before committed()
    again = journal(tmp_path)
    again.recover(last_committed=0)
    assert again.fresh(["a", "b", "c"]) == [True, True, True]
    assert again.recheck == {"a", "b", "c"}
    assert again.counter == 3
    window = again.begin(["a", "b", "c", "d"])
    again.committed(window, rows=1)  # d produced; a, b, c left out (converted) or dead-lettered
    assert again.recheck == set()
    assert again.fresh(["a", "d"]) == [False, False]


def test_a_window_after_the_last_marker_of_another_sequence_is_not_produced(tmp_path: Path) -> None:
    first = journal(tmp_path)
    first.recover(None)
    first.begin(["a"])
    again = journal(tmp_path)
    again.recover(last_committed=None)  # the marker topic knows nothing of this sequence
    assert again.fresh(["a"]) == [True]


def test_the_oldest_files_go_once_enough_ids_are_remembered_after_them(tmp_path: Path) -> None:
    ids = journal(tmp_path, remembered=4)
    ids.recover(None)
    for batch in range(4):
        ids.committed(ids.begin([f"{batch}-x", f"{batch}-y"]), rows=2)
    kept = sorted(int(p.stem) for p in (tmp_path / "fused").glob("[0-9]*.json"))
    assert kept == [2, 3]
    assert ids.fresh(["0-x", "1-y", "2-x", "3-y"]) == [True, True, False, False]


def test_what_the_staged_mode_produced_is_known_after_a_take_over(tmp_path: Path) -> None:
    ids = journal(tmp_path)
    ids.seed(["s1", "s2"], counter=7)
    again = journal(tmp_path)
    again.recover(None)
    assert again.fresh(["s1", "s2", "n"]) == [False, False, True]
    assert again.begin(["n"]).counter == 7
