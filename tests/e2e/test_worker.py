"""``pubsub-connect worker`` driven over HTTP the way Kafka Connect's documentation drives a
worker: create, pause, resume, stop, move offsets, start again, restart, kill -9 and restart the
worker, delete, the topics each used (KIP-558) — on the real broker and the Pub/Sub emulator, checked by sequence ids.

Two Cloud Pub/Sub sinks read the same Kafka topic into two Pub/Sub topics. B keeps running while
A is paused, so "nothing flows for A" is shown against data: B delivered every new record in the
same time, and A's consumer group did not move.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from integration.kafka_helpers import Rec, create_topic, produce
from integration.pubsub_helpers import PROJECT, create_topic_and_subscription, pull_distinct, subscriber
from pubsub_connect.io.kafka.groups import ConsumerGroupOffsets
from pubsub_connect.io.services.process import free_port
from unit.test_connect_rest import call
from waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

PARTITIONS = 3


class Worker:
    """A worker process (its own process group) and a small client of its REST API."""

    def __init__(self, worker_file: Path, log: Path, url: str):
        self.worker_file, self.log, self.url = worker_file, log, url
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Worker:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "pubsub_connect.cli", "worker", "--worker",
                                          str(self.worker_file)], stdout=out, stderr=subprocess.STDOUT,
                                         env=os.environ.copy(), start_new_session=True)
        self.wait_for(lambda: self.request("GET", "/")[0] == 200, "the REST API to answer")
        return self

    def kill_9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(120)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return call(self.url, method, path, body)

    def wait_for(self, condition, what: str, timeout_s: float = 300) -> None:
        """Poll ``condition`` (an HTTP read) until true; fail naming ``what`` and the log's tail
        if the worker exits or the time is up."""

        def worker_alive_and_condition() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited ({self.proc.returncode}) waiting for {what}:\n"
                                     f"{self.log.read_text()[-3000:]}")
            return bool(condition())

        wait_until(worker_alive_and_condition, timeout_s, lambda: f"{what}:\n{self.log.read_text()[-3000:]}",
                   interval_s=0.25)

    def state(self, name: str) -> str | None:
        status, body = self.request("GET", f"/connectors/{name}/status")
        return body["connector"]["state"] if status == 200 else None

    def wait_state(self, name: str, state: str) -> None:
        self.wait_for(lambda: self.state(name) == state, f"{name} to be {state}")


@pytest.fixture
def worker(tmp_path: Path, kafka_bootstrap: str, pubsub_emulator_host: str) -> Iterator[Worker]:
    port = free_port()
    settings = {"bootstrap.servers": kafka_bootstrap, "storage.root": str(tmp_path / "root"),
                "listeners": f"http://127.0.0.1:{port}", "spark.master": "local[2]",
                "spark.sql.shuffle.partitions": "2", "pipeline.trigger.interval.ms": "500"}
    worker_file = tmp_path / "worker.properties"
    worker_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    process = Worker(worker_file, tmp_path / "worker.log", f"http://127.0.0.1:{port}")
    try:
        yield process
    finally:
        if process.proc is not None and process.proc.poll() is None:
            os.killpg(process.proc.pid, signal.SIGKILL)
            process.proc.wait(30)


def seq(received) -> int:
    return int(received.data.decode().removeprefix("seq-"))


def records(first: int, last: int) -> list[Rec]:
    """``seq-i`` to partition ``i % 3``: partition p holds ids p, p+3, … in offset order."""
    return [Rec(value=f"seq-{i}".encode(), partition=i % PARTITIONS) for i in range(first, last)]


def offsets_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pubsub_connect.cli", "offsets", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def nothing_waiting(subscription: str) -> bool:
    """One pull finds no message (the emulator holds a pull open up to its deadline)."""
    try:
        response = subscriber().pull(request={"subscription": subscription, "max_messages": 100}, timeout=3)
    except gexc.DeadlineExceeded:
        return True
    return not response.received_messages


def group_total(bootstrap: str, name: str, topic: str) -> int:
    """What consumer group ``connect-<name>`` has committed, summed over the topic's partitions."""
    groups = ConsumerGroupOffsets({"bootstrap.servers": bootstrap}, f"connect-{name}")
    try:
        return sum(groups.read([(topic, p) for p in range(PARTITIONS)]).values())
    finally:
        groups.close()


