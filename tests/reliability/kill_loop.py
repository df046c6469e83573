"""kill -9 loops: run connectors as users do, SIGKILL the worker at seeded random points, restart.

One ``pubsub-connect run`` process (continuous, every stage of every connector given, its own
process group so the JVM and Python workers die with it) plays the Kafka Connect worker. Each
cycle feeds fresh input to every connector, starts the worker, waits until a seeded connector's
seeded stage has completed a seeded number of micro-batches in this run, waits a seeded
fraction of a batch more (so the kill lands inside a batch, not on its boundary) and SIGKILLs
the group. Connectors take turns deciding the moment; every kill hits every connector wherever
it is. After the last cycle the caller drains with ``--once`` and checks the sequence ids.

The random seed is printed with every kill point, so a failure can be replayed exactly
(``KILL_SEED=<n> pytest …``).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_SEED = int(os.environ.get("KILL_SEED", "20261122"))


@dataclass(frozen=True)
class KillPoint:
    cycle: int
    connector: str
    stage: str
    after_batches: int
    extra_delay_s: float

    def __str__(self) -> str:
        return (f"cycle {self.cycle}: when {self.connector}.{self.stage} has done {self.after_batches} batch(es) "
                f"+ {self.extra_delay_s:.2f} s")


def plan(targets: Sequence[tuple[str, Sequence[str]]], cycles: int, seed: int, max_batches: int = 2,
         max_extra_delay_s: float = 0.6) -> list[KillPoint]:
    """Seeded kill points. Connectors take turns (in a shuffled order) to decide when the worker
    dies: at a random stage of theirs, after a random number of batches plus a random delay.
    Every kill takes down every connector of the worker, wherever each happens to be."""
    rng = random.Random(seed)
    order = [name for name, _ in targets]
    rng.shuffle(order)
    stages = dict(targets)
    points = []
    for cycle in range(cycles):
        connector = order[cycle % len(order)]
        points.append(KillPoint(cycle, connector, rng.choice(list(stages[connector])), rng.randint(1, max_batches),
                                round(rng.uniform(0, max_extra_delay_s), 2)))
    return points


def start(args: Sequence[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "pubsub_connect.cli", *args], stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def run_kill_loop(run_args: Sequence[str], env: dict[str, str], log: Path,
                  targets: Sequence[tuple[str, Sequence[str]]], feed: Callable[[int], None], *, cycles: int = 5,
                  seed: int = DEFAULT_SEED, timeout_s: float = 300) -> list[KillPoint]:
    """Run ``cycles`` start/kill cycles of a worker running the connectors of ``targets``
    (``(name, stages)``); returns the kill points used."""
    points = plan(targets, cycles, seed)
    for point in points:
        print(f"kill -9 (seed {seed}) {point}", flush=True)
        feed(point.cycle)
        offset = log.stat().st_size if log.exists() else 0
        started = time.monotonic()
        proc = start(["run", *run_args], env, log)
        progress = re.compile(rf"^\[{re.escape(point.connector)}\.{re.escape(point.stage)}\] batch=\d+ ", re.MULTILINE)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                with open(log, "rb") as handle:
                    handle.seek(offset)
                    output = handle.read().decode(errors="replace")
                if len(progress.findall(output)) >= point.after_batches:
                    time.sleep(point.extra_delay_s)  # the fault's timing: land inside a batch
                    # A kill that finds the worker gone interrupts nothing: the checks after it
                    # would pass without anything having been replayed.
                    assert proc.poll() is None, f"worker exited ({proc.returncode}) before the kill in {point}"
                    break
                if proc.poll() is not None:
                    raise AssertionError(f"worker exited early ({proc.returncode}) in {point}:\n{output[-3000:]}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"{point} not reached within {timeout_s} s:\n{output[-3000:]}")
                time.sleep(0.1)
        finally:
            kill_group(proc)
        print(f"  killed {time.monotonic() - started:.1f} s after the start", flush=True)
    return points


def drain(run_args: Sequence[str], env: dict[str, str], attempts: int = 3) -> None:
    """``run --once`` until it exits 0. A failed attempt is retried as an operator would: on an
    overloaded machine Spark's hard-coded 10 s for a Python worker to connect back can pass."""
    failures: list[str] = []
    for _ in range(attempts):
        result = subprocess.run([sys.executable, "-m", "pubsub_connect.cli", "run", *run_args, "--once"], env=env,
                                capture_output=True, text=True, timeout=600, check=False)
        if result.returncode == 0:
            return
        failures.append((result.stderr.strip() or "?").splitlines()[-1])
    raise AssertionError(f"--once drain failed {attempts} times: {failures}")
