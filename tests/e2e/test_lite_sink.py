"""Pub/Sub Lite sink, end to end: real Apache Kafka broker → Delta → the local Lite server.

The connector runs as users run it — ``pubsub-connect run`` in a subprocess — because the Lite
client trusts the test server's self-signed certificate only through
``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``, which must be in the environment the Spark JVM (and so its
Python workers) start with. A JVM start is the dominant cost, so the module prepares every
scenario once (:func:`sink_run`): one ``run --once`` of the recovery connector killed mid-publish,
then one ``run --once`` of all connectors (the killed one restarting first). The tests then
check their scenario's outcome. What Lite received is read straight from the server's
partitions; serialized protobuf ``Value`` payloads are compared parsed, never as bytes.

The helpers at the top are shared with ``test_lite_source.py``.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from google.protobuf import json_format, struct_pb2

from e2e.harness import scenarios_to_run
from integration.kafka_helpers import create_topic
from lite_server import LiteServer

PROJECT = "test-project"
ZONE = "us-central1-a"
JSON = "org.apache.kafka.connect.json.JsonConverter"
STRING = "org.apache.kafka.connect.storage.StringConverter"
TOPIC_ATTR = "x-goog-pubsublite-source-kafka-topic"
PARTITION_ATTR = "x-goog-pubsublite-source-kafka-partition"
OFFSET_ATTR = "x-goog-pubsublite-source-kafka-offset"
TYPE_ATTR = "x-goog-pubsublite-source-kafka-event-time-type"


# ----------------------------------------------------------------------------------------------
# Shared helpers
# ----------------------------------------------------------------------------------------------


def lite_path(kind: str, name: str) -> str:
    return f"projects/{PROJECT}/locations/{ZONE}/{kind}/{name}"


def write_worker(tmp_path: Path, bootstrap: str, **extra: str) -> tuple[Path, Path]:
    """A worker file for a small local run; returns (worker file, storage root)."""
    root = tmp_path / "root"
    settings = {"bootstrap.servers": bootstrap, "storage.root": str(root), "spark.master": "local[2]",
                "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2", **extra}
    worker = tmp_path / "worker.properties"
    worker.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return worker, root


def write_connector(tmp_path: Path, name: str, lite: LiteServer, **keys: str) -> Path:
    path = tmp_path / f"{name}.properties"
    settings = {"name": name, "pubsublite.project": PROJECT, "pubsublite.location": ZONE,
                "pubsublite.endpoint": lite.endpoint, **keys}
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def client_env(lite: LiteServer) -> dict[str, str]:
    env = lite.client_env()
    for var in ("https_proxy", "HTTPS_PROXY", "grpc_proxy", "http_proxy", "HTTP_PROXY"):
        env.pop(var, None)
    env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1"
    return env


#: Spark gives a new Python worker a hard-coded 10 s to connect back; on an overloaded machine a
#: run can fail with this. Such a run is simply started again, as an operator would.
SPARK_CONNECT_BACK = "Python worker failed to connect back"
ATTEMPTS = 3


def cli(args: Sequence[str], lite: LiteServer, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    """``pubsub-connect ARGS`` in a subprocess that trusts the Lite server (see :data:`SPARK_CONNECT_BACK`)."""
    for _ in range(ATTEMPTS):
        result = subprocess.run([sys.executable, "-m", "pubsub_connect.cli", *args], env=client_env(lite),
                                capture_output=True, text=True, timeout=timeout, check=False)
        if result.returncode == 0 or SPARK_CONNECT_BACK not in result.stderr:
            break
    return result


def run_once(lite: LiteServer, worker: Path, *connectors: Path) -> str:
    result = cli(["run", "--once", "--worker", str(worker), *map(str, connectors)], lite)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-4000:]
    return result.stdout


def start_cli(args: Sequence[str], lite: LiteServer, log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 - the child owns it; inspected after the process ends
    return subprocess.Popen([sys.executable, "-m", "pubsub_connect.cli", *args], stdout=out,
                            stderr=subprocess.STDOUT, env=client_env(lite), start_new_session=True)


def kill_after(args: Sequence[str], lite: LiteServer, log: Path, marker: str, timeout_s: float = 300) -> None:
    """Start ``pubsub-connect ARGS`` in its own session and SIGKILL its process group (Python
    driver, JVM, Python workers) once ``marker`` was printed to ``log``."""
    for attempt in range(1, ATTEMPTS + 1):
        proc = start_cli(args, lite, log)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                text = log.read_text(errors="replace")
                if marker in text:
                    return
                if proc.poll() is not None:
                    if SPARK_CONNECT_BACK in text and attempt < ATTEMPTS:
                        break
                    raise AssertionError(f"connector exited early ({proc.returncode}):\n{text[-3000:]}")
                time.sleep(0.2)
            else:
                raise AssertionError(f"no {marker!r} within {timeout_s} s:\n{log.read_text()[-3000:]}")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)


def read_table(root: Path, kind: str, name: str) -> pa.Table:
    from deltalake import DeltaTable

    return DeltaTable(str(root / kind / name)).to_pyarrow_table()


def attributes(message: Any) -> dict[str, list[bytes]]:
    return {k: list(v.values) for k, v in sorted(message.attributes.items())}


def event_time(message: Any) -> tuple[int, int] | None:
    return (message.event_time.seconds, message.event_time.nanos) if message.HasField("event_time") else None


# ----------------------------------------------------------------------------------------------
# Sink helpers
# ----------------------------------------------------------------------------------------------


def produce_records(bootstrap: str, topic: str, records: Sequence[dict[str, Any]]) -> None:
    """Produce with explicit partitions, timestamps and repeated header names."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    errors: list[str] = []
    for r in records:
        producer.produce(topic, value=r.get("value"), key=r.get("key"), partition=r.get("partition", 0),
                         headers=r.get("headers"), timestamp=r.get("timestamp", 0),
                         on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
    assert producer.flush(60) == 0 and not errors, errors


def envelope(schema: dict[str, Any], payload: Any) -> bytes:
    import json

    return json.dumps({"schema": schema, "payload": payload}).encode()


def sha_partition(key: bytes, count: int) -> int:
    return int.from_bytes(hashlib.sha256(key).digest(), "big") % count


def value_of(data: bytes) -> Any:
    """A serialized ``google.protobuf.Value`` as plain Python (parsed, order-free)."""
    return json_format.MessageToDict(struct_pb2.Value.FromString(data))


def seed_bronze(root: Path, name: str, rows: list[dict[str, Any]]) -> None:
    """Land Kafka records in bronze directly, for records a broker cannot produce (offset -1,
    no timestamp, LogAppendTime on a CreateTime topic); the ingest stage then finds it existing."""
    from deltalake import write_deltalake

    from pubsub_connect.model.schemas import KAFKA_BRONZE, to_arrow

    schema = to_arrow(KAFKA_BRONZE)
    write_deltalake(str(root / "bronze" / name), pa.Table.from_pylist(rows, schema=schema), mode="append")


# ----------------------------------------------------------------------------------------------
# Scenarios: prepared once, run in two CLI invocations
# ----------------------------------------------------------------------------------------------

STRUCT = {"type": "struct", "fields": [{"field": "name", "type": "string"}, {"field": "n", "type": "int32"},
                                       {"field": "raw", "type": "bytes"}]}
MAP = {"type": "map", "keys": {"type": "int32"}, "values": {"type": "array", "items": {"type": "boolean"}}}
NULLABLE_ITEMS = {"type": "array", "items": {"type": "string", "optional": True}}
#: The data model through Kafka (key StringConverter, value JsonConverter with schemas).
MODEL_RECORDS = [
    {"key": b"dog", "value": envelope({"type": "string"}, "fox"), "partition": 0, "timestamp": 50001,
     "headers": [("h", b"1"), ("other", b"x"), ("h", b"2")]},
    {"key": b"dog", "value": envelope({"type": "float"}, 1.1), "partition": 0, "timestamp": 50002},
    {"key": b"dog", "value": envelope(STRUCT, {"name": "x", "n": 3, "raw": "AAE="}), "partition": 0,
     "timestamp": 50003},
    {"key": b"cat", "value": envelope({"type": "double"}, 1e7), "partition": 1, "timestamp": 50004},
    {"key": b"cat", "value": envelope(NULLABLE_ITEMS, ["a", None]), "partition": 1, "timestamp": 50005},  # DLQ
    {"key": b"cat", "value": envelope(MAP, [[1, [True, False]], [2, []]]), "partition": 1, "timestamp": 50006},
    {"key": b"cat", "value": envelope({"type": "int64"}, 5), "partition": 1, "timestamp": 50007},
    {"key": None, "value": envelope({"type": "boolean"}, True), "partition": 2, "timestamp": 50008},
    {"key": b"emu", "value": None, "partition": 2, "timestamp": 50009},
]
#: Ordering mode KAFKA: Kafka partition n -> Lite partition n (4 Lite partitions for 3 Kafka ones).
KAFKA_MODE_RECORDS = [{"key": None if i % 4 == 0 else f"k{i % 5}".encode(), "value": f"v{i}".encode(),
                       "partition": i % 3, "timestamp": 1_000 + i} for i in range(30)]
RECOVERY_TOTAL = 600


#: The scenarios of the module fixture each test reads.
SINK_SCENARIOS = {
    "test_data_model_and_default_routing": {"model"},
    "test_issue_examples": {"model"},
    "test_kafka_ordering_mode": {"kafka_mode"},
    "test_kafka_ordering_mode_with_too_few_lite_partitions_stops_at_start_up": {"too_few"},
    "test_kill_9_while_publishing_then_restart_loses_nothing": {"recovery"},
}


@pytest.fixture(scope="module")
def sink_run(lite: LiteServer, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory,
             request: pytest.FixtureRequest) -> dict[str, Any]:
    """The sink scenarios the selected tests read, prepared and run; returns names, paths and the
    final run's result."""
    import uuid

    wanted = scenarios_to_run(request, SINK_SCENARIOS)

    tmp_path = tmp_path_factory.mktemp("lite-sink")
    tag = f"t{uuid.uuid4().hex[:8]}"
    names = {"model": f"{tag}-m", "kafka_mode": f"{tag}-k", "too_few": f"{tag}-x", "recovery": f"{tag}-r"}
    for scenario, lite_partitions in (("model", 3), ("kafka_mode", 4), ("too_few", 2), ("recovery", 3)):
        lite.create_topic(lite_path("topics", names[scenario]), lite_partitions)
        create_topic(kafka_bootstrap, names[scenario], partitions=3)
    produce_records(kafka_bootstrap, names["model"], MODEL_RECORDS)
    produce_records(kafka_bootstrap, names["kafka_mode"], KAFKA_MODE_RECORDS)
    produce_records(kafka_bootstrap, names["too_few"], [{"value": b"x", "partition": 2}])
    produce_records(kafka_bootstrap, names["recovery"], [
        {"key": f"k{i % 7}".encode(), "value": f"seq-{i}".encode(), "partition": i % 7 % 3, "timestamp": 1_000 + i}
        for i in range(RECOVERY_TOTAL)])

    # small batches: the recovery connector publishes in several micro-batches (about seven: each
    # ingest batch writes a file per Kafka partition, and a trigger takes three files)
    worker, root = write_worker(tmp_path, kafka_bootstrap, **{
        "pipeline.max.records.per.batch": "100", "pipeline.max.files.per.trigger": "3"})
    base = {"connector.class": "com.google.pubsublite.kafka.sink.PubSubLiteSinkConnector", "tasks.max": "2"}
    files = {
        "recovery": write_connector(tmp_path, names["recovery"], lite, **{
            "connector.class": "PubSubLiteSinkConnector", "topics": names["recovery"],
            "pubsublite.topic": names["recovery"], "tasks.max": "2"}),
        "model": write_connector(tmp_path, names["model"], lite, **base, topics=names["model"], **{
            "pubsublite.topic": names["model"], "key.converter": STRING, "value.converter": JSON,
            "errors.tolerance": "all"}),
        "kafka_mode": write_connector(tmp_path, names["kafka_mode"], lite, **base, topics=names["kafka_mode"], **{
            "pubsublite.topic": names["kafka_mode"], "pubsublite.ordering.mode": "kafka"}),
        "too_few": write_connector(tmp_path, names["too_few"], lite, **base, topics=names["too_few"], **{
            "pubsublite.topic": names["too_few"], "pubsublite.ordering.mode": "KAFKA"}),
    }
    # Two worked examples of the mapping: records a broker cannot produce (offset -1, no timestamp,
    # LogAppendTime), landed in the model connector's bronze beside what it ingests.
    fox = envelope({"type": "string"}, "fox")
    seed_bronze(root, names["model"], [
        {"key": b"dog", "value": fox, "topic": "brown", "partition": 0, "offset": -1, "timestamp": None,
         "timestampType": -1, "headers": None},
        {"key": b"dog", "value": fox, "topic": "brown", "partition": 0, "offset": -1,
         "timestamp": pa.scalar(50_001_000, pa.timestamp("us", tz="UTC")).as_py(), "timestampType": 1,
         "headers": None},
    ])

    # Run 1: kill -9 the recovery connector while it publishes (``--once`` runs the stages one
    # after the other, so ingest and convert are complete and the publish has just begun).
    published_before_restart = None
    if "recovery" in wanted:
        kill_after(["run", "--once", "--worker", str(worker), str(files["recovery"])], lite,
                   tmp_path / "recovery.log", f"[{names['recovery']}.publish] batch=0 ")
        published_before_restart = sum(lite.head(lite_path("topics", names["recovery"]), p) for p in range(3))
    # Run 2: every wanted scenario; the recovery connector restarts first, too_few (which fails)
    # comes last.
    result = cli(["run", "--once", "--worker", str(worker),
                  *(str(files[k]) for k in ("recovery", "model", "kafka_mode", "too_few") if k in wanted)], lite)
    return {"names": names, "root": root, "result": result, "published_before_restart": published_before_restart}


def _done(run: dict[str, Any], scenario: str) -> None:
    result, name = run["result"], run["names"][scenario]
    assert f"[{name}] done" in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]


