"""Offsets of the connectors that are not Kafka sinks, on the local Lite server (no Spark): a
Lite source's position read from its pull checkpoint, moved (cursors committed, checkpoint
replaced, the moved start kept for the next pull), and the refusals that say where the position
of a Cloud Pub/Sub source and of the archive really is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e.test_lite_sink import PROJECT, ZONE, lite_path
from lite_server import LiteServer
from lite_server.clientproc import run_python
from pubsub_connect.config import loader as cfg
from pubsub_connect.connect import offsets as connect_offsets
from pubsub_connect.io import checkpoints
from unit.test_connect_rest import write_batch

#: Run in a child process (:mod:`lite_server.clientproc`): the Lite client trusts the test server
#: through ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``, which gRPC reads once per process, so in the pytest
#: process it would depend on which TLS channel an earlier test opened first. ``ARGS`` (prepended
#: by the test) holds the settings and the move; prints each step's result, or the refusal's
#: message, as one JSON object.
OFFSETS_CHILD = """
import json
from pubsub_connect.config import loader as cfg
from pubsub_connect.connect import offsets as connect_offsets

worker_settings, connector_settings, moved = json.loads(ARGS)
worker = cfg.validate_worker(worker_settings)
config = cfg.validate_connector(connector_settings, "<lite>")

def refusal(call):
    try:
        call()
    except connect_offsets.OffsetsError as exc:
        return str(exc)
    return None

print(json.dumps({
    "before": connect_offsets.read_offsets(worker, config),
    "altered": connect_offsets.alter_offsets(worker, config, moved),
    "after": connect_offsets.read_offsets(worker, config),
    "reset": refusal(lambda: connect_offsets.reset_offsets(worker, config)),
    "negative": refusal(lambda: connect_offsets.alter_offsets(worker, config, {"offsets": [
        {"partition": {"partition": 0}, "offset": {"offset": -1}}]})),
}))
"""


def test_lite_source_offsets_read_and_moved(lite: LiteServer, tmp_path: Path, unique_name: str) -> None:
    topic, subscription = lite_path("topics", unique_name), lite_path("subscriptions", unique_name)
    lite.create_topic(topic, 2)
    lite.create_subscription(subscription, topic)
    worker_settings = {"storage.root": str(tmp_path / "root")}
    connector_settings = {
        "name": unique_name, "connector.class": "PubSubLiteSourceConnector", "pubsublite.project": PROJECT,
        "pubsublite.location": ZONE, "pubsublite.endpoint": lite.endpoint, "pubsublite.subscription": unique_name,
        "kafka.topic": "out"}
    checkpoint = connect_offsets.position_checkpoint(cfg.validate_worker(worker_settings), unique_name, "pull")
    write_batch(Path(checkpoint), 0, {"0": 7, "1": 4}, committed=True)
    moved = {"offsets": [{"partition": {"subscription": subscription, "partition": 0}, "offset": {"offset": 2}}]}

    args = json.dumps([worker_settings, connector_settings, moved])
    steps = run_python(f"ARGS = {args!r}\n{OFFSETS_CHILD}", cert_path=lite.cert_path, endpoint=lite.endpoint)

    assert steps["before"] == [
        {"partition": {"subscription": subscription, "partition": 0}, "offset": {"offset": 7}},
        {"partition": {"subscription": subscription, "partition": 1}, "offset": {"offset": 4}}]
    assert steps["altered"] == "The offsets for this connector have been altered successfully"
    assert (lite.committed_cursor(subscription, 0), lite.committed_cursor(subscription, 1)) == (2, 4)
    assert not checkpoints.exists(checkpoint)
    assert json.loads(checkpoints.lite_start_path(checkpoint).read_text()) == {"0": 2, "1": 4}
    # without a checkpoint the position is the subscription's cursors
    assert [e["offset"]["offset"] for e in steps["after"]] == [2, 4]
    assert steps["reset"] is not None and "starts from its subscription's cursors" in steps["reset"]
    assert steps["negative"] is not None and "'offset' must be a non-negative integer" in steps["negative"]


def test_sources_without_movable_offsets_say_where_the_position_is(tmp_path: Path) -> None:
    worker = cfg.validate_worker({"storage.root": str(tmp_path / "root")})
    cps_source = cfg.validate_connector({
        "name": "src", "connector.class": "CloudPubSubSourceConnector", "cps.project": "p",
        "cps.subscription": "s", "kafka.topic": "t"}, "<src>")
    assert connect_offsets.read_offsets(worker, cps_source) == []
    with pytest.raises(connect_offsets.OffsetsError) as refused:
        connect_offsets.alter_offsets(worker, cps_source, {"offsets": []})
    assert str(refused.value) == ("src: a Cloud Pub/Sub source has no offsets of its own: its position is the "
                                  "subscription's acknowledgements, kept by Pub/Sub (move it with 'gcloud pubsub "
                                  "subscriptions seek')")
    archive = cfg.validate_connector({"name": "arch", "connector.class": "archive", "topics": "t",
                                      "output.path": str(tmp_path / "out"),
                                      "local.buffer.dir": str(tmp_path / "buffer")}, "<arch>")
    with pytest.raises(connect_offsets.OffsetsError, match="the archive's position is its files"):
        connect_offsets.reset_offsets(worker, archive)
