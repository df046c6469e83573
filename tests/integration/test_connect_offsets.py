"""Offsets of the connectors that are not Kafka sinks, on the local Lite server (no Spark): a
Lite source's position read from its pull checkpoint, moved (cursors committed, checkpoint
replaced, the moved start kept for the next pull), and the refusals that say where the position
of a Cloud Pub/Sub source and of the archive really is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e.test_lite_sink import PROJECT, ZONE, client_env, lite_path
from lite_server import LiteServer
from pubsub_connect.config import loader as cfg
from pubsub_connect.connect import offsets as connect_offsets
from pubsub_connect.io import checkpoints
from unit.test_connect_rest import write_batch


def test_lite_source_offsets_read_and_moved(lite: LiteServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            unique_name: str) -> None:
    for key, value in client_env(lite).items():
        monkeypatch.setenv(key, value)
    topic, subscription = lite_path("topics", unique_name), lite_path("subscriptions", unique_name)
    lite.create_topic(topic, 2)
    lite.create_subscription(subscription, topic)
    worker = cfg.validate_worker({"storage.root": str(tmp_path / "root")})
    config = cfg.validate_connector({
        "name": unique_name, "connector.class": "PubSubLiteSourceConnector", "pubsublite.project": PROJECT,
        "pubsublite.location": ZONE, "pubsublite.endpoint": lite.endpoint, "pubsublite.subscription": unique_name,
        "kafka.topic": "out"}, "<lite>")
    checkpoint = connect_offsets.position_checkpoint(worker, unique_name, "pull")
    write_batch(Path(checkpoint), 0, {"0": 7, "1": 4}, committed=True)

    assert connect_offsets.read_offsets(worker, config) == [
        {"partition": {"subscription": subscription, "partition": 0}, "offset": {"offset": 7}},
        {"partition": {"subscription": subscription, "partition": 1}, "offset": {"offset": 4}}]
    message = connect_offsets.alter_offsets(worker, config, {"offsets": [
        {"partition": {"subscription": subscription, "partition": 0}, "offset": {"offset": 2}}]})
    assert message == "The offsets for this connector have been altered successfully"
    assert (lite.committed_cursor(subscription, 0), lite.committed_cursor(subscription, 1)) == (2, 4)
    assert not checkpoints.exists(checkpoint)
    assert json.loads(checkpoints.lite_start_path(checkpoint).read_text()) == {"0": 2, "1": 4}
    # without a checkpoint the position is the subscription's cursors
    assert [e["offset"]["offset"] for e in connect_offsets.read_offsets(worker, config)] == [2, 4]

    with pytest.raises(connect_offsets.OffsetsError, match="starts from its subscription's cursors"):
        connect_offsets.reset_offsets(worker, config)
    with pytest.raises(connect_offsets.OffsetsError, match="'offset' must be a non-negative integer"):
        connect_offsets.alter_offsets(worker, config, {"offsets": [
            {"partition": {"partition": 0}, "offset": {"offset": -1}}]})


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
