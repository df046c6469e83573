"""kill -9 on the native engine (Spark's Kafka connector and Delta Lake, what Databricks runs),
for every connector: a worker running the one connector is SIGKILLed (its whole process group)
twice at seeded points while a backlog is in flight, then drained with ``--once``: a kill, a
restart that recovers and is killed in turn, and a last restart that must finish the work.

Each kill is timed by the connector's checkpoints (``kill_loop.py``): a stage has planned a
micro-batch and not committed it. What the dead worker's checkpoints say is kept per kill, and a
kill that cut no batch short fails the test; so does a restart that fails for any reason but the
one known start-up time-out. The checks after the drain are by identity (``scenarios.py``):
exactly-once tables and Kafka topics hold each id once, at-least-once publishes repeat only ids
of a batch a kill cut short.

One connector per worker: five connectors' fifteen streaming queries in one native worker on
2 cores do not reach their kill points in time (each micro-batch is several Spark jobs and a
Delta commit), and a kill timed by one connector would find the others between batches.
Two kills, not more: each start is a Spark driver of its own (about 37 CPU-seconds on 2 cores),
and seven connectors' starts are the largest share of the suite's time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.test_lite_sink import client_env
from lite_server import LiteServer
from reliability import scenarios
from reliability.kill_loop import drain, report, run_kill_loop

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

VOLUME = scenarios.Volume(cycles=2, per_cycle=300)
RECORDS_PER_BATCH = 100


@pytest.mark.parametrize("connector", ["cps_sink", "cps_sink_fused", "cps_source", "cps_source_fused", "lite_sink",
                                       "lite_source", "archive"])
def test_kill_9_mid_batch_on_the_native_engine_keeps_the_promise(
        connector: str, kafka_bootstrap: str, pubsub_emulator_host: str, lite: LiteServer, tmp_path: Path,
        unique_name: str) -> None:
    root = tmp_path / "root"
    worker = tmp_path / "worker.properties"
    # As many records per batch upstream, one table file per batch downstream: every stage takes
    # each cycle's slice in several batches, so a kill point "after 2 batches" is always reached.
    worker.write_text(f"bootstrap.servers={kafka_bootstrap}\nstorage.root={root}\n"
                      f"pipeline.max.records.per.batch={RECORDS_PER_BATCH}\npipeline.max.files.per.trigger=1\n"
                      f"pipeline.trigger.interval.ms=100\npipeline.offsets.topic={unique_name}-offsets\n"
                      "spark.master=local[2]\nspark.sql.shuffle.partitions=2\nspark.default.parallelism=2\n")
    name = f"{unique_name}-{connector.replace('_', '-')}"
    scenario = {
        "cps_sink": lambda: scenarios.cps_sink(kafka_bootstrap, root, tmp_path, name, VOLUME),
        "cps_sink_fused": lambda: scenarios.cps_sink_fused(kafka_bootstrap, root, tmp_path, name, VOLUME),
        "cps_source": lambda: scenarios.cps_source(kafka_bootstrap, root, tmp_path, name, VOLUME),
        "cps_source_fused": lambda: scenarios.cps_source_fused(kafka_bootstrap, root, tmp_path, name, VOLUME),
        "lite_sink": lambda: scenarios.lite_sink(kafka_bootstrap, lite, root, tmp_path, name, VOLUME),
        "lite_source": lambda: scenarios.lite_source(kafka_bootstrap, lite, root, tmp_path, name, VOLUME),
        "archive": lambda: scenarios.archive(kafka_bootstrap, tmp_path, name, VOLUME),
    }[connector]()
    args = ["--worker", str(worker), str(scenario.properties)]
    env = {**client_env(lite), "PUBSUB_EMULATOR_HOST": pubsub_emulator_host}

    kills = run_kill_loop(args, env, tmp_path / "worker.log", [scenario.target], scenario.feed,
                          cycles=VOLUME.cycles)
    scenario.settle()
    drain(args, env)
    tally = scenario.verify(kills)
    untouched = report("native", kills, {name: tally})
    assert not untouched, f"a kill interrupted none of {name}'s work: {[str(k.point) for k in kills]}"
