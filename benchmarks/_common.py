"""Shared pieces of the benchmark scripts: services, data generation, bare-client baselines, output.

Every benchmark measures the product and a bare-client baseline in the same run, on the same
machine and services, and reports the ratio: absolute numbers depend on the machine, ratios less.
"""

from __future__ import annotations

import json
import os
import platform
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def payload(size: int, seq: int) -> bytes:
    """A ``size``-byte record body that starts with its sequence id (so it can be checked)."""
    head = f"{seq:012d}|".encode()
    return head + b"x" * (size - len(head))


_FIELDS = ("user", "session", "page", "referrer", "device", "country", "campaign", "experiment", "trace")


def event_payload(size: int, seq: int) -> bytes:
    """Like :func:`payload` (starts with the sequence id), but the rest is a log-like JSON event
    with random ids that gzip shrinks about as much as real event data (~2-3x), not a run of one
    byte that costs compression nothing. Deterministic per ``seq``."""
    rng = random.Random(seq)
    out = bytearray(f'{seq:012d}|{{"ts":{1_790_000_000_000 + seq},"kind":"event"'.encode())
    while len(out) < size:
        out += f',"{rng.choice(_FIELDS)}":"{rng.getrandbits(48):012x}"'.encode()
    return bytes(out[:size - 1]) + b"}"


def produce(bootstrap: str, topic: str, count: int, size: int, partitions: int = 3,
            body: Callable[[int, int], bytes] = payload) -> float:
    """Create ``topic`` and produce ``count`` records of ``body(size, seq)``; returns seconds."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "enable.idempotence": True, "queue.buffering.max.messages": 1_000_000})
    started = time.perf_counter()
    for seq in range(count):
        while True:
            try:
                producer.produce(topic, body(size, seq), key=str(seq % 100).encode())
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("produce did not complete")
    return time.perf_counter() - started


def bare_consume(bootstrap: str, topic: str, count: int, partitions: int = 3) -> float:
    """A plain confluent-kafka consumer reading ``count`` records from the start; returns seconds."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52_428_800})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    started = time.perf_counter()
    while seen < count:
        for message in consumer.consume(10_000, timeout=1.0):
            if message.error() is None:
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def bare_publish(project: str, topic: str, count: int, size: int, max_messages: int = 100) -> float:
    """The official publisher alone (same batch settings as the sink's defaults); returns seconds."""
    from google.cloud import pubsub_v1

    client = pubsub_v1.PublisherClient(batch_settings=pubsub_v1.types.BatchSettings(
        max_messages=max_messages, max_bytes=9_500_000, max_latency=0.1))
    path = client.topic_path(project, topic)
    client.create_topic(request={"name": path})
    started = time.perf_counter()
    futures = [client.publish(path, payload(size, seq)) for seq in range(count)]
    for future in futures:
        future.result(timeout=300)
    elapsed = time.perf_counter() - started
    client.stop()
    return elapsed


#: Worker keys of the two engines: Spark's Kafka connector with Delta Lake (what Databricks runs,
#: the default) and the stand-ins for machines without an artifact repository.
ENGINES: dict[str, dict[str, str]] = {
    "native": {},
    "fallback": {"pipeline.kafka.implementation": "python", "pipeline.tables.implementation": "delta-rs"},
}


def add_engine_argument(parser: Any) -> None:
    parser.add_argument("--engine", choices=sorted(ENGINES), default="native",
                        help="native: Spark's Kafka connector + Delta Lake; fallback: Python Kafka source + delta-rs")


def results_name(benchmark: str, engine: str) -> str:
    """Result file name: the native engine keeps the plain name that ``run_all`` reads."""
    return benchmark if engine == "native" else f"{benchmark}-{engine}"


def write_results(name: str, results: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **results}, indent=2))
    return path


def table(rows: list[tuple[str, str]]) -> str:
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label.ljust(width)}  {value}" for label, value in rows)


def timed_stages(ctx: Any, connector: Any, stages: Any) -> tuple[float, dict[str, float]]:
    """Run a connector's stages one after the other to completion (``--once``), as ``run --once``
    does; returns the total seconds and the seconds per stage."""
    from pubsub_connect.pipelines.runner.supervisor import run_stages

    per_stage: dict[str, float] = {}
    started = time.perf_counter()
    for stage in stages:
        t = time.perf_counter()
        run_stages(ctx, connector, [stage])
        per_stage[stage.name] = time.perf_counter() - t
    return time.perf_counter() - started, per_stage


_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root_pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of ``root_pid`` and each of its descendants, from ``/proc``."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)
    tree, todo = {root_pid}, [root_pid]
    while todo:
        parent = todo.pop()
        for pid, (ppid, _) in stats.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                todo.append(pid)
    return {pid: stats[pid][1] for pid in tree if pid in stats}


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU used between two snapshots (processes started in between count from zero)."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
