"""kill -9 of a fallback-engine worker running all five connectors, five times mid-batch at seeded
points (see ``kill_loop.py``), then a ``--once`` drain: what each connector promises after crashes.

One process runs the Cloud Pub/Sub sink and source, the archive sink, and the Pub/Sub Lite sink
and source, as one Kafka Connect worker runs many connectors; so each kill hits every connector,
each at its own point of its stream. Each connector times one kill (its stage has a batch in
flight when the worker dies) and must show that kill cut its work short; the kills timed by the
others are counted where they found it mid-batch too. Each cycle feeds every connector a new
slice of sequence ids, so every run has work in every stage. The checks are by identity
(``scenarios.py``):

- Cloud Pub/Sub sink / Lite sink: every sequence id reaches Pub/Sub / Lite, repeated only if it
  was in a publish batch a kill cut short; bronze and outbox hold each Kafka coordinate of the
  topic exactly once with its value; Lite keeps each key's order.
- Cloud Pub/Sub source / Lite source: the outbox holds each published message id (Lite
  coordinate) exactly once, and a ``read_committed`` consumer of the Kafka topic sees each
  sequence id exactly once, though kills cut produce transactions short (they are aborted).
- Archive: every record once in whole, indexed files that tile each partition from offset 0.

The native engine's loop, one connector per worker, is ``test_kill9_native.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.test_lite_sink import client_env
from lite_server import LiteServer
from reliability import scenarios
from reliability.kill_loop import drain, report, run_kill_loop

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

VOLUME = scenarios.Volume(cycles=5, per_cycle=300)
RECORDS_PER_BATCH = 100


def test_kill_9_five_times_every_connector_keeps_its_promise(
        kafka_bootstrap: str, pubsub_emulator_host: str, lite: LiteServer, tmp_path: Path, unique_name: str) -> None:
    root = tmp_path / "root"
    worker = tmp_path / "worker.properties"
    # The fallback engine runs the fifteen streaming queries of five connectors in one worker on
    # 2 cores fast enough to reach every kill point; the native engine's loop runs one connector
    # per worker. One table file per micro-batch downstream of bronze, as at most
    # RECORDS_PER_BATCH per batch upstream: every stage takes each cycle's slice in several
    # batches, however far behind it starts, so a kill point "after 2 batches" is always reached.
    worker.write_text(f"bootstrap.servers={kafka_bootstrap}\nstorage.root={root}\n"
                      "pipeline.kafka.implementation=python\npipeline.tables.implementation=delta-rs\n"
                      f"pipeline.max.records.per.batch={RECORDS_PER_BATCH}\npipeline.max.files.per.trigger=1\n"
                      f"pipeline.trigger.interval.ms=100\npipeline.offsets.topic={unique_name}-offsets\n"
                      "spark.master=local[2]\nspark.sql.shuffle.partitions=2\nspark.default.parallelism=2\n")
    connectors = [scenarios.cps_sink(kafka_bootstrap, root, tmp_path, f"{unique_name}-ps", VOLUME),
                  scenarios.cps_source(kafka_bootstrap, root, tmp_path, f"{unique_name}-pp", VOLUME),
                  scenarios.archive(kafka_bootstrap, tmp_path, f"{unique_name}-ar", VOLUME),
                  scenarios.lite_sink(kafka_bootstrap, lite, root, tmp_path, f"{unique_name}-ls", VOLUME),
                  scenarios.lite_source(kafka_bootstrap, lite, root, tmp_path, f"{unique_name}-lp", VOLUME)]
    args = ["--worker", str(worker), *(str(s.properties) for s in connectors)]
    env = {**client_env(lite), "PUBSUB_EMULATOR_HOST": pubsub_emulator_host}

    def feed(cycle: int) -> None:
        for scenario in connectors:
            scenario.feed(cycle)

    kills = run_kill_loop(args, env, tmp_path / "worker.log", [s.target for s in connectors], feed,
                          cycles=VOLUME.cycles)
    assert {k.point.connector for k in kills} == {s.target.name for s in connectors}
    for scenario in connectors:
        scenario.settle()
    drain(args, env)

    failures, tallies = [], {}
    for scenario in connectors:
        try:
            tallies[scenario.target.name] = scenario.verify(kills)
        except AssertionError as exc:
            failures.append(f"{scenario.target.name}: {exc}")
    untouched = report("fallback", kills, tallies, deciders_only=True)
    assert not failures, "\n".join(failures)
    assert not untouched, f"a kill these connectors timed interrupted none of their work: {untouched}"