# ----------------------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------------------


@pytest.mark.compat
@pytest.mark.slow
def test_data_model_and_default_routing(lite: LiteServer, sink_run: dict[str, Any]) -> None:
    """Key/data encoding by converter output, multi-valued header attributes, the Kafka
    coordinate and event-time attributes, the official key routing, per-key order and the DLQ."""
    _done(sink_run, "model")
    model, root = sink_run["names"]["model"], sink_run["root"]
    logs = {p: lite.messages(lite_path("topics", model), p) for p in range(3)}
    got = {}
    for partition, log in logs.items():
        for seq in log:
            m = seq.message
            if m.key:
                assert partition == sha_partition(m.key, 3), (m.key, partition)  # the official routing
            if m.attributes[TOPIC_ATTR].values == [model.encode()]:
                got[int(m.attributes[PARTITION_ATTR].values[0]), int(m.attributes[OFFSET_ATTR].values[0])] = m
    assert sorted(got) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 2), (1, 3), (2, 0), (2, 1)]  # (1, 1) dead-lettered

    def check(coords: tuple[int, int], key: bytes, extra: dict[str, list[bytes]], stamp: int) -> bytes:
        m = got[coords]
        assert m.key == key
        assert attributes(m) == {**extra, TOPIC_ATTR: [model.encode()], PARTITION_ATTR: [str(coords[0]).encode()],
                                 OFFSET_ATTR: [str(coords[1]).encode()], TYPE_ATTR: [b"CreateTime"]}
        assert event_time(m) == (stamp // 1000, stamp % 1000 * 1_000_000)
        return bytes(m.data)

    assert check((0, 0), b"dog", {"h": [b"1", b"2"], "other": [b"x"]}, 50001) == b"fox"
    assert check((0, 1), b"dog", {}, 50002) == b"1.100000023841858"
    assert value_of(check((0, 2), b"dog", {}, 50003)) == {"name": "x", "n": 3.0, "raw": "AAE="}
    assert check((1, 0), b"cat", {}, 50004) == b"1.0E7"
    assert value_of(check((1, 2), b"cat", {}, 50006)) == {"1": [True, False], "2": []}
    assert check((1, 3), b"cat", {}, 50007) == b"5"
    assert check((2, 0), b"", {}, 50008) == b"true"
    assert check((2, 1), b"emu", {}, 50009) == b""
    # per-key order: a key's messages sit in one Lite partition in Kafka offset order
    for key in (b"dog", b"cat"):
        (partition,) = {p for p, log in logs.items() for s in log if s.message.key == key}
        offsets = [int(s.message.attributes[OFFSET_ATTR].values[0]) for s in logs[partition]
                   if s.message.key == key and s.message.attributes[TOPIC_ATTR].values == [model.encode()]]
        assert offsets == sorted(offsets) and len(offsets) == 3
    dlq = read_table(root, "dlq", model).to_pylist()
    assert [(r["stage"], r["topic"], r["partition"], r["offset"], r["key"], r["error_class"]) for r in dlq] == [
        ("convert", model, 1, 1, b"cat", "LiteEncodingError")]
    assert "null" in dlq[0]["error_message"] and "\n" not in dlq[0]["error_message"]


@pytest.mark.slow
def test_issue_examples(lite: LiteServer, sink_run: dict[str, Any]) -> None:
    """key dog, value fox, topic brown, partition 0, offset -1: without a timestamp no event
    time; with 50001 ms LogAppendTime event time 50.001 s and its type attribute."""
    _done(sink_run, "model")
    model = sink_run["names"]["model"]
    examples = [s.message for p in range(3) for s in lite.messages(lite_path("topics", model), p)
                if s.message.attributes[TOPIC_ATTR].values == [b"brown"]]
    first, second = sorted(examples, key=lambda m: event_time(m) or (0, 0))
    coordinates = {TOPIC_ATTR: [b"brown"], PARTITION_ATTR: [b"0"], OFFSET_ATTR: [b"-1"]}
    assert (first.key, first.data, attributes(first), event_time(first)) == (b"dog", b"fox", coordinates, None)
    assert (second.key, second.data, attributes(second), event_time(second)) == (
        b"dog", b"fox", {**coordinates, TYPE_ATTR: [b"LogAppendTime"]}, (50, 1_000_000))


@pytest.mark.slow
def test_kafka_ordering_mode(lite: LiteServer, sink_run: dict[str, Any]) -> None:
    """Kafka partition n → Lite partition n, in Kafka offset order; the 4th Lite partition stays
    empty."""
    _done(sink_run, "kafka_mode")
    topic = lite_path("topics", sink_run["names"]["kafka_mode"])
    for partition in range(4):
        log = lite.messages(topic, partition)
        expected = [r for r in KAFKA_MODE_RECORDS if r["partition"] == partition]
        assert [s.message.data for s in log] == [r["value"] for r in expected]
        assert [s.message.key for s in log] == [r["key"] or b"" for r in expected]
        assert all(s.message.attributes[PARTITION_ATTR].values == [str(partition).encode()] for s in log)


@pytest.mark.slow
def test_kafka_ordering_mode_with_too_few_lite_partitions_stops_at_start_up(
        lite: LiteServer, sink_run: dict[str, Any]) -> None:
    result, name, root = sink_run["result"], sink_run["names"]["too_few"], sink_run["root"]
    assert result.returncode == 2, result.stderr[-3000:]
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        f"error: {name}: pubsublite.ordering.mode=KAFKA publishes Kafka partition N to Lite partition N, but "
        f"Kafka topic {name} has 3 partitions and Lite topic {lite_path('topics', name)} has only 2: "
        "add Lite partitions or use pubsublite.ordering.mode=DEFAULT"], result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert not (root / "bronze" / name).exists()  # stopped before landing anything
    assert lite.head(lite_path("topics", name), 0) == 0


