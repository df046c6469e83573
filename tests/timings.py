"""Start-up timings of expensive session fixtures, shown in pytest's terminal summary.

A conftest that starts something slow (a Spark cluster, Google's connector in Kafka Connect)
records how long it took in a dict of its own and prints it under its own heading, so a slow
run says where its time went. ``pytest_terminal_summary`` has no fixture access, hence a dict
at module level rather than a fixture.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def timed(timings: dict[str, float], what: str) -> Iterator[None]:
    """Record how long the ``with`` body took in ``timings[what]`` (also when it raises)."""
    started = time.monotonic()
    try:
        yield
    finally:
        timings[what] = time.monotonic() - started


def write_timings(terminalreporter: pytest.TerminalReporter, title: str, timings: dict[str, float]) -> None:
    """One section ``title`` listing ``timings`` (what → seconds); nothing if none were recorded."""
    if timings:
        terminalreporter.write_sep("-", title)
        for what, seconds in timings.items():
            terminalreporter.write_line(f"{what}: {seconds:.1f} s")
