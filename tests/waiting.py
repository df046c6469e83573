"""Waiting in tests: on an event or on data, never for a fixed time.

A test that sleeps "long enough" is slow when the machine is idle and flaky when it is busy;
a test that polls for the condition it needs is as fast as the system and fails with a message
naming what never happened. A condition may also raise (e.g. ``AssertionError`` when the
process it waits on has died) to stop waiting early with its own message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout_s: float, what: str | Callable[[], str],
               *, interval_s: float = 0.05) -> T:
    """Poll ``condition`` until it returns something truthy, and return that.

    Fails with ``AssertionError`` ("timed out after ... s waiting for <what>") if ``timeout_s``
    passes first; ``what`` is a text, or a function that makes one at the moment of failure (e.g.
    to show a log's tail). The condition is checked once more after the deadline, so a slow
    condition still gets its last chance.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            described = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {described}")
        time.sleep(interval_s)
