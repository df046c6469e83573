"""Start-up timings of expensive session fixtures, shown in pytest's terminal summary.

A conftest that starts something slow (a Spark cluster, Google's connector in Kafka Connect)
records how long it took in a section of its own (:func:`section`), so a slow run says where
its time went. ``pytest_terminal_summary`` has no fixture access, hence sections at module level
rather than a fixture.

The suite runs in pytest-xdist workers, where the fixtures start, while the terminal summary is
written by the controller: each worker hands its sections over when it finishes
(:func:`hand_over`), and the controller merges them (:func:`take_over`), each entry marked with
its worker, since each worker starts its own services.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pytest

#: Section title → (what → seconds), in the order the sections were created.
SECTIONS: dict[str, dict[str, float]] = {}

#: The key of ``workeroutput`` that carries a worker's sections to the controller.
WORKER_OUTPUT_KEY = "timings"


def section(title: str) -> dict[str, float]:
    """The timings shown under ``title`` (created empty on first use)."""
    return SECTIONS.setdefault(title, {})


@contextmanager
def timed(timings: dict[str, float], what: str) -> Iterator[None]:
    """Record how long the ``with`` body took in ``timings[what]`` (also when it raises)."""
    started = time.monotonic()
    try:
        yield
    finally:
        timings[what] = time.monotonic() - started


def hand_over(workeroutput: dict[str, object]) -> None:
    """In an xdist worker: put this worker's recorded sections where the controller reads them."""
    workeroutput[WORKER_OUTPUT_KEY] = {title: dict(timings) for title, timings in SECTIONS.items() if timings}


def take_over(workeroutput: Mapping[str, object], worker_id: str) -> None:
    """In the controller: merge a finished worker's sections, each entry marked with its worker."""
    handed = workeroutput.get(WORKER_OUTPUT_KEY) or {}
    assert isinstance(handed, dict)
    for title, timings in handed.items():
        section(title).update({f"{what} [{worker_id}]": seconds for what, seconds in timings.items()})


def write_sections(terminalreporter: pytest.TerminalReporter) -> None:
    """One terminal-summary section per title that has timings."""
    for title, timings in SECTIONS.items():
        if timings:
            terminalreporter.write_sep("-", title)
            for what, seconds in timings.items():
                terminalreporter.write_line(f"{what}: {seconds:.1f} s")
