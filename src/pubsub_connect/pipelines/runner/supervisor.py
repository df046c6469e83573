"""Supervision of a connector's stages: start, watch, restart after transient failures, stop.

Why: a connector is a few streaming queries. Locally ``pubsub-connect run`` runs them in one
process; on Databricks each is a task of one job. Both call the same stage functions
(:class:`~pubsub_connect.pipelines.context.Stage`), and :func:`run_stages` decides how to drive them:

- ``--once``: stage after stage with ``trigger(availableNow=True)`` until each has drained its
  input, then exit (like a batch job);
- continuous: all stages at once with a processing-time trigger until stopped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pubsub_connect.config.loader import ConnectorConfig, WorkerConfig
from pubsub_connect.model.error_text import error_line
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext, Stage, query_name, run_closers
from pubsub_connect.pipelines.runner.failures import is_transient
from pubsub_connect.pipelines.runner.progress import ProgressObserver, ProgressPrinter
from pubsub_connect.pipelines.runner.query import SupervisedQuery

log = logging.getLogger(__name__)


def _await(query: SupervisedQuery, seconds: float) -> BaseException | None:
    """Wait on a query; a failed query's exception is returned, not raised."""
    try:
        query.awaitTermination(seconds)
    except Exception as exc:  # StreamingQueryException
        return exc
    return None


@dataclass(frozen=True)
class RestartPolicy:
    """How long a stage that failed on an unreachable service is restarted from its checkpoint.

    Why here and not only in the clients: the Kafka and Pub/Sub clients retry single requests,
    but Spark fails the whole micro-batch (or the offset planning) once they give up. Kafka
    Connect restarts such a task; Databricks restarts the job task. Locally, ``pubsub-connect
    run`` does the same, and since every stage resumes from its checkpoint, a restart loses and
    duplicates nothing that the stage's own guarantees did not already cover.
    """

    timeout_s: float | None = 300.0  # None: forever
    backoff_max_s: float = 30.0
    backoff_first_s: float = 1.0
    #: A micro-batch running longer is stuck: stop the query, restart it (None: never).
    batch_timeout_s: float | None = None

    @classmethod
    def from_worker(cls, worker: WorkerConfig) -> RestartPolicy:
        timeout_ms = int(worker.get("pipeline.restart.timeout.ms"))
        batch_timeout_ms = int(worker.get("pipeline.batch.timeout.ms"))
        return cls(timeout_s=None if timeout_ms < 0 else timeout_ms / 1000.0,
                   backoff_max_s=int(worker.get("pipeline.restart.backoff.max.ms")) / 1000.0,
                   batch_timeout_s=batch_timeout_ms / 1000.0 if batch_timeout_ms > 0 else None)

    def delay(self, attempt: int) -> float:
        """Wait before restart number ``attempt`` (1, 2, …): 1 s, 2 s, 4 s … capped."""
        return min(self.backoff_max_s, self.backoff_first_s * 2 ** (attempt - 1))


class StuckBatchError(RuntimeError):
    """A micro-batch ran longer than ``pipeline.batch.timeout.ms``."""


