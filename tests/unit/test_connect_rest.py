"""The worker's REST API over real HTTP on loopback (fake stages, no Spark): Connect's paths,
JSON shapes and status codes, basic authentication, the listener rule, config validation; and the
pieces under the offsets endpoints (checkpoint reading, starting offsets)."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pubsub_connect.config import loader as cfg
from pubsub_connect.config.errors import ConfigError
from pubsub_connect.connect.plugins import validate
from pubsub_connect.connect.rest import ConnectRestApi, Listener, RestServer, parse_listener, security_for
from pubsub_connect.io import checkpoints
from pubsub_connect.io.services.process import free_port
from pubsub_connect.pipelines.kafka_position import offsets_json_positions, starting_offsets
from unit.test_connect_herder import Stages, make_herder, sink
from waiting import wait_until


def call(url: str, method: str, path: str, body: Any = None, auth: tuple[str, str] | None = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    request = urllib.request.Request(url + path, data=None if body is None else json.dumps(body).encode(),
                                     method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            payload = response.read()
            return response.status, json.loads(payload) if payload else None
    except urllib.error.HTTPError as exc:
        payload = exc.read()
        return exc.code, json.loads(payload) if payload else None
    except (urllib.error.URLError, ConnectionError):  # nothing listening (yet)
        return 0, None


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[str, Stages]]:
    worker = cfg.validate_worker({"storage.root": str(tmp_path / "root"), "pipeline.trigger.interval.ms": "10"})
    stages = Stages()
    herder = make_herder(worker, stages)
    herder.start()
    server = RestServer(Listener("127.0.0.1", free_port()), ConnectRestApi(herder, lambda: "cluster-1"), None).start()
    try:
        yield server.url, stages
    finally:
        server.close()
        herder.shutdown()


def test_connectors_resource_shapes_and_status_codes(api: tuple[str, Stages]) -> None:
    url, stages = api
    assert call(url, "GET", "/") == (200, {"version": "0.1.0", "commit": "pubsub-connect",
                                           "kafka_cluster_id": "cluster-1"})
    assert call(url, "GET", "/connectors") == (200, [])
    config = {k: v for k, v in sink("a").items() if k != "name"}
    status, created = call(url, "POST", "/connectors", {"name": "a", "config": config, "initial_state": "PAUSED"})
    assert status == 201 and created["name"] == "a" and created["type"] == "sink"
    assert call(url, "GET", "/connectors/a/config") == (200, sink("a"))
    assert call(url, "GET", "/connectors?expand=status&expand=info")[1]["a"]["status"]["connector"]["state"] == \
        "PAUSED"
    assert call(url, "GET", "/connectors/a/tasks/2/status") == \
        (200, {"id": 2, "state": "PAUSED", "worker_id": "127.0.0.1:8083"})
    assert call(url, "GET", "/connectors/a/tasks/3/status") == \
        (404, {"error_code": 404, "message": "Task a-3 not found"})
    assert call(url, "GET", "/connectors/a/topics") == (200, {"a": {"topics": []}})  # nothing read yet
    assert call(url, "PUT", "/connectors/a/resume") == (202, None)
    ingest = stages.wait_started("a", 3)[0]
    ingest.recentProgress.append({"batchId": 4, "numInputRows": 2, "sources": [
        {"description": "KafkaV2[Subscribe[in]]", "startOffset": '{"in":{"0":3}}', "endOffset": '{"in":{"0":5}}'}]})
    wait_until(lambda: call(url, "GET", "/connectors/a/topics") == (200, {"a": {"topics": ["in"]}}), 30,
               "the ingest batch's topic recorded")
    assert call(url, "PUT", "/connectors/a/topics/reset") == (202, None)
    assert call(url, "GET", "/connectors/a/topics") == (200, {"a": {"topics": []}})
    assert call(url, "GET", "/connectors/nobody/topics") == (200, {"nobody": {"topics": []}})  # as Connect answers
    status, restarted = call(url, "POST", "/connectors/a/restart?includeTasks=true&onlyFailed=false")
    assert status == 202 and restarted["name"] == "a"
    assert len(stages.wait_started("a", 6)) == 6
    assert call(url, "PUT", "/connectors/a/config", {**sink("a"), "cps.topic": "t2"})[0] == 200
    assert call(url, "PUT", "/connectors/b/config", sink("b"))[0] == 201
    assert call(url, "PUT", "/connectors/a/stop") == (204, None)
    assert call(url, "GET", "/connectors/a/status")[1]["tasks"] == []
    assert call(url, "DELETE", "/connectors/a") == (204, None)
    assert call(url, "GET", "/connectors/a") == (404, {"error_code": 404, "message": "Connector a not found"})
    assert call(url, "POST", "/connectors", {"config": {"connector.class": "x"}}) == \
        (400, {"error_code": 400, "message": "Connector name configuration (name) is missing"})
    assert call(url, "POST", "/connectors", {"name": "c", "config": {**config, "connector.class": "Nope"}})[0] == 400
    assert call(url, "DELETE", "/connector-plugins") == \
        (405, {"error_code": 405, "message": "HTTP DELETE is not allowed on /connector-plugins"})
    assert call(url, "GET", "/nowhere") == (404, {"error_code": 404, "message": "Unknown endpoint /nowhere"})


def test_plugins_and_validate(api: tuple[str, Stages]) -> None:
    url, _ = api
    status, plugins = call(url, "GET", "/connector-plugins")
    assert status == 200 and [p["class"] for p in plugins] == [
        "com.google.pubsub.kafka.sink.CloudPubSubSinkConnector",
        "com.google.pubsub.kafka.source.CloudPubSubSourceConnector",
        "com.google.pubsublite.kafka.sink.PubSubLiteSinkConnector",
        "com.google.pubsublite.kafka.source.PubSubLiteSourceConnector",
        "com.deviantart.kafka_connect_s3.S3SinkConnector"]
    assert {"class": "org.apache.kafka.connect.json.JsonConverter", "type": "converter", "version": "0.1.0"} in \
        call(url, "GET", "/connector-plugins?connectorsOnly=false")[1]
    status, checked = call(url, "PUT", "/connector-plugins/CloudPubSubSinkConnector/config/validate",
                           {"connector.class": "CloudPubSubSinkConnector", "name": "a", "topics": "in",
                            "cps.project": "p", "cps.topic": "t", "gcp.credentials.json": "{}",
                            "errors.tolerance": "some"})
    assert status == 200 and checked["error_count"] == 1
    values = {c["value"]["name"]: c["value"] for c in checked["configs"]}
    assert values["errors.tolerance"]["errors"] == ["errors.tolerance='some' is not allowed (allowed: none, all)"]
    assert values["errors.tolerance"]["recommended_values"] == ["none", "all"]
    assert values["gcp.credentials.json"]["value"] == "[hidden]"
    definition = next(c["definition"] for c in checked["configs"] if c["definition"]["name"] == "cps.topic")
    assert definition["required"] is True and definition["type"] == "STRING"
    assert call(url, "PUT", "/connector-plugins/CloudPubSubSinkConnector/config/validate",
                {"connector.class": "CloudPubSubSourceConnector"}) == \
        (400, {"error_code": 400, "message": "Included connector type CloudPubSubSourceConnector does not match "
                                             "request type CloudPubSubSinkConnector"})


def test_validate_reports_a_cross_key_rule_on_its_keys() -> None:
    checked = validate("CloudPubSubSinkConnector", {"name": "a", "cps.project": "p", "cps.topic": "t"})
    errors = {c["value"]["name"]: c["value"]["errors"] for c in checked["configs"] if c["value"]["errors"]}
    assert errors == {"topics": ["set exactly one of topics or topics.regex"],
                      "topics.regex": ["set exactly one of topics or topics.regex"]}
    assert checked["error_count"] == 2


def test_basic_authentication_and_the_listener_rule(tmp_path: Path) -> None:
    credentials = tmp_path / "users.properties"
    credentials.write_text("ops=s3cret\n")
    with pytest.raises(ConfigError, match="is reachable from the network: set rest"):
        security_for(parse_listener("http://0.0.0.0:8083"), None)
    assert security_for(parse_listener("http://127.0.0.1:8083"), None) is None
    with pytest.raises(ConfigError, match="expected http://host:port"):
        parse_listener("https://127.0.0.1:8443")
    auth = security_for(parse_listener("http://0.0.0.0:8083"), str(credentials))
    worker = cfg.validate_worker({"storage.root": str(tmp_path / "root")})
    herder = make_herder(worker, Stages())
    server = RestServer(Listener("127.0.0.1", free_port()), ConnectRestApi(herder), auth).start()
    try:
        assert call(server.url, "GET", "/connectors") == \
            (401, {"error_code": 401, "message": "Authentication required"})
        assert call(server.url, "GET", "/connectors", auth=("ops", "wrong"))[0] == 401
        assert call(server.url, "GET", "/connectors", auth=("ops", "s3cret")) == (200, [])
    finally:
        server.close()


def write_batch(root: Path, batch: int, offsets: dict, committed: bool) -> None:
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "commits").mkdir(parents=True, exist_ok=True)
    (root / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(offsets)}')
    if committed:
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_checkpoint_position_is_the_newest_committed_batch(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ingest"
    assert not checkpoints.exists(str(checkpoint)) and checkpoints.committed_source_offsets(str(checkpoint)) is None
    write_batch(checkpoint, 0, {"t": {"0": 5, "1": 3}}, committed=True)
    write_batch(checkpoint, 1, {"t": {"0": 9, "1": 3}}, committed=False)  # planned, cut short
    assert checkpoints.exists(str(checkpoint))
    assert offsets_json_positions(checkpoints.committed_source_offsets(str(checkpoint))) == {("t", 0): 5, ("t", 1): 3}
    assert checkpoints.batch_offsets(str(checkpoint), 1) == {"t": {"0": 9, "1": 3}}
    assert offsets_json_positions({"t": {"0": -2, "1": 4}}) == {("t", 1): 4}
    assert checkpoints.remove(str(checkpoint)) and not checkpoint.exists()


def test_starting_offsets_name_every_subscribed_partition() -> None:
    subscribed = [("t", 0), ("t", 1), ("u", 0)]
    assert starting_offsets({}, subscribed) == "earliest"
    assert starting_offsets({("x", 0): 3}, subscribed, "latest") == "latest"
    assert json.loads(starting_offsets({("t", 1): 7}, subscribed)) == {"t": {"0": -2, "1": 7}, "u": {"0": -2}}
    assert json.loads(starting_offsets({("t", 1): 7}, subscribed, "latest")) == {"t": {"0": -1, "1": 7},
                                                                                 "u": {"0": -1}}