@pytest.mark.compat
def test_worker_rest_api_lifecycle_offsets_and_kill_9(worker: Worker, kafka_bootstrap: str,
                                                      unique_name: str) -> None:
    topic = f"{unique_name}-in"
    create_topic(kafka_bootstrap, topic, partitions=PARTITIONS)
    a, b = f"{unique_name}-a", f"{unique_name}-b"
    subs = {name: create_topic_and_subscription(name)[1] for name in (a, b)}

    def config(name: str) -> dict[str, str]:
        return {"connector.class": "com.google.pubsub.kafka.sink.CloudPubSubSinkConnector", "topics": topic,
                "cps.project": PROJECT, "cps.topic": name, "tasks.max": "1", "cps.useEmulator": "true"}

    def delivered(name: str, first: int, last: int) -> list[int]:
        """The ids from ``first`` on that reached ``name``'s topic while waiting for every one of
        ``first..last-1``, sorted, each as often as it arrived. The sink is at-least-once: a stage
        restarted or killed after publishing a micro-batch and before committing it publishes that
        batch again, so an earlier record may arrive once more (left out here); nothing else may:
        an id never produced fails here, a new record that arrived twice shows in what is returned."""
        wanted = set(range(first, last))
        got = [seq(m) for m in pull_distinct(subs[name], wanted, seq, timeout=300)]
        unknown = sorted(set(got) - wanted - set(range(first)))
        assert not unknown, f"records never produced: {unknown}"
        return sorted(i for i in got if i >= first)

    worker.start()
    status, root = worker.request("GET", "/")
    assert status == 200 and set(root) == {"version", "commit", "kafka_cluster_id"}
    status, plugins = worker.request("GET", "/connector-plugins")
    assert {"class": "com.google.pubsub.kafka.sink.CloudPubSubSinkConnector", "type": "sink",
            "version": root["version"]} in plugins

    # validate: every bad key with its own errors
    status, checked = worker.request("PUT", "/connector-plugins/CloudPubSubSinkConnector/config/validate",
                                     {**config(a), "tasks.max": "0", "name": a})
    assert status == 200 and checked["error_count"] == 1
    assert {c["value"]["name"]: c["value"]["errors"] for c in checked["configs"] if c["value"]["errors"]} == \
        {"tasks.max": ["tasks.max='0' is below the minimum 1 (allowed: [1..])"]}
    status, checked = worker.request("PUT", "/connector-plugins/CloudPubSubSinkConnector/config/validate",
                                     {"connector.class": "CloudPubSubSinkConnector", "name": a, "topics": topic})
    assert {c["value"]["name"]: c["value"]["errors"] for c in checked["configs"] if c["value"]["errors"]} == \
        {"cps.project": ["missing required key cps.project"], "cps.topic": ["missing required key cps.topic"]}

    # create → RUNNING, records flow to both
    status, created = worker.request("POST", "/connectors", {"name": a, "config": config(a)})
    assert status == 201, created
    assert created == {"name": a, "config": {**config(a), "name": a}, "type": "sink",
                       "tasks": [{"connector": a, "task": t} for t in range(3)]}
    assert worker.request("POST", "/connectors", {"name": a, "config": config(a)}) == \
        (409, {"error_code": 409, "message": f"Connector {a} already exists"})
    # B runs fused: one query, so one task
    fused = {**config(b), "pipeline.mode": "fused"}
    assert worker.request("POST", "/connectors", {"name": b, "config": fused}) == (201, {
        "name": b, "config": {**fused, "name": b}, "type": "sink", "tasks": [{"connector": b, "task": 0}]})
    produce(kafka_bootstrap, topic, records(0, 30))
    assert delivered(a, 0, 30) == delivered(b, 0, 30) == list(range(30))
    worker.wait_state(a, "RUNNING")
    assert [task["state"] for task in worker.request("GET", f"/connectors/{b}/status")[1]["tasks"]] == ["RUNNING"]
    assert sorted(worker.request("GET", "/connectors")[1]) == sorted([a, b])
    # the topics each used (KIP-558), learnt from their Kafka reads; a reset forgets them until used again
    for name in (a, b):
        worker.wait_for(lambda name=name: worker.request("GET", f"/connectors/{name}/topics") ==
                        (200, {name: {"topics": [topic]}}), f"{name}'s topics")
    assert worker.request("PUT", f"/connectors/{a}/topics/reset") == (202, None)
    assert worker.request("GET", f"/connectors/{a}/topics") == (200, {a: {"topics": []}})

    # pause A: B delivers the next records, A's group does not move and A's subscription stays empty
    assert worker.request("PUT", f"/connectors/{a}/pause") == (202, None)
    assert worker.state(a) == "PAUSED"
    worker.wait_for(lambda: group_total(kafka_bootstrap, a, topic) == 30, f"{a}'s group at 30")
    produce(kafka_bootstrap, topic, records(30, 60))
    assert delivered(b, 30, 60) == list(range(30, 60))
    worker.wait_for(lambda: group_total(kafka_bootstrap, b, topic) == 60, f"{b}'s group at 60")
    assert group_total(kafka_bootstrap, a, topic) == 30
    assert nothing_waiting(subs[a])

    # resume A: exactly the records it missed
    assert worker.request("PUT", f"/connectors/{a}/resume") == (202, None)
    assert delivered(a, 30, 60) == list(range(30, 60))
    worker.wait_for(lambda: group_total(kafka_bootstrap, a, topic) == 60, f"{a}'s group at 60")
    worker.wait_for(lambda: worker.request("GET", f"/connectors/{a}/topics") == (200, {a: {"topics": [topic]}}),
                    f"{a}'s topic recorded again")

    # offsets move only when STOPPED; then A starts again from them
    rewind = {"offsets": [{"partition": {"kafka_topic": topic, "kafka_partition": 0}, "offset": {"kafka_offset": 5}}]}
    status, refused = worker.request("PATCH", f"/connectors/{a}/offsets", rewind)
    assert status == 400 and "must be STOPPED" in refused["message"] and refused["error_code"] == 400
    assert worker.request("PUT", f"/connectors/{a}/stop") == (204, None)
    assert worker.request("GET", f"/connectors/{a}/status")[1]["tasks"] == []
    assert worker.request("GET", f"/connectors/{a}/offsets") == (200, {"offsets": [
        {"partition": {"kafka_topic": topic, "kafka_partition": p}, "offset": {"kafka_offset": 20}}
        for p in range(PARTITIONS)]})
    assert worker.request("PATCH", f"/connectors/{a}/offsets", rewind) == \
        (200, {"message": "The offsets for this connector have been altered successfully"})
    assert worker.request("GET", f"/connectors/{a}/offsets")[1]["offsets"][0]["offset"] == {"kafka_offset": 5}
    assert worker.request("PUT", f"/connectors/{a}/resume") == (202, None)
    replayed = {i for i in range(60) if i % PARTITIONS == 0 and i // PARTITIONS >= 5}  # partition 0, offsets 5..19
    again = {seq(m) for m in pull_distinct(subs[a], replayed, seq, timeout=300)}
    # The stop may cut short the micro-batch that published 30..59 after Pub/Sub accepted it and
    # before its checkpoint commit; that batch is then published again (at least once). Offsets 5..9
    # of partition 0 (records 15..27) were published long before: only the rewind brings them back.
    assert replayed <= again and again - replayed <= set(range(30, 60)), sorted(again)
    worker.wait_for(lambda: group_total(kafka_bootstrap, a, topic) == 60, f"{a}'s group back at 60")

    # restart; pause B; kill -9 the worker; records produced while it is down; restart it
    assert worker.request("POST", f"/connectors/{a}/restart") == (204, None)
    worker.wait_state(a, "RUNNING")
    assert worker.request("PUT", f"/connectors/{b}/pause") == (202, None)
    worker.kill_9()
    produce(kafka_bootstrap, topic, records(60, 90))
    worker.start()
    worker.wait_state(a, "RUNNING")
    assert worker.state(b) == "PAUSED"
    assert delivered(a, 60, 90) == list(range(60, 90))
    worker.wait_for(lambda: group_total(kafka_bootstrap, a, topic) == 90, f"{a}'s group at 90")
    assert group_total(kafka_bootstrap, b, topic) == 60 and nothing_waiting(subs[b])

    # delete B: gone from the API, A untouched
    assert worker.request("DELETE", f"/connectors/{b}") == (204, None)
    assert worker.request("GET", f"/connectors/{b}") == \
        (404, {"error_code": 404, "message": f"Connector {b} not found"})
    assert worker.request("GET", "/connectors") == (200, [a])
    assert worker.request("GET", f"/connectors/{b}/topics") == (200, {b: {"topics": []}})
    assert worker.stop() == 0

    # the offsets from a shell: readable any time, movable only when the worker has A stopped
    shown = offsets_cli("show", a, "--worker", str(worker.worker_file))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {"offsets": [
        {"partition": {"kafka_topic": topic, "kafka_partition": p}, "offset": {"kafka_offset": 30}}
        for p in range(PARTITIONS)]}
    refused = offsets_cli("reset", a, "--worker", str(worker.worker_file))
    assert (refused.returncode, refused.stderr.strip()) == \
        (2, f"error: connector {a} is STARTED in the worker: stop it first (PUT /connectors/{a}/stop)")
