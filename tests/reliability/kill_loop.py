"""kill -9 loops: run connectors as users do, SIGKILL the worker mid-batch at seeded points, restart.

One ``pubsub-connect run`` process (continuous, its own process group so the JVM and Python
workers die with it) plays the Kafka Connect worker. Each cycle feeds fresh input, starts the
worker and waits until a seeded connector's seeded stage has committed a seeded number of
micro-batches in this run *and has planned the next one*: its checkpoint holds an ``offsets/N``
without ``commits/N``. After a seeded delay of a few milliseconds the whole group is SIGKILLed.

Why the checkpoint and not the progress lines: a line is printed after a batch ends, so a kill
timed from it can land between batches and interrupt nothing, and every check after it would
pass without anything having been replayed. The checkpoint says a batch is in flight; what it
says right after the kill (read from the dead worker's files) is the evidence each cycle keeps:
the batches it cut short, per stage. A cycle that cut nothing short fails the loop.

After the last cycle the caller drains with ``--once`` and checks identities. The random seed is
printed with every kill point, so a failure can be replayed exactly (``KILL_SEED=<n> pytest …``).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_SEED = int(os.environ.get("KILL_SEED", "20261122"))

#: Spark gives a new Python worker a hard-coded 10 s to connect back; on an overloaded machine a
#: start can fail with this, and only this failure is retried (as an operator would start again).
SPARK_CONNECT_BACK = "Python worker failed to connect back"

_BATCH_FILE = re.compile(r"^\d+$")


@dataclass(frozen=True)
class KillPoint:
    cycle: int
    connector: str
    stage: str
    after_batches: int
    delay_s: float

    def __str__(self) -> str:
        return (f"cycle {self.cycle}: when {self.connector}.{self.stage} has committed {self.after_batches} "
                f"batch(es) and planned the next, + {self.delay_s * 1000:.0f} ms")


@dataclass(frozen=True)
class Target:
    """A connector of the worker under test: its stages (those that may decide a kill point), and
    where each stage's checkpoint is for a worker of a given process id (the archive keeps its
    per-run checkpoint in a directory named after the driver's pid)."""

    name: str
    stages: tuple[str, ...]
    checkpoints: Callable[[int], Mapping[str, Path]]


@dataclass
class Kill:
    """One SIGKILL and what it cut short: ``interrupted[connector][stage]`` is the batch id the
    stage had planned and not committed when the worker died."""

    point: KillPoint
    seconds: float
    interrupted: dict[str, dict[str, int]] = field(default_factory=dict)


def batch_ids(folder: Path) -> set[int]:
    """Batch ids of a checkpoint's ``offsets`` or ``commits`` folder (Spark's temporary and
    ``.crc`` files are not batches)."""
    if not folder.is_dir():
        return set()
    return {int(p.name) for p in folder.iterdir() if _BATCH_FILE.match(p.name)}


def _journal_windows(folder: Path) -> tuple[set[int], set[int]]:
    """A fused Cloud Pub/Sub source's journal of produced ids (``checkpoints/<name>/fused``): its
    windows begun and not aborted, and those whose transaction committed (their file has
    ``rows``)."""
    planned, committed = set(), set()
    for path in folder.glob("[0-9]*.json"):
        try:
            entry = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):  # replaced or pruned meanwhile
            continue
        if not entry.get("aborted"):
            planned.add(int(path.stem))
        if "rows" in entry:
            committed.add(int(path.stem))
    return planned, committed


def planned_and_committed(checkpoint: Path) -> tuple[set[int], set[int]]:
    """A stage's batches planned and committed: a Spark checkpoint's ``offsets`` and ``commits``,
    or the windows of a fused source's journal (it has a ``sequence.json``)."""
    if (checkpoint / "sequence.json").exists():
        return _journal_windows(checkpoint)
    return batch_ids(checkpoint / "offsets"), batch_ids(checkpoint / "commits")


def pending_batch(checkpoint: Path) -> int | None:
    """The batch planned (``offsets/N``) and not committed (no ``commits/N``), if any."""
    planned, committed = planned_and_committed(checkpoint)
    newest = max(planned, default=None)
    return newest if newest is not None and newest not in committed else None


def batch_in_flight(checkpoint: Path, committed: int, committed_before: frozenset[int] = frozenset()) -> int | None:
    """The batch a stage has planned and not committed, once it has committed at least
    ``committed`` batches besides ``committed_before``; else None. Both fault loops time their
    faults by it: a kill or an outage then meets that batch in flight."""
    batch = pending_batch(checkpoint)
    if batch is None or len(planned_and_committed(checkpoint)[1] - committed_before) < committed:
        return None
    return batch


def plan(targets: Sequence[Target], cycles: int, seed: int, max_batches: int = 2,
         max_delay_s: float = 0.05) -> list[KillPoint]:
    """Seeded kill points. Connectors take turns (in a shuffled order) to decide when the worker
    dies: at a random stage of theirs, after a random number of committed batches, a random few
    milliseconds into the next one. Every kill takes down every connector of the worker."""
    rng = random.Random(seed)
    order = [target.name for target in targets]
    rng.shuffle(order)
    stages = {target.name: target.stages for target in targets}
    points = []
    for cycle in range(cycles):
        connector = order[cycle % len(order)]
        points.append(KillPoint(cycle, connector, rng.choice(list(stages[connector])), rng.randint(1, max_batches),
                                round(rng.uniform(0, max_delay_s), 3)))
    return points


