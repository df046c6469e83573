"""The notebooks, run locally as scripts against tables and checkpoints written for real.

A Cloud Pub/Sub sink's ingest and convert stages run through the bundle's entry point
(``pubsub-connect-job ... --once``) against the test Kafka broker, so the notebooks read what a
Databricks job would leave behind: delta-rs tables and Spark checkpoints (a Kafka source's for
ingest, a Delta source's for convert). Then more records are produced without being ingested,
so the Kafka lag is known exactly. Each notebook is executed with ``runpy`` as ``__main__``
(its parameters as command-line arguments), reusing the test session's SparkSession.
"""

from __future__ import annotations

import json
import runpy
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from integration.kafka_helpers import Rec, create_topic, produce
from pubsub_connect import jobs
from pubsub_connect.explore import checkpoints, context, history, output
from pubsub_connect.io.tables import TableRef

pytestmark = pytest.mark.slow

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@dataclass(frozen=True)
class Deployed:
    name: str
    topic: str
    root: Path
    connector_file: Path
    bootstrap: str


@pytest.fixture(scope="module")
def deployed(spark, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Deployed:
    work = tmp_path_factory.mktemp("notebooks")
    name = f"nb{uuid.uuid4().hex[:8]}"
    topic = f"{name}-orders"
    create_topic(kafka_bootstrap, topic, partitions=2)
    produce(kafka_bootstrap, topic, [
        Rec(json.dumps(f"m{i}").encode(), key=f"k{i}".encode(), partition=0) for i in range(3)] + [
        Rec(json.dumps("m3").encode(), key=b"k3", partition=1),
        Rec(b"not json{", key=b"k4", partition=1),
    ])
    connector_file = work / "orders.properties"
    connector_file.write_text("\n".join([
        f"name={name}", "connector.class=com.google.pubsub.kafka.sink.CloudPubSubSinkConnector", f"topics={topic}",
        "cps.project=test-project", "cps.topic=unused", "tasks.max=2", "errors.tolerance=all",
        "value.converter=org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable=false",
    ]) + "\n")
    worker_file = work / "worker.properties"
    worker_file.write_text(f"bootstrap.servers={kafka_bootstrap}\nstorage.root={work / 'root'}\n")
    for stage in ("ingest", "convert"):
        assert jobs.main(["--connector", str(connector_file), "--worker", str(worker_file),
                          "--stage", stage, "--once"]) == 0
    # produced after the ingest: the lag the notebooks must report
    produce(kafka_bootstrap, topic, [Rec(b'"late"', partition=0) for _ in range(3)])
    return Deployed(name, topic, work / "root", connector_file, kafka_bootstrap)


def _run(notebook: str, args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", [str(NOTEBOOKS / notebook), *args])
    runpy.run_path(str(NOTEBOOKS / notebook), run_name="__main__")
    return capsys.readouterr().out


def _common_args(d: Deployed) -> list[str]:
    return ["--connector", str(d.connector_file), "--storage_root", str(d.root)]


def test_explore_connector_shows_counts_offsets_lag_and_samples(
        deployed: Deployed, spark, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = _run("explore_connector.py", [*_common_args(deployed), "--bootstrap_servers", deployed.bootstrap,
                                        "--samples", "2"], monkeypatch, capsys)
    root = deployed.root
    assert out.startswith(f"connector {deployed.name} (cps_sink), storage {root}\n")
    assert output.format_table([
        {"table": "bronze", "rows": 5, "location": str(root / "bronze" / deployed.name)},
        {"table": "outbox", "rows": 4, "location": str(root / "outbox" / deployed.name)},
        {"table": "dlq", "rows": 1, "location": str(root / "dlq" / deployed.name)},
    ]) in out
    assert output.format_table([
        {"stage": "ingest", "topic": deployed.topic, "partition": 0, "committed_offset": 3, "end_offset": 6, "lag": 3},
        {"stage": "ingest", "topic": deployed.topic, "partition": 1, "committed_offset": 2, "end_offset": 2, "lag": 0},
    ]) in out
    assert "bronze (2 newest)" in out and "outbox (2 newest)" in out and "dlq (1 newest)" in out
    dlq_part = out.split("dlq (1 newest)\n", 1)[1]
    header, row = dlq_part.splitlines()[:2]
    assert header.split() == ["stage", "topic", "partition", "offset", "key", "value", "error_class",
                              "error_message", "failed_at"]
    assert row.split()[:6] == ["convert", deployed.topic, "1", "1", "k4", "not"]


@pytest.mark.parametrize(("record", "last_line"), [
    ("0@1", "  published: not yet: waiting in the outbox for the publish stage"),
    ("1@1", None),
])
def test_explore_connector_traces_a_record(deployed: Deployed, spark, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str], record: str,
                                           last_line: str | None) -> None:
    args = [*_common_args(deployed), "--samples", "0", "--trace", f"{deployed.topic}/{record}"]
    out = _run("explore_connector.py", args, monkeypatch, capsys)
    journey = out.split(f"\n{deployed.topic}/{record}\n", 1)[1].splitlines()
    assert journey[0].startswith("  bronze: ")
    if last_line is not None:  # converted: the message the outbox holds, not yet published
        assert journey[1] == "  message (outbox): data='m1', attributes={'key': 'k1'}, ordering_key=''"
        assert journey[2:] == [last_line]
    else:  # not JSON: its dead letter
        assert journey[1].startswith("  dead letter: stage='convert'") and len(journey) == 2


def test_replay_notebook_counts_a_range_in_a_dry_run(deployed: Deployed, spark, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--connector", str(deployed.connector_file), "--worker", str(deployed.root.parent / "worker.properties"),
            "--offsets", f"{deployed.topic}:1:0-1 {deployed.topic}:0:2-", "--dry_run", "true"]
    out = _run("replay.py", args, monkeypatch, capsys)
    assert out.splitlines()[-1] == f"[{deployed.name}.replay] 3 records: would publish 2, 1 dead letters"


def test_offsets_notebook_lists_each_stage_checkpoint(
        deployed: Deployed, spark, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = _run("offsets.py", [*_common_args(deployed), "--bootstrap_servers", deployed.bootstrap],
               monkeypatch, capsys)
    store = context.open_store(str(deployed.root))
    ingest, convert = checkpoints.connector_checkpoints(store, context.connector_ref(str(deployed.connector_file)))
    assert (ingest.stage, convert.stage) == ("ingest", "convert")
    assert ingest.partition_offsets() == {(deployed.topic, 0): 3, (deployed.topic, 1): 2}
    assert (ingest.pending, convert.pending) == (None, None)
    bronze_version = history.delta_log_commits(store.path(TableRef("bronze", deployed.name)))[-1].version
    assert convert.committed[0].table_version == bronze_version
    assert out.splitlines()[0] == f"connector {deployed.name}: 2 checkpoint(s) under {deployed.root}"
    assert (f"ingest: last committed batch {ingest.last_committed}, pending batch - "
            f"({deployed.root / 'checkpoints' / deployed.name / 'ingest'})") in out
    assert output.format_table([
        {"stage": "ingest", "topic": deployed.topic, "partition": 0, "committed_offset": 3, "end_offset": 6, "lag": 3},
        {"stage": "ingest", "topic": deployed.topic, "partition": 1, "committed_offset": 2, "end_offset": 2, "lag": 0},
    ]) in out
    assert f"convert: last committed batch {convert.last_committed}, pending batch -" in out
    assert f"position: table version {bronze_version}\n" in out


def test_throughput_notebook_sums_rows_per_table_and_latency(
        deployed: Deployed, spark, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = _run("throughput.py", [*_common_args(deployed), "--bucket_seconds", "3600"], monkeypatch, capsys)
    store = context.open_store(str(deployed.root))
    commits = {kind: [c for c in history.table_commits(store, deployed.name, kind) if c.rows]
               for kind in ("bronze", "outbox", "dlq")}
    assert {kind: sum(c.rows or 0 for c in cs) for kind, cs in commits.items()} == {"bronze": 5, "outbox": 4, "dlq": 1}
    assert f"\nbronze: 5 rows in {len(commits['bronze'])} commits\n" in out
    assert f"\noutbox: 4 rows in {len(commits['outbox'])} commits\n" in out
    assert f"\ndlq: 1 rows in {len(commits['dlq'])} commits\n" in out
    latency = history.latency(store, deployed.name, 3600)
    assert sum(p.records for p in latency) == 5
    assert all(0 <= p.p50_seconds <= p.max_seconds < 600 for p in latency)
    assert out.rstrip().endswith(output.format_table([
        {"bucket_start": p.start, "records": p.records, "p50_s": p.p50_seconds, "p95_s": p.p95_seconds,
         "max_s": p.max_seconds} for p in latency]))
