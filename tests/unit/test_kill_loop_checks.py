"""The kill -9 loops' own checks reject what they exist to catch: a kill between batches, a lost
id, an id that is not one of ours, a duplicate outside every batch a kill cut short.

The loops themselves (``tests/reliability/``) need minutes and real services; these checks are the
part of them a wrong output meets, so each is held here against hand-made wrong outputs.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from reliability.kill_loop import Kill, KillPoint, Tally, Target, pending_batch, plan, report
from reliability.scenarios import _versions_read, at_least_once, each_once


def _checkpoint(root: Path, planned: list[int], committed: list[int]) -> Path:
    for folder, ids in (("offsets", planned), ("commits", committed)):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for batch in ids:
            (root / folder / str(batch)).write_text("v1\n{}\n")
    # Spark's temporary and checksum files are not batches.
    (root / "offsets" / f".{max(planned, default=0) + 1}.crc").write_text("")
    (root / "offsets" / f".{max(planned, default=0) + 5}.tmp").write_text("")
    return root


def test_pending_batch_is_the_planned_batch_without_a_commit(tmp_path: Path) -> None:
    assert pending_batch(_checkpoint(tmp_path / "a", [0, 1, 2], [0, 1])) == 2
    assert pending_batch(_checkpoint(tmp_path / "b", [0, 1, 2], [0, 1, 2])) is None  # between batches
    assert pending_batch(_checkpoint(tmp_path / "c", [], [])) is None
    assert pending_batch(tmp_path / "missing") is None


def _kill(connector: str, interrupted: dict[str, dict[str, int]]) -> Kill:
    return Kill(KillPoint(0, connector, "publish", 1, 0.0), 1.0, interrupted)


def test_report_names_a_connector_whose_kill_cut_nothing_short(capsys: pytest.CaptureFixture[str]) -> None:
    kills = [_kill("a", {"a": {"publish": 3}, "b": {}}), _kill("b", {"a": {"convert": 4}, "b": {}})]
    assert report("native", kills, {"a": Tally(10), "b": Tally(10, 2)}) == ["b"]
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "kill -9 summary [native] a: kills 2, timed by it 1, interrupted its work 2, ids checked 10, "
        "duplicates by id 0",
        "kill -9 summary [native] b: kills 2, timed by it 1, interrupted its work 0, ids checked 10, "
        "duplicates by id 2",
    ]


def test_report_with_several_connectors_holds_each_to_the_kills_it_timed() -> None:
    # "a" timed the first kill and it cut a's work short; the second, timed by "b", found "a"
    # between batches: no fault of a's. "b"'s own kill cut nothing of b's short: a fault.
    kills = [_kill("a", {"a": {"publish": 3}, "b": {}}), _kill("b", {"a": {}, "b": {}})]
    assert report("fallback", kills, {"a": Tally(1), "b": Tally(1)}, deciders_only=True) == ["b"]
    assert report("fallback", kills, {"a": Tally(1), "b": Tally(1)}) == ["a", "b"]


def test_plan_is_seeded_and_every_connector_decides_in_turn() -> None:
    targets = [Target(name, ("convert", "publish"), lambda _pid: {}) for name in "abcde"]
    first, again = plan(targets, 5, seed=7), plan(targets, 5, seed=7)
    assert first == again
    assert sorted(p.connector for p in first) == list("abcde")
    assert all(1 <= p.after_batches <= 2 and 0 <= p.delay_s <= 0.05 for p in first)


def test_each_once_rejects_a_lost_a_foreign_and_a_duplicated_id() -> None:
    each_once(Counter([1, 2, 3]), [1, 2, 3], "table")
    with pytest.raises(AssertionError, match=r"lost 1 \['2'\]"):
        each_once(Counter([1, 3]), [1, 2, 3], "table")
    with pytest.raises(AssertionError, match=r"unexpected 1 \['9'\]"):
        each_once(Counter([1, 2, 3, 9]), [1, 2, 3], "table")
    with pytest.raises(AssertionError, match=r"duplicated 1 \[\(3, 2\)\]"):
        each_once(Counter([1, 2, 3, 3]), [1, 2, 3], "table")


def test_at_least_once_allows_repeats_only_of_a_replayed_batch() -> None:
    assert at_least_once(Counter([1, 2, 2, 3, 3]), [1, 2, 3], {2, 3}, "Pub/Sub") == 2
    with pytest.raises(AssertionError, match=r"1 id\(s\) repeated outside every batch a kill cut short, e.g. \['1'\]"):
        at_least_once(Counter([1, 1, 2, 2, 3]), [1, 2, 3], {2, 3}, "Pub/Sub")
    with pytest.raises(AssertionError, match=r"lost 1 \['3'\]"):
        at_least_once(Counter([1, 2, 2]), [1, 2, 3], {2}, "Pub/Sub")
    with pytest.raises(AssertionError, match=r"unexpected 1 \['4'\]"):
        at_least_once(Counter([1, 2, 3, 4]), [1, 2, 3], set(), "Pub/Sub")


def test_versions_a_batch_may_have_read_include_both_ends() -> None:
    # Delta Lake's source offsets: a batch can start and end inside one table version.
    delta = {"reservoirVersion": 7, "index": 3}
    assert _versions_read({"reservoirVersion": 5, "index": 9}, delta) == range(5, 8)
    assert _versions_read(None, delta) == range(0, 8)
    # The fallback's offsets name the last version read.
    assert _versions_read({"version": 5}, {"version": 7}) == range(6, 8)
    assert _versions_read(None, {"version": 2}) == range(0, 3)
