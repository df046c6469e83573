"""Stage restarts after transient failures (``StageRunner`` / ``RestartPolicy``), on fake queries
and a fake clock: which failures restart, the backoff, the end of a streak, giving up."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from pubsub_connect.pipelines.context import ConnectorError, Stage
from pubsub_connect.pipelines.runner.failures import is_transient
from pubsub_connect.pipelines.runner.start_gate import StartGate
from pubsub_connect.pipelines.runner.supervisor import RestartPolicy, StageRunner

UNAVAILABLE = ("org.apache.spark.sql.streaming.StreamingQueryException: [FOREACH_BATCH_USER_FUNCTION_ERROR]\n"
               "pubsub_connect.pipelines.context.ConnectorError: publish of batch 3 to projects/p/topics/t failed: "
               "PublishError: 5 of 5 message(s) not published; first: RetryError: Timeout of 60.0s exceeded, "
               "last exception: 503 failed to connect to all addresses")
KAFKA_DOWN = ("TimeoutError: no fetch response for [('t', 0)] within 120000 ms (option fetchOffset.timeoutMs): "
              "is the broker reachable?")
NOT_FOUND = ("pubsub_connect.pipelines.context.ConnectorError: publish of batch 0 to projects/p/topics/t failed: "
             "PublishError: 1 of 1 message(s) not published; first: NotFound: 404 Topic not found")
BAD_RECORD = "pubsub_connect.model.connect.DataError: t-0@5: value is not valid JSON (DataError while timing out)"


@dataclass
class FakeQuery:
    failure: str | None = None
    done: bool = False
    lastProgress: dict[str, Any] | None = None
    stopped: bool = False
    status: dict[str, Any] = field(default_factory=lambda: {"isTriggerActive": False})

    @property
    def isActive(self) -> bool:
        return self.failure is None and not self.done and not self.stopped

    def exception(self) -> Exception | None:
        return RuntimeError(self.failure) if self.failure else None

    def stop(self) -> None:
        self.stopped = True


@dataclass
class Script:
    """``Stage.start``: hands out queries in order and registers one closer per start."""

    queries: list[FakeQuery]
    started: int = 0
    closed: list[int] = field(default_factory=list)

    def __call__(self, ctx: Any, _config: Any) -> FakeQuery:
        number = self.started
        ctx.closers.append(lambda: self.closed.append(number))
        self.started += 1
        return self.queries[number]


@dataclass
class FakeCtx:
    closers: list[Any] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    start_gate: StartGate = field(default_factory=StartGate)

    def progress(self, line: str) -> None:
        self.lines.append(line)

    @contextmanager
    def cleanups_owned_by(self, owner: list[Any]) -> Iterator[None]:
        """Like ``PipelineContext.cleanups_owned_by``: stages register into ``owner`` meanwhile."""
        previous, self.closers = self.closers, owner
        try:
            yield
        finally:
            self.closers = previous


@dataclass
class FakeConfig:
    name: str = "c"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def runner_for(queries: list[FakeQuery], policy: RestartPolicy) -> tuple[StageRunner, Script, FakeCtx, Clock]:
    script, ctx, clock = Script(queries), FakeCtx(), Clock()
    runner = StageRunner(ctx, FakeConfig(), Stage("publish", script), policy, clock=clock)  # type: ignore[arg-type]
    return runner, script, ctx, clock


@pytest.mark.parametrize(("text", "transient"), [
    (UNAVAILABLE, True),
    (KAFKA_DOWN, True),
    ("KafkaException: KafkaError{code=_TRANSPORT,val=-195,str=\"Broker transport failure\"}", True),
    ("google.api_core.exceptions.DeadlineExceeded: 504 Deadline Exceeded", True),
    ('cimpl.KafkaException: KafkaError{code=_NOENT,val=-156,str="Failed to query partition leaders: No leaders '
     'found"}', True),  # the broker is down while earliest/latest offsets are listed
    ("org.apache.spark.SparkException: Python worker failed to connect back.", True),
    (NOT_FOUND, False),
    (BAD_RECORD, False),
    ("pubsub_connect.config.errors.ConfigError: sink.properties: cps.topic is required", False),
    ("ValueError: something else entirely", False),
])
def test_transient_failures_are_told_apart_from_bad_data_and_config(text: str, transient: bool) -> None:
    assert is_transient(text) is transient


def test_backoff_doubles_from_one_second_up_to_the_cap() -> None:
    policy = RestartPolicy(timeout_s=None, backoff_max_s=10)
    assert [policy.delay(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_transient_failure_restarts_from_checkpoint_after_backoff_and_a_batch_ends_the_streak() -> None:
    first, second, third = FakeQuery(), FakeQuery(), FakeQuery()
    runner, script, ctx, clock = runner_for([first, second, third], RestartPolicy(timeout_s=60, backoff_max_s=30))
    runner.start()
    first.failure = UNAVAILABLE
    runner.check()
    assert runner.query is None and script.closed == [0]  # the failed attempt's resources are released
    assert ctx.lines == ["[c.publish] publish of batch 3 to projects/p/topics/t failed: PublishError: 5 of 5 "
                         "message(s) not published; first: RetryError: Timeout of 60.0s exceeded, last exception: "
                         "503 failed to connect to all addresses; restarting from the checkpoint in 1 s (restart 1)"]
    clock.now = 0.5
    runner.check()
    assert script.started == 1  # still backing off
    clock.now = 1.0
    runner.check()
    assert script.started == 2 and runner.query is second
    second.failure = UNAVAILABLE
    clock.now = 3.0
    runner.check()
    assert ctx.lines[-1].endswith("restarting from the checkpoint in 2 s (restart 2)")
    clock.now = 5.0
    runner.check()
    assert runner.query is third
    third.lastProgress = {"batchId": 4}  # the service answered: the streak is over
    runner.check()
    assert ctx.lines[-1] == "[c.publish] recovered after 2 restart(s)"
    assert (runner.attempt, runner.streak_started) == (0, None)


def test_gives_up_with_the_last_error_once_the_restart_timeout_would_be_exceeded() -> None:
    queries = [FakeQuery() for _ in range(10)]
    runner, script, _ctx, clock = runner_for(queries, RestartPolicy(timeout_s=10, backoff_max_s=30))
    runner.start()
    with pytest.raises(ConnectorError) as err:
        while True:
            runner.query.failure = KAFKA_DOWN  # type: ignore[union-attr]
            runner.check()
            clock.now = runner.restart_at  # type: ignore[assignment]
            runner.check()
    # restarts after 1, 2, 4 s (t = 1, 3, 7); the next wait (8 s) would end at 15 s > 10 s
    assert script.started == 4
    assert str(err.value) == ("c publish: TimeoutError: no fetch response for [('t', 0)] within 120000 ms (option "
                              "fetchOffset.timeoutMs): is the broker reachable? (still failing after 3 restart(s) "
                              "in 7 s; pipeline.restart.timeout.ms=10000)")
    assert script.closed == [0, 1, 2, 3]


@pytest.mark.parametrize("text", [NOT_FOUND, BAD_RECORD])
def test_permanent_failure_stops_at_once(text: str) -> None:
    query = FakeQuery()
    runner, script, ctx, _clock = runner_for([query], RestartPolicy(timeout_s=None))
    runner.start()
    query.failure = text
    with pytest.raises(ConnectorError) as err:
        runner.check()
    assert str(err.value).startswith("c publish: ")
    assert script.started == 1 and script.closed == [0] and ctx.lines == []


def test_timeout_zero_never_restarts() -> None:
    query = FakeQuery()
    runner, script, _ctx, _clock = runner_for([query], RestartPolicy(timeout_s=0))
    runner.start()
    query.failure = UNAVAILABLE
    with pytest.raises(ConnectorError, match=r"^c publish: publish of batch 3 to projects/p/topics/t failed: "):
        runner.check()
    assert script.started == 1


def test_failure_while_starting_is_restarted_too() -> None:
    """e.g. the transactional producer cannot reach the broker to init its transactions."""
    calls: list[int] = []
    query = FakeQuery()

    def start(ctx: Any, _config: Any) -> FakeQuery:
        calls.append(1)
        if len(calls) == 1:
            raise TimeoutError("KafkaError{code=_TIMED_OUT,val=-185,str=\"Failed to initialize Producer ID\"}")
        return query

    ctx, clock = FakeCtx(), Clock()
    runner = StageRunner(ctx, FakeConfig(), Stage("produce", start), RestartPolicy(), clock=clock)  # type: ignore[arg-type]
    runner.start()
    assert runner.query is None and ctx.lines[-1].endswith("restarting from the checkpoint in 1 s (restart 1)")
    clock.now = 1.0
    runner.check()
    assert runner.query is query and len(calls) == 2


def test_a_query_that_ends_without_error_is_finished() -> None:
    query = FakeQuery()
    runner, _script, _ctx, _clock = runner_for([query], RestartPolicy())
    runner.start()
    query.done = True
    runner.check()
    assert runner.finished


def test_permanent_failure_while_starting_is_raised_as_it_is() -> None:
    """A ConfigError from a stage's setup keeps its type (the CLI maps it to its exit code)."""

    class ConfigError(ValueError):
        pass

    def start(ctx: Any, _config: Any) -> FakeQuery:
        ctx.closers.append(lambda: None)
        raise ConfigError("value.converter=ByteArrayConverter cannot write STRUCT values")

    ctx = FakeCtx()
    runner = StageRunner(ctx, FakeConfig(), Stage("pull", start), RestartPolicy())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="ByteArrayConverter"):
        runner.start()
    assert ctx.closers == [] and runner.closers == []