@pytest.mark.slow
def test_kill_9_while_publishing_then_restart_loses_nothing(lite: LiteServer, sink_run: dict[str, Any]) -> None:
    """After the SIGKILL mid-publish and the restart: every record reached Lite (at-least-once:
    the interrupted batch may be published again), bronze and outbox hold each exactly once,
    and every key's messages keep their Kafka order."""
    _done(sink_run, "recovery")
    name, root = sink_run["names"]["recovery"], sink_run["root"]
    assert 0 < sink_run["published_before_restart"] < RECOVERY_TOTAL
    seqs: dict[bytes, list[int]] = {}
    received = 0
    for partition in range(3):
        for seq in lite.messages(lite_path("topics", name), partition):
            seqs.setdefault(seq.message.key, []).append(int(seq.message.data.removeprefix(b"seq-")))
            received += 1
    assert set().union(*map(set, seqs.values())) == set(range(RECOVERY_TOTAL)), "records lost"
    for key, values in seqs.items():
        first_seen = list(dict.fromkeys(values))
        assert first_seen == sorted(first_seen), f"order of {key!r} broken"
    # the Kafka coordinates produced: record i to partition i % 7 % 3, offsets from 0 in that order
    per_partition = [sum(1 for i in range(RECOVERY_TOTAL) if i % 7 % 3 == p) for p in range(3)]
    produced = [(p, o) for p in range(3) for o in range(per_partition[p])]
    for kind in ("bronze", "outbox"):  # each record once in each table, whatever was republished
        table = read_table(root, kind, name)
        coords = sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))
        assert coords == produced, f"{kind}: {len(coords)} rows for {RECOVERY_TOTAL} records"
    print(f"lite received {received} messages for {RECOVERY_TOTAL} records ({received - RECOVERY_TOTAL} republished)")
