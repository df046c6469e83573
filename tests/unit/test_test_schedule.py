"""The suite's own plumbing: the order files go to the xdist workers, and the Lite end-to-end
fixtures' choice of scenarios. Both only save time, so a mistake in them would show as nothing
but a slower or silently thinner run; these tests make it show."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from e2e.harness import scenarios_to_run
from schedule import MEASURED_SECONDS, longest_files_first

TESTS = Path(__file__).resolve().parents[1]


def test_every_ranked_file_exists() -> None:
    """A renamed file would silently fall to the end of the queue."""
    assert [name for name in MEASURED_SECONDS if not (TESTS / name).is_file()] == []


def test_longest_files_first_keeps_each_files_order() -> None:
    def item(path: str, name: str) -> SimpleNamespace:
        return SimpleNamespace(path=TESTS / path, name=name)

    items = [item("unit/test_a.py", "a1"), item("e2e/test_cps_sink.py", "s1"), item("unit/test_a.py", "a2"),
             item("reliability/test_kill9.py", "k1"), item("e2e/test_cps_sink.py", "s2"), item("unit/test_b.py", "b1")]
    longest_files_first(items, TESTS)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["k1", "s1", "s2", "a1", "a2", "b1"]


def _request(fixture: str, *tests: tuple[str, bool]) -> SimpleNamespace:
    """A fixture request in a module whose selected tests are ``(name, uses the fixture)``, plus
    one test of another module that uses a fixture of the same name."""
    module, other = object(), object()
    items = [SimpleNamespace(module=module, originalname=name, fixturenames=[fixture] if uses else [])
             for name, uses in tests]
    items.append(SimpleNamespace(module=other, originalname="test_elsewhere", fixturenames=[fixture]))
    return SimpleNamespace(fixturename=fixture, module=module, session=SimpleNamespace(items=items))


def test_scenarios_are_those_of_the_selected_tests_that_use_the_fixture() -> None:
    # the test that does not use the fixture, and the other module's test, are in the table too:
    # only the filter keeps their scenarios out
    table = {"test_model": {"model"}, "test_also_model": {"model"}, "test_kill": {"recovery"},
             "test_other": {"other"}, "test_elsewhere": {"elsewhere"}}
    request = _request("sink_run", ("test_model", True), ("test_also_model", True), ("test_other", False))
    assert scenarios_to_run(request, table) == {"model"}
    request = _request("sink_run", ("test_model", True), ("test_kill", True))
    assert scenarios_to_run(request, table) == {"model", "recovery"}


def test_a_test_missing_from_the_table_is_an_error() -> None:
    request = _request("sink_run", ("test_model", True), ("test_new", True))
    with pytest.raises(AssertionError, match=r"sink_run: no scenarios listed for \['test_new'\]"):
        scenarios_to_run(request, {"test_model": {"model"}})