def test_a_micro_batch_running_past_the_batch_timeout_is_stopped_and_restarted_from_the_checkpoint() -> None:
    first, second = FakeQuery(), FakeQuery()
    runner, script, ctx, clock = runner_for(
        [first, second], RestartPolicy(timeout_s=600, backoff_max_s=30, batch_timeout_s=60))
    runner.start()
    first.status = {"isTriggerActive": True}
    first.lastProgress = {"batchId": 3}
    runner.check()  # batch 4 seen running at t=0
    clock.now = 50.0
    first.lastProgress = {"batchId": 4}  # batch 4 completed; batch 5 running since t=50
    runner.check()
    clock.now = 109.0
    runner.check()
    assert runner.query is first and not first.stopped and ctx.lines == []
    clock.now = 111.0
    runner.check()
    assert first.stopped and runner.query is None and script.closed == [0]
    assert ctx.lines == ["[c.publish] a micro-batch ran longer than pipeline.batch.timeout.ms=60000; stopped; "
                         "restarting from the checkpoint in 1 s (restart 1)"]
    clock.now = 112.0
    runner.check()
    assert runner.query is second
    second.lastProgress = {"batchId": 5}  # the replayed batch went through
    runner.check()
    assert ctx.lines[-1] == "[c.publish] recovered after 1 restart(s)"


