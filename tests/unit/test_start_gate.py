"""Stage starts of one process go one at a time: the next waits for the last one's first trigger."""

from __future__ import annotations

import threading

from pubsub_connect.pipelines.runner.start_gate import StartGate


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Query:
    """A query that has not reported progress until told; counts how often it is asked."""

    def __init__(self) -> None:
        self.progress: dict | None = None
        self.asked = 0
        self.changed = threading.Condition()

    @property
    def lastProgress(self) -> dict | None:
        with self.changed:
            self.asked += 1
            self.changed.notify_all()
            return self.progress


def test_the_gate_opens_when_the_holders_query_reports_its_first_trigger() -> None:
    gate, query = StartGate(clock=Clock()), Query()
    assert not gate.busy
    gate.enter("a")
    assert gate.busy  # starting: nothing to watch yet
    gate.started("a", query)
    assert gate.busy
    query.progress = {"batchId": 0, "numInputRows": 0}
    assert not gate.busy


def test_a_start_is_let_through_after_the_time_limit() -> None:
    clock = Clock()
    gate = StartGate(max_hold_s=20, clock=clock)
    gate.enter("a")
    gate.started("a", Query())
    clock.now += 19.9
    assert gate.busy
    clock.now += 0.1
    assert not gate.busy


def test_only_the_holder_opens_the_gate() -> None:
    gate = StartGate(clock=Clock())
    gate.enter("a")
    gate.leave("b")  # a runner that stopped or failed without holding the gate
    gate.started("b", Query())
    assert gate.busy
    gate.leave("a")
    assert not gate.busy


def test_a_holder_whose_query_cannot_be_asked_does_not_hold() -> None:
    class Gone:
        @property
        def lastProgress(self) -> dict:
            raise RuntimeError("the session is stopped")

    gate = StartGate(clock=Clock())
    gate.enter("a")
    gate.started("a", Gone())
    assert not gate.busy


def test_a_waiting_start_goes_as_soon_as_the_previous_one_settles() -> None:
    gate, query = StartGate(clock=Clock()), Query()
    gate.enter("a")
    gate.started("a", query)
    waiting, entered = threading.Event(), threading.Event()

    def second() -> None:
        waiting.set()
        gate.enter("b")
        entered.set()

    thread = threading.Thread(target=second)
    thread.start()
    assert waiting.wait(10)
    with query.changed:  # asked twice by the waiting thread: it is looping inside enter()
        assert query.changed.wait_for(lambda: query.asked >= 2, timeout=10)
    assert not entered.is_set()
    query.progress = {"batchId": 0}
    assert entered.wait(10)
    thread.join(10)
    assert gate.busy  # now "b" holds it