class StageRunner:
    """Runs one stage's query and restarts it after transient failures, per :class:`RestartPolicy`.

    A failure streak starts at the first failure and ends when a restarted query completes a
    micro-batch (the service answered again). The connector stops with a
    :class:`ConnectorError` when the failure is not transient, or when the streak would outlast
    ``pipeline.restart.timeout.ms``.

    A micro-batch that runs longer than ``pipeline.batch.timeout.ms`` counts as such a failure:
    Spark has no time limit of its own, and a batch can wedge for good (measured here: Spark
    4.2's Python runner and a ``mapInArrow`` worker each waiting for the other, every process
    idle), which would stall the connector without a word. Stopping the query cancels the
    batch; the restart replays it from the checkpoint.
    """

    def __init__(self, ctx: PipelineContext, config: ConnectorConfig, stage: Stage, policy: RestartPolicy,
                 clock: Callable[[], float] = time.monotonic):
        self.ctx = ctx
        self.config = config
        self.stage = stage
        self.policy = policy
        self.clock = clock
        self.query: SupervisedQuery | None = None
        #: The cleanups this runner's stage registered (see ``PipelineContext.cleanups_owned_by``).
        self.closers: list[Callable[[], None]] = []
        self.attempt = 0
        self.streak_started: float | None = None
        self.restart_at: float | None = None
        self.finished = False
        #: (last completed batch id, when a batch after it was first seen running)
        self._running: tuple[int | None, float] | None = None

    @property
    def name(self) -> str:
        return query_name(self.config, self.stage.name)

    def start(self) -> None:
        """Start the stage's query; the cleanups it registers are this runner's (:attr:`closers`),
        run when the query stops or fails, before a restart."""
        gate = self.ctx.start_gate
        gate.enter(self)
        try:
            with self.ctx.cleanups_owned_by(self.closers):
                self.query = self.stage.start(self.ctx, self.config)
        except Exception as exc:
            gate.leave(self)
            if not is_transient(exc):  # e.g. a ConfigError: raised as it is, for its own message and exit code
                self.close()
                raise
            self._failed(exc)
            return
        if hasattr(self.query, "status"):  # a Spark query: the next start waits for its first trigger
            gate.started(self, self.query)
        else:
            gate.leave(self)
        self.restart_at = None

    def close(self) -> None:
        run_closers(self.closers)

    def stop(self) -> None:
        """Stop the query (a batch cut short is not committed and runs again on restart)."""
        self.ctx.start_gate.leave(self)
        try:
            if self.query is not None and self.query.isActive:
                self.query.stop()
        except Exception as exc:  # e.g. InterruptedException from a batch interrupted mid-write
            log.warning("%s: stopping interrupted a running batch (%s); it runs again on restart",
                        self.name, error_line(exc))
        finally:
            self.close()

    def check(self, failure: BaseException | None = None) -> None:
        """Advance the state machine: restart when due, notice progress, failure or the end."""
        now = self.clock()
        if self.query is None:
            if self.restart_at is not None and now >= self.restart_at:
                self.start()
            return
        if self.streak_started is not None and self.query.lastProgress is not None:
            log.info("%s recovered after %d restart(s)", self.name, self.attempt)
            self.ctx.progress(f"[{self.name}] recovered after {self.attempt} restart(s)")
            self.attempt, self.streak_started = 0, None
        if failure is None and self.query.isActive and self._stuck(now):
            self.stop()
            self.query = None
            self._failed(StuckBatchError(f"a micro-batch ran longer than pipeline.batch.timeout.ms="
                                         f"{int(self.policy.batch_timeout_s * 1000)}; stopped"), transient=True)
            return
        if self.query.isActive and failure is None:
            return
        failure = failure or self.query.exception()
        if failure is None:
            self.finished = True
            return
        self.query = None
        self._failed(failure)

    def _stuck(self, now: float) -> bool:
        """Whether the query's current micro-batch has been running for longer than allowed.
        Only Spark queries are watched: the Pub/Sub pull loop is not one, and every call it makes
        has a deadline of its own."""
        status = getattr(self.query, "status", None) if self.policy.batch_timeout_s is not None else None
        if status is None:
            return False
        if not status.get("isTriggerActive"):
            self._running = None
            return False
        last = (self.query.lastProgress or {}).get("batchId")
        if self._running is None or self._running[0] != last:
            self._running = (last, now)
            return False
        return now - self._running[1] > self.policy.batch_timeout_s

    def _failed(self, exc: BaseException, transient: bool | None = None) -> None:
        self.ctx.start_gate.leave(self)
        line = error_line(exc)
        now = self.clock()
        self._running = None
        if not (is_transient(exc) if transient is None else transient) or self.policy.timeout_s == 0:
            self.close()
            raise ConnectorError(f"{self.config.name} {self.stage.name}: {line}") from None
        self.close()
        self.attempt += 1
        if self.streak_started is None:
            self.streak_started = now
        delay = self.policy.delay(self.attempt)
        elapsed = now - self.streak_started
        if self.policy.timeout_s is not None and elapsed + delay > self.policy.timeout_s:
            raise ConnectorError(
                f"{self.config.name} {self.stage.name}: {line} (still failing after {self.attempt - 1} restart(s) "
                f"in {elapsed:.0f} s; pipeline.restart.timeout.ms={int(self.policy.timeout_s * 1000)})") from None
        self.ctx.progress(f"[{self.name}] {line}; restarting from the checkpoint in {delay:.0f} s "
                          f"(restart {self.attempt})")
        self.restart_at = now + delay


def run_stages(ctx: PipelineContext, config: ConnectorConfig, stages: Sequence[Stage],
               stop_event: threading.Event | None = None, observe: ProgressObserver | None = None) -> None:
    """Drive a connector's stages, once (sequentially, each to completion) or continuously.

    Either way a stage that fails because a service is unreachable is restarted from its
    checkpoint (:class:`StageRunner`). ``observe`` is given each stage's name and the progress of
    each of its micro-batches (the worker tracks the topics a connector uses from them)."""
    prefix = query_name(config, "")
    printer = ProgressPrinter(ctx.progress, observe, lambda name: name.removeprefix(prefix))
    policy = RestartPolicy.from_worker(ctx.worker)
    if ctx.once:
        for stage in stages:
            started = time.monotonic()
            runner = StageRunner(ctx, config, stage, policy)
            try:
                runner.start()
                while not runner.finished:
                    if runner.query is None:
                        time.sleep(0.2)
                        runner.check()
                        continue
                    failure = _await(runner.query, 0.5)
                    printer.poll([runner.query])
                    runner.check(failure)
            finally:
                runner.stop()
            log.info("%s %s done in %.1f s", config.name, stage.name, time.monotonic() - started)
        return

    stop_event = stop_event or threading.Event()
    runners = [StageRunner(ctx, config, stage, policy) for stage in stages]
    try:
        for runner in runners:
            runner.start()
        while not stop_event.is_set():
            for runner in runners:
                runner.check()
                if runner.finished:
                    raise ConnectorError(f"{config.name} {runner.stage.name}: stopped unexpectedly")
            printer.poll([runner.query for runner in runners if runner.query is not None])
            stop_event.wait(0.5)
    finally:
        for runner in runners:
            runner.stop()
        printer.poll([runner.query for runner in runners if runner.query is not None])
        ctx.close_resources()