def test_idle_time_between_batches_never_counts_as_a_stuck_batch() -> None:
    query = FakeQuery()
    runner, _script, ctx, clock = runner_for([query], RestartPolicy(timeout_s=600, batch_timeout_s=60))
    runner.start()
    for second in range(0, 1000, 10):
        clock.now = float(second)
        query.status = {"isTriggerActive": second % 50 == 0}  # a short batch now and then
        runner.check()
    assert runner.query is query and not query.stopped and ctx.lines == []


def test_batch_timeout_comes_from_the_worker_config() -> None:
    from pubsub_connect.config import loader as cfg
    assert RestartPolicy.from_worker(cfg.validate_worker({})).batch_timeout_s == 900.0
    assert RestartPolicy.from_worker(cfg.validate_worker({"pipeline.batch.timeout.ms": "0"})).batch_timeout_s is None


def test_a_query_like_stage_without_spark_status_is_not_watched_and_recovers() -> None:
    from pubsub_connect.pipelines.cps_pull import PullLoop

    first, second = FakeQuery(), FakeQuery()
    for query in (first, second):
        del query.status  # like the pull loop: no Spark status to read
    runner, _script, ctx, clock = runner_for([first, second], RestartPolicy(timeout_s=600, batch_timeout_s=1))
    runner.start()
    clock.now = 100.0
    runner.check()
    assert runner.query is first and ctx.lines == []
    first.failure = UNAVAILABLE
    runner.check()
    clock.now = 102.0
    runner.check()
    second.lastProgress = {"batchId": 0}
    runner.check()
    assert ctx.lines[-1] == "[c.publish] recovered after 1 restart(s)"
    # the real pull loop has what the runner reads: no Spark status, a lastProgress
    assert not hasattr(PullLoop, "status") and isinstance(PullLoop.lastProgress, property)


def test_two_connectors_starting_together_each_keep_their_own_cleanups(tmp_path) -> None:
    """The stages of two connectors start on their own threads over one context: each runner
    takes exactly the cleanup its own stage registered, even when both register at once."""
    import threading

    from pubsub_connect.config import loader as cfg
    from pubsub_connect.pipelines.context import PipelineContext

    # No start gate: the point is two starts that really overlap.
    ctx = PipelineContext(spark=None, worker=cfg.validate_worker({"storage.root": str(tmp_path)}),  # type: ignore[arg-type]
                          caps=None, store=None, once=False, start_gate=StartGate(max_hold_s=0))  # type: ignore[arg-type]
    both_registered = threading.Barrier(2)
    closed: list[str] = []

    def start(ctx: Any, config: Any) -> FakeQuery:
        ctx.closers.append(lambda: closed.append(config.name))
        both_registered.wait(timeout=30)  # the other connector's stage has registered its cleanup too
        return FakeQuery()

    runners = {name: StageRunner(ctx, FakeConfig(name), Stage("ingest", start), RestartPolicy()) for name in "ab"}
    threads = [threading.Thread(target=runner.start) for runner in runners.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for name, runner in runners.items():
        closed.clear()
        runner.close()
        assert closed == [name]
    assert ctx.closers == []