def start(args: Sequence[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "pubsub_connect.cli", *args], stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def _log_since(log: Path, offset: int) -> str:
    with open(log, "rb") as handle:
        handle.seek(offset)
        return handle.read().decode(errors="replace")


def run_kill_loop(run_args: Sequence[str], env: dict[str, str], log: Path, targets: Sequence[Target],
                  feed: Callable[[int], None], *, cycles: int, seed: int = DEFAULT_SEED,
                  timeout_s: float = 300) -> list[Kill]:
    """Run ``cycles`` start/kill cycles of a worker running ``targets``; returns each kill with
    what it interrupted. A worker that exits by itself fails the loop (with its log), except a
    start that fails for :data:`SPARK_CONNECT_BACK`, which the cycle starts again."""
    kills = []
    for point in plan(targets, cycles, seed):
        print(f"kill -9 (seed {seed}) {point}", flush=True)
        feed(point.cycle)
        decider = next(t for t in targets if t.name == point.connector)
        while True:
            offset = log.stat().st_size if log.exists() else 0
            started = time.monotonic()
            proc = start(["run", *run_args], env, log)
            try:
                if _await_point(proc, decider, point, log, offset, timeout_s):
                    break
            finally:
                kill_group(proc)
            print("  the start failed for Spark's Python worker connect-back time-out; starting again", flush=True)
        kill = Kill(point, round(time.monotonic() - started, 1), {
            target.name: {stage: batch for stage, path in target.checkpoints(proc.pid).items()
                          if (batch := pending_batch(path)) is not None}
            for target in targets})
        cut = ", ".join(f"{name}.{stage} batch {batch}" for name, stages in kill.interrupted.items()
                        for stage, batch in stages.items()) or "nothing"
        print(f"  killed {kill.seconds} s after the start; cut short: {cut}", flush=True)
        kills.append(kill)
    return kills


def _await_point(proc: subprocess.Popen[bytes], decider: Target, point: KillPoint, log: Path, offset: int,
                 timeout_s: float) -> bool:
    """Wait for ``point`` in the running worker; True once it is reached (the caller kills), False
    when the worker died of the one retried start-up failure."""
    deadline = time.monotonic() + timeout_s
    committed_at_start: frozenset[int] | None = None
    while True:
        checkpoint = decider.checkpoints(proc.pid).get(point.stage)
        if checkpoint is not None:
            if committed_at_start is None:
                committed_at_start = frozenset(planned_and_committed(checkpoint)[1])
            batch = batch_in_flight(checkpoint, point.after_batches, committed_at_start)
            if batch is not None:
                time.sleep(point.delay_s)  # the fault's timing, inside the planned batch
                assert proc.poll() is None, f"worker exited ({proc.returncode}) before the kill in {point}"
                # a batch shorter than the delay (the fallback commits in milliseconds) has ended:
                # the kill waits for the stage's next batch instead of meeting no work
                if pending_batch(checkpoint) == batch:
                    return True
        if proc.poll() is not None:
            output = _log_since(log, offset)
            if SPARK_CONNECT_BACK in output:
                return False
            raise AssertionError(f"worker exited early ({proc.returncode}) in {point}:\n{output[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{point} not reached within {timeout_s} s:\n{_log_since(log, offset)[-3000:]}")
        time.sleep(0.01)


def drain(run_args: Sequence[str], env: dict[str, str], attempts: int = 3) -> None:
    """``run --once`` until it exits 0. Only a start that failed for :data:`SPARK_CONNECT_BACK`
    is retried: any other failure is the restart after a kill failing, which is what the loop is
    there to find."""
    for attempt in range(1, attempts + 1):
        result = subprocess.run([sys.executable, "-m", "pubsub_connect.cli", "run", *run_args, "--once"], env=env,
                                capture_output=True, text=True, timeout=600, check=False)
        if result.returncode == 0:
            return
        output = result.stdout + result.stderr
        if SPARK_CONNECT_BACK not in output or attempt == attempts:
            raise AssertionError(f"--once drain failed (exit {result.returncode}):\n{output[-3000:]}")


@dataclass
class Tally:
    """What a connector's checks looked at: the ids compared with what was produced, and the
    duplicates found by id (each allowed one named by the check)."""

    ids_checked: int
    duplicates: int = 0


def report(engine: str, kills: Sequence[Kill], tallies: Mapping[str, Tally],
           deciders_only: bool = False) -> list[str]:
    """Print one line per connector (kills made, kills that cut its work short, ids checked,
    duplicates by id); returns the connectors a kill of theirs left untouched.

    With ``deciders_only`` (a worker running several connectors), a connector answers only for
    the kills it timed: a kill timed by another can find it between batches, which is no fault."""
    untouched = []
    for name, tally in tallies.items():
        own = [k for k in kills if k.point.connector == name or not deciders_only]
        interrupted = [k for k in kills if k.interrupted.get(name)]
        timed = sum(k.point.connector == name for k in kills)
        print(f"kill -9 summary [{engine}] {name}: kills {len(kills)}, timed by it {timed}, "
              f"interrupted its work {len(interrupted)}, ids checked {tally.ids_checked}, "
              f"duplicates by id {tally.duplicates}", flush=True)
        if any(not k.interrupted.get(name) for k in own):
            untouched.append(name)
    return untouched
