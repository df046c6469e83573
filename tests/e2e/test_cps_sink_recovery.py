"""Cloud Pub/Sub sink: kill -9 of the connector in each stage, restart, nothing lost.

The connector runs as the user runs it (``pubsub-connect run`` in its own process group) and is
SIGKILLed mid-stream in each stage in turn. Then a ``--once`` run drains everything. Delta
tables must hold every record exactly once (idempotent appends); Pub/Sub must have received
every sequence id at least once (at-least-once publish).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from integration.kafka_helpers import Rec, create_topic, produce
from integration.pubsub_helpers import create_topic_and_subscription, pull_distinct
from pubsub_connect.io.tables import TableRef
from pubsub_connect.pipelines.runtime import build_context

TOTAL = 3000


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 - closed by the process exit; the file is inspected afterwards
    return subprocess.Popen([sys.executable, "-m", "pubsub_connect.cli", *args], stdout=out, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)


def _kill_after_progress(proc: subprocess.Popen[bytes], log: Path, marker: str, timeout_s: float = 180) -> None:
    """SIGKILL the whole process group (Python driver and its JVM) once ``marker`` was printed."""
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if marker in log.read_text(errors="replace"):
                return
            if proc.poll() is not None:
                raise AssertionError(f"connector exited early ({proc.returncode}):\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        raise AssertionError(f"no {marker!r} within {timeout_s} s:\n{log.read_text()[-3000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_kill_9_in_each_stage_loses_nothing(kafka_bootstrap: str, pubsub_emulator_host: str, tmp_path: Path,
                                            unique_name: str, spark) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=3)
    produce(kafka_bootstrap, unique_name, [Rec(f"seq-{i}".encode(), key=f"k{i % 7}".encode()) for i in range(TOTAL)])
    _, subscription = create_topic_and_subscription(unique_name, ack_deadline_seconds=60)
    root = tmp_path / "root"
    worker = tmp_path / "worker.properties"
    worker.write_text(f"bootstrap.servers={kafka_bootstrap}\nstorage.root={root}\n"
                      "pipeline.max.records.per.batch=250\npipeline.max.files.per.trigger=1\n"
                      "pipeline.trigger.interval.ms=100\n"
                      "spark.master=local[2]\nspark.sql.shuffle.partitions=2\n")
    connector = tmp_path / "sink.properties"
    connector.write_text(f"name={unique_name}\nconnector.class=cps-sink\ntopics={unique_name}\n"
                         f"cps.project=test-project\ncps.topic={unique_name}\ncps.useEmulator=true\n"
                         "maxBufferSize=50\n")
    env = {**os.environ, "PUBSUB_EMULATOR_HOST": pubsub_emulator_host}
    log = tmp_path / "connector.log"
    base = ["run", "--worker", str(worker), str(connector)]

    # kill each stage mid-stream: each has more input than it processed when it is killed
    # (ingest: 12 batches of 250 available; convert and publish: one bronze/outbox commit a batch)
    for stage, after_batch in (("ingest", 5), ("convert", 2), ("publish", 1)):
        proc = _start([*base, "--stage", stage], env, log)
        _kill_after_progress(proc, log, f"[{unique_name}.{stage}] batch={after_batch} ")

    # restart: drain every stage
    result = subprocess.run([sys.executable, "-m", "pubsub_connect.cli", *base, "--once"], env=env,
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]

    # at-least-once: republished messages arrive twice, so wait for every id, not for a count
    received = pull_distinct(subscription, set(range(TOTAL)), lambda m: int(m.data.decode().removeprefix("seq-")),
                             timeout=180)
    seqs = [int(m.data.decode().removeprefix("seq-")) for m in received]
    assert set(seqs) == set(range(TOTAL))

    # Delta tables: exactly once, whatever was replayed
    from pubsub_connect import config as cfg

    ctx = build_context(cfg.validate_worker({"storage.root": str(root)}), once=True)
    for kind in ("bronze", "outbox"):
        rows = ctx.store.read(TableRef(kind, unique_name)).select("partition", "offset").collect()
        assert len(rows) == TOTAL, f"{kind} has {len(rows)} rows"
        assert len({(r.partition, r.offset) for r in rows}) == TOTAL, f"{kind} has duplicates"
    print(f"pub/sub deliveries: {len(seqs)} for {TOTAL} records ({len(seqs) - TOTAL} redelivered)")
