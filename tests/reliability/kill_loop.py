"""kill -9 loops: run a connector as users do, SIGKILL it at seeded random points, restart.

Each cycle feeds fresh input, starts ``pubsub-connect run`` (continuous, all stages, its own
process group so the JVM and Python workers die with it), waits until a seeded stage has
completed a seeded number of micro-batches in this run, waits a seeded fraction of a batch
more (so the kill lands inside the next batch, not on its boundary) and SIGKILLs the group.
Stages take turns in a seeded order, so every stage is hit. After the last cycle the caller
drains with ``--once`` and checks the sequence ids.

The seed is printed with every kill point, so a failure can be replayed exactly
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
    stage: str
    after_batches: int
    extra_delay_s: float

    def __str__(self) -> str:
        return f"cycle {self.cycle}: {self.stage} after {self.after_batches} batch(es) + {self.extra_delay_s:.2f} s"


def plan(stages: Sequence[str], cycles: int, seed: int, max_batches: int = 3,
         max_extra_delay_s: float = 0.6) -> list[KillPoint]:
    """Seeded kill points: stages in turns of a shuffled order, random batch count and delay."""
    rng = random.Random(seed)
    order = list(stages)
    rng.shuffle(order)
    return [KillPoint(cycle, order[cycle % len(order)], rng.randint(1, max_batches),
                      round(rng.uniform(0, max_extra_delay_s), 2)) for cycle in range(cycles)]


def start(args: Sequence[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "pubsub_connect.cli", *args], stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def run_kill_loop(name: str, run_args: Sequence[str], env: dict[str, str], log: Path, stages: Sequence[str],
                  feed: Callable[[int], None], *, cycles: int = 5, seed: int = DEFAULT_SEED,
                  timeout_s: float = 240) -> list[KillPoint]:
    """Run ``cycles`` start/kill cycles of connector ``name``; returns the kill points used."""
    points = plan(stages, cycles, seed)
    for point in points:
        print(f"kill -9 (seed {seed}) {point}", flush=True)
        feed(point.cycle)
        offset = log.stat().st_size if log.exists() else 0
        started = time.monotonic()
        proc = start(["run", *run_args], env, log)
        progress = re.compile(rf"^\[{re.escape(name)}\.{re.escape(point.stage)}\] batch=\d+ ", re.MULTILINE)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                with open(log, "rb") as handle:
                    handle.seek(offset)
                    output = handle.read().decode(errors="replace")
                if len(progress.findall(output)) >= point.after_batches:
                    time.sleep(point.extra_delay_s)
                    break
                if proc.poll() is not None:
                    raise AssertionError(f"connector exited early ({proc.returncode}) in {point}:\n{output[-3000:]}")
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
