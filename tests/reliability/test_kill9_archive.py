"""Archive sink: kill -9 five times at seeded random points (``kill_loop.py``), restart, verify.

Local directory target. After the loop and a ``--once`` drain the archive holds every Kafka
record exactly once: every visible file is whole and indexed, the files of a partition tile
its offsets from 0 without gap or overlap, and no staged part or temporary file is left.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from e2e.test_archive import T0, _archived_records, _produce, _topic_records, _values
from integration.kafka_helpers import create_topic
from pubsub_connect.io import objectstore as ostore
from reliability.kill_loop import drain, run_kill_loop

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

PARTITIONS = 3
PER_PARTITION_PER_CYCLE = 150


def test_archive_kill_9_five_times_every_record_archived_once(kafka_bootstrap: str, tmp_path: Path,
                                                              unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=PARTITIONS)
    out, buffer = tmp_path / "out", tmp_path / "buffer"
    buffer.mkdir()
    worker = tmp_path / "worker.properties"
    worker.write_text(f"bootstrap.servers={kafka_bootstrap}\nstorage.root={tmp_path / 'root'}\n"
                      "pipeline.max.records.per.batch=120\npipeline.trigger.interval.ms=100\n"
                      "spark.master=local[2]\nspark.sql.shuffle.partitions=2\n")
    connector = tmp_path / "archive.properties"
    connector.write_text(f"name={unique_name}\nconnector.class=S3SinkConnector\ntopics={unique_name}\n"
                         f"output.path={out}\nlocal.buffer.dir={buffer}\nflush.size=70\n"
                         "compressed_block_size=600\n")
    args = ["--worker", str(worker), str(connector)]

    def feed(cycle: int) -> None:
        start = cycle * PER_PARTITION_PER_CYCLE
        _produce(kafka_bootstrap, unique_name, [
            (p, v, T0 + (start + i) * 1000) for p in range(PARTITIONS)
            for i, v in enumerate(_values(p, start, PER_PARTITION_PER_CYCLE))])

    points = run_kill_loop(unique_name, args, dict(os.environ), tmp_path / "connector.log", ("archive",), feed)
    assert len(points) == 5
    drain(args, dict(os.environ))

    store = ostore.LocalStore(out)
    archived = _archived_records(store, "")
    assert archived == _topic_records(kafka_bootstrap, unique_name)
    assert {tp: len(records) for tp, records in archived.items()} == {
        (unique_name, p): 5 * PER_PARTITION_PER_CYCLE for p in range(PARTITIONS)}
    assert not list(out.rglob("*.part")) and not list((buffer / unique_name).rglob("*.part"))
