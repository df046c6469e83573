"""Pub/Sub wiring (``pubsub_connect.io.pubsub``; the connector keys mapped by
``pipelines/pubsub_settings.py``): settings mapping without services, then publish, pull, ack
and lease semantics against Google's real emulator.

Messages published by the product are read back with plain clients (``pubsub_helpers``), and
the other way round, so the product is never checked only against itself.
"""

from __future__ import annotations

import inspect
import json
import pickle
import time
from collections import defaultdict
from types import SimpleNamespace

import pyarrow as pa
import pytest
from google.api_core import exceptions as gexc
from google.cloud.pubsub_v1 import types
from pubsub_helpers import (
    PROJECT,
    assert_no_more_messages,
    by_attribute,
    create_subscription,
    create_topic,
    create_topic_and_subscription,
    delete_topic,
    publish,
    pull_all,
    subscriber,
)

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import LONG_MAX
from pubsub_connect.config.loader import validate_connector
from pubsub_connect.io.pubsub.admin import ensure_subscription, ensure_topic
from pubsub_connect.io.pubsub.credentials import Connection
from pubsub_connect.io.pubsub.errors import PubSubIOError
from pubsub_connect.io.pubsub.leases import AckResult, LeaseExtender, ack, modify_ack_deadline, nack
from pubsub_connect.io.pubsub.publisher import (
    BatchPublisher,
    PublisherConfig,
    PublishError,
    _AttemptTimeout,
    publisher_client,
    publisher_settings,
)
from pubsub_connect.io.pubsub.subscriber import (
    PulledMessage,
    StreamingPuller,
    SubscriberConfig,
    pull_batch,
    subscriber_client,
)
from pubsub_connect.pipelines.pubsub_settings import cps_connection, cps_publisher_config, cps_subscriber_config
from waiting import wait_until

SECRET_MARKER = "TOP-SECRET-do-not-print-0123456789"


def sink_config(**overrides: str):
    raw = {"name": "s", "connector.class": "CloudPubSubSinkConnector", "topics": "k",
           "cps.topic": "t", "cps.project": PROJECT, **overrides}
    return validate_connector(raw, "sink.properties")


def source_config(**overrides: str):
    raw = {"name": "src", "connector.class": "CloudPubSubSourceConnector", "kafka.topic": "k",
           "cps.subscription": "s", "cps.project": PROJECT, **overrides}
    return validate_connector(raw, "source.properties")


def service_account_json(email: str) -> str:
    """A syntactically complete service-account key (fresh RSA key; never used on the network)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return json.dumps({
        "type": "service_account", "project_id": PROJECT, "private_key_id": SECRET_MARKER,
        "private_key": pem, "client_email": email, "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token",
    })


@pytest.fixture
def no_emulator_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)


# --------------------------------------------------------------------------------------------
# Settings mapping (no services)
# --------------------------------------------------------------------------------------------


def test_publisher_settings_defaults_match_google_connector(no_emulator_env: None) -> None:
    batch, options = publisher_settings(cps_publisher_config(sink_config()))
    assert batch == types.BatchSettings(max_bytes=9_500_000, max_latency=0.1, max_messages=100)
    assert options.enable_message_ordering is False
    assert options.enable_open_telemetry_tracing is False
    # Long.MAX_VALUE for both limits = no flow control at all (no per-message accounting).
    assert options.flow_control == types.PublishFlowControl(
        message_limit=LONG_MAX, byte_limit=LONG_MAX,
        limit_exceeded_behavior=types.LimitExceededBehavior.IGNORE)
    assert options.retry._timeout == 60.0
    assert (options.timeout.attempt_s, options.timeout.total_s) == (10.0, 60.0)
    config = cps_publisher_config(sink_config())
    assert (config.enable_compression, config.compression_bytes_threshold, config.shutdown_timeout_ms) == \
        (False, 240, 60_000)
    assert config.topic_path == f"projects/{PROJECT}/topics/t"


def test_publisher_settings_custom_values(no_emulator_env: None) -> None:
    config = sink_config(**{
        "maxBufferSize": "500", "maxBufferBytes": "1000000", "maxDelayThresholdMs": "250",
        "maxOutstandingMessages": "50", "maxRequestTimeoutMs": "2000", "maxTotalTimeoutMs": "5000",
        "orderingKeySource": "partition", "enableCompression": "true", "compressionBytesThreshold": "1000",
        "maxShutdownTimeoutMs": "1500",
    })
    batch, options = publisher_settings(cps_publisher_config(config))
    assert batch == types.BatchSettings(max_bytes=1_000_000, max_latency=0.25, max_messages=500)
    assert options.enable_message_ordering is True
    # One finite limit: blocking flow control, the other limit stays effectively unlimited.
    assert options.flow_control == types.PublishFlowControl(
        message_limit=50, byte_limit=LONG_MAX, limit_exceeded_behavior=types.LimitExceededBehavior.BLOCK)
    assert options.retry._timeout == 5.0
    assert (options.timeout.attempt_s, options.timeout.total_s) == (2.0, 5.0)
    pub = cps_publisher_config(config)
    assert (pub.enable_compression, pub.compression_bytes_threshold, pub.shutdown_timeout_ms) == \
        (True, 1000, 1500)
    _, only_bytes = publisher_settings(cps_publisher_config(sink_config(maxOutstandingRequestBytes="4096")))
    assert only_bytes.flow_control == types.PublishFlowControl(
        message_limit=LONG_MAX, byte_limit=4096, limit_exceeded_behavior=types.LimitExceededBehavior.BLOCK)


def test_attempt_timeout_is_capped_by_total_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    # A fake monotonic clock in the module that measures the budget: the test states how much
    # time passed instead of sleeping and bounding a measurement.
    now = [100.0]
    module = inspect.getmodule(_AttemptTimeout)
    monkeypatch.setattr(module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    seen: list[float] = []
    wrapped = _AttemptTimeout(attempt_s=2.0, total_s=2.3)(lambda timeout: seen.append(timeout))
    wrapped()
    now[0] += 0.5
    wrapped()
    now[0] += 1.7  # 0.1 s of the budget left: the floor of 0.5 s per attempt applies
    wrapped()
    assert seen[0] == 2.0
    assert seen[1] == pytest.approx(1.8)
    assert seen[2] == 0.5


def test_subscriber_config_mapping(no_emulator_env: None) -> None:
    config = cps_subscriber_config(source_config(**{
        "cps.maxBatchSize": "250", "cps.streamingPull.enabled": "true",
        "cps.streamingPull.flowControlMessages": "1001", "cps.streamingPull.flowControlBytes": "3000",
        "cps.streamingPull.parallelStreams": "2", "cps.streamingPull.maxAckExtensionMs": "120000",
        "cps.streamingPull.maxMsPerAckExtension": "30500",
    }))
    assert (config.subscription_path, config.max_batch_size, config.streaming) == \
        (f"projects/{PROJECT}/subscriptions/s", 250, True)
    # Per-task limits split across the two streams (rounded up); ack extension in seconds.
    flow = config.stream_flow_control()
    assert flow == types.FlowControl(
        max_bytes=1500, max_messages=501, max_lease_duration=120.0, max_duration_per_lease_extension=30)
    assert type(flow.max_duration_per_lease_extension) is int  # a float breaks every stream open
    defaults = cps_subscriber_config(source_config())
    # 0 = library defaults (1 h lease, no per-extension cap), as in Google's connector.
    assert defaults.stream_flow_control() == types.FlowControl(max_bytes=100 * 1024 * 1024, max_messages=1000)
    assert defaults.streaming is False
    # The service honours the stream's flow control: the client is given the connector's limits.
    assert config.client_flow_control() == flow
    assert defaults.client_flow_control() == defaults.stream_flow_control()


def test_client_flow_control_on_the_emulator(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulator ignores a stream's flow control, so the client reads all it is sent (and leases
    it at once) with extensions of at least 60 s, or of the connector's cap when that is shorter;
    the connector's own limits stay where batches are handed out."""
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:8085")
    unlimited = 2**62
    config = cps_subscriber_config(source_config(**{
        "cps.useEmulator": "true", "cps.streamingPull.flowControlMessages": "1001",
        "cps.streamingPull.parallelStreams": "2", "cps.streamingPull.maxAckExtensionMs": "120000",
        "cps.streamingPull.maxMsPerAckExtension": "30500"}))
    assert config.stream_flow_control().max_messages == 501
    assert config.client_flow_control() == types.FlowControl(
        max_bytes=unlimited, max_messages=unlimited, max_lease_duration=120.0,
        min_duration_per_lease_extension=30, max_duration_per_lease_extension=30)
    defaults = cps_subscriber_config(source_config(**{"cps.useEmulator": "true"}))
    assert defaults.client_flow_control() == types.FlowControl(
        max_bytes=unlimited, max_messages=unlimited, min_duration_per_lease_extension=60)


def test_emulator_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    with pytest.raises(ConfigError) as err:
        cps_connection(sink_config(**{"cps.useEmulator": "true"}))
    assert str(err.value) == ("sink.properties: cps.useEmulator=true but PUBSUB_EMULATOR_HOST is not set "
                              "(start the emulator, e.g. `pubsub-connect services up`, and export "
                              "PUBSUB_EMULATOR_HOST=host:port)")
    assert cps_connection(sink_config()).uses_emulator is False
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:8681")
    for overrides in ({}, {"cps.useEmulator": "true"}):
        conn = cps_connection(sink_config(**overrides))
        assert (conn.emulator_host, conn.credentials()) == ("127.0.0.1:8681", None)


def test_credentials_precedence_and_endpoint(no_emulator_env: None, tmp_path, monkeypatch) -> None:
    file_path = tmp_path / "key.json"
    file_path.write_text(service_account_json("from-file@p.iam.gserviceaccount.com"))
    blob = service_account_json("from-json@p.iam.gserviceaccount.com")
    both = sink_config(**{"gcp.credentials.json": blob, "gcp.credentials.file.path": str(file_path),
                          "cps.endpoint": "europe-west1-pubsub.googleapis.com:443"})
    conn = cps_connection(both)
    assert conn.credentials().service_account_email == "from-json@p.iam.gserviceaccount.com"
    file_only = cps_connection(sink_config(**{"gcp.credentials.file.path": str(file_path)}))
    assert file_only.credentials().service_account_email == "from-file@p.iam.gserviceaccount.com"
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(file_path))
    adc = cps_connection(sink_config())
    assert adc.credentials().service_account_email == "from-file@p.iam.gserviceaccount.com"
    # A non-default endpoint goes to client_options; building the client does not connect.
    client = publisher_client(cps_publisher_config(both))
    assert client._transport._host == "europe-west1-pubsub.googleapis.com:443"
    assert client._transport._credentials.service_account_email == "from-json@p.iam.gserviceaccount.com"
    client.transport.close()
    assert "client_options" not in file_only.client_kwargs(object)


def test_credential_errors_are_one_line_without_secrets(no_emulator_env: None, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(ConfigError) as err:
        cps_connection(sink_config()).credentials()
    message = str(err.value)
    assert message.startswith("no Google Cloud credentials found for project 'test-project' (File ")
    assert "\n" not in message and "gcp.credentials.file.path" in message
    with pytest.raises(ConfigError) as err:
        cps_connection(sink_config(**{"gcp.credentials.json": "{" + SECRET_MARKER}))
    assert str(err.value) == ("sink.properties: gcp.credentials.json is not valid JSON (expected "
                              "the content of a Google credentials file)")
    bogus = json.dumps({"type": "no-such-type", "private_key": SECRET_MARKER})
    with pytest.raises(ConfigError) as err:
        cps_connection(sink_config(**{"gcp.credentials.json": bogus})).credentials()
    assert str(err.value).startswith("gcp.credentials.json does not hold usable Google credentials (")
    assert SECRET_MARKER not in str(err.value) and "\n" not in str(err.value)


def test_secrets_never_in_repr_or_str(no_emulator_env: None) -> None:
    blob = json.dumps({"type": "service_account", "private_key": SECRET_MARKER})
    sink = cps_publisher_config(sink_config(**{"gcp.credentials.json": blob}))
    source = cps_subscriber_config(source_config(**{"gcp.credentials.json": blob}))
    for obj in (sink, source, sink.connection, BatchPublisher(sink)):
        assert SECRET_MARKER not in repr(obj) and SECRET_MARKER not in str(obj)
    assert "credentials_json='********'" in repr(sink.connection)
    # The secret still travels to the worker: pickling keeps it.
    assert pickle.loads(pickle.dumps(sink)) == sink
    assert pickle.loads(pickle.dumps(source)).connection.credentials_json == blob


# --------------------------------------------------------------------------------------------
# Publish against the emulator
# --------------------------------------------------------------------------------------------


def emulator_publisher_config(topic: str, **kwargs) -> PublisherConfig:
    return PublisherConfig(connection=Connection.for_emulator(PROJECT), topic=topic, **kwargs)


def test_publish_1000_messages_with_attributes(pubsub_emulator_host: str, unique_name: str) -> None:
    topic, sub = create_topic_and_subscription(unique_name)
    sent = [(f"payload-{i}".encode() * (i % 7 + 1), {"seq": str(i), "kind": ("odd", "even")[i % 2 == 0]}, None)
            for i in range(1000)]
    sent.append((b"no attributes", None, None))
    sent.append((b"", {"seq": "empty-data"}, ""))
    with BatchPublisher(emulator_publisher_config(unique_name)) as publisher:
        stats = publisher.publish_all(iter(sent))
    assert (stats.messages, stats.data_bytes) == (1002, sum(len(d) for d, _, _ in sent))
    got = pull_all(sub, 1002)
    assert len(got) == 1002
    assert sorted((m.data, sorted(m.attributes.items()), m.ordering_key) for m in got) == \
        sorted((d, sorted((a or {}).items()), "") for d, a, _ in sent)
    assert_no_more_messages(sub, wait=1.0)
    assert topic.endswith(unique_name)


def outbox_batch(rows: list[tuple[bytes, dict[str, str] | None]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "data": pa.array([d for d, _ in rows], pa.binary()),
        "attributes": pa.array([list(a.items()) if a is not None else None for _, a in rows],
                               pa.map_(pa.string(), pa.string())),
        "ordering_key": pa.array([""] * len(rows), pa.string()),
    })


def test_publish_batches_sends_the_columns_as_they_are(pubsub_emulator_host: str, unique_name: str) -> None:
    """Requests encoded from Arrow columns: what the emulator delivers is exactly the rows, over
    several Arrow batches and requests, compressed above the threshold, with a 2 MB message, an
    empty payload, empty attribute values, reserved-looking and non-ASCII attribute names."""
    _, sub = create_topic_and_subscription(unique_name)
    rows = [(bytes([i % 251]) * (i * 37 % 3000), {"seq": str(i), "ü": "ß" * (i % 3), "timeout": "t"})
            for i in range(1500)]
    rows += [(b"\x00" * (2 << 20), {"seq": "big"}), (b"no attributes", None), (b"", {"seq": "empty-data"})]
    config = emulator_publisher_config(unique_name, enable_compression=True, compression_bytes_threshold=100_000)
    with BatchPublisher(config) as publisher:
        stats = publisher.publish_batches(iter([outbox_batch(rows[:700]), outbox_batch(rows[700:])]))
        assert publisher.client.compressed_requests >= 1
    assert (stats.messages, stats.data_bytes) == (len(rows), sum(len(d) for d, _ in rows))
    got = pull_all(sub, len(rows))
    assert sorted((m.data, sorted(m.attributes.items()), m.ordering_key) for m in got) == \
        sorted((d, sorted((a or {}).items()), "") for d, a in rows)
    assert_no_more_messages(sub, wait=1.0)


def test_publish_batches_to_a_missing_topic_fails_the_batch(pubsub_emulator_host: str, unique_name: str) -> None:
    config = emulator_publisher_config(f"{unique_name}-missing")
    with BatchPublisher(config) as publisher, pytest.raises(PublishError) as err:
        publisher.publish_batches(iter([outbox_batch([(b"a", None), (b"b", {"k": "v"})])]))
    assert (err.value.failed, err.value.total) == (2, 2)
    assert str(err.value).startswith(f"publish to {config.topic_path} failed: 2 of 2 message(s) not published; "
                                     "first error: NotFound: 404 "), str(err.value)


def test_attribute_names_that_clash_with_publish_parameters(pubsub_emulator_host: str,
                                                            unique_name: str) -> None:
    _, sub = create_topic_and_subscription(unique_name)
    attributes = {"topic": "T", "data": "D", "ordering_key": "O", "retry": "R", "timeout": "30", "self": "S",
                  "plain": "P"}
    # Blocking flow control on: renaming must not disturb its byte accounting.
    config = emulator_publisher_config(unique_name, max_latency_ms=5, flow_control_bytes=50_000)
    with BatchPublisher(config) as publisher:
        publisher.publish_all([(b"x", attributes, None), (b"y", {"plain": "only"}, None)]
                              + [(b"z%d" % i, {"data": str(i)}, None) for i in range(100)])
        flow = publisher.client._flow_controller
        # The release callbacks run just after the futures resolve.
        wait_until(lambda: (flow._message_count, flow._total_bytes) == (0, 0), 5,
                   lambda: f"flow control released to (0, 0), at {(flow._message_count, flow._total_bytes)}")
    got = sorted(pull_all(sub, 102), key=lambda m: m.data)
    assert [(m.data, m.attributes, m.ordering_key) for m in got[:2]] == \
        [(b"x", attributes, ""), (b"y", {"plain": "only"}, "")]
    assert sorted((m.data, m.attributes["data"]) for m in got[2:]) == sorted((b"z%d" % i, str(i)) for i in range(100))


def test_compression_threshold(pubsub_emulator_host: str, unique_name: str) -> None:
    _, sub = create_topic_and_subscription(unique_name)
    big = [(bytes([65 + i % 26]) * 2000, {"seq": str(i)}, None) for i in range(20)]
    compressed = emulator_publisher_config(unique_name, enable_compression=True,
                                           compression_bytes_threshold=1000, max_latency_ms=5)
    with BatchPublisher(compressed) as publisher:
        publisher.publish_all(big)
        assert publisher.client.compressed_requests >= 1
        before = publisher.client.compressed_requests
        publisher.publish_all([(b"tiny", {"seq": "tiny"}, None)])  # below the threshold: sent as is
        assert publisher.client.compressed_requests == before
    got = by_attribute(pull_all(sub, 21), "seq")
    expected = {**{str(i): d for i, (d, _, _) in enumerate(big)}, "tiny": b"tiny"}
    assert {k: m.data for k, m in got.items()} == expected


def test_ordering_keys_preserved_per_key(pubsub_emulator_host: str, unique_name: str) -> None:
    _, sub = create_topic_and_subscription(unique_name, ordering=True)
    keys = ["alpha", "beta", "gamma"]
    sent = [(f"{key}:{i}".encode(), {"seq": str(i)}, key) for i in range(200) for key in keys]
    sent += [(b"unordered", None, None)]
    config = emulator_publisher_config(unique_name, enable_message_ordering=True, max_messages=17,
                                       max_latency_ms=5)
    with BatchPublisher(config) as publisher:
        assert publisher.publish_all(sent).messages == 601
    per_key: dict[str, list[int]] = defaultdict(list)
    for message in pull_all(sub, 601):
        if message.ordering_key:
            per_key[message.ordering_key].append(int(message.attributes["seq"]))
        else:
            assert message.data == b"unordered"
    assert dict(per_key) == {key: list(range(200)) for key in keys}


def test_failed_publish_raises_and_ordering_key_is_resumed(pubsub_emulator_host: str,
                                                           unique_name: str) -> None:
    create_topic(unique_name)
    config = emulator_publisher_config(unique_name, enable_message_ordering=True, max_latency_ms=5,
                                       total_timeout_ms=5000)
    publisher = BatchPublisher(config)
    publisher.publish_all([(b"first", None, "k")])
    delete_topic(unique_name)
    with pytest.raises(PublishError) as err:
        publisher.publish_all([(b"lost-%d" % i, None, "k") for i in range(3)] + [(b"other", None, "k2")])
    assert (err.value.failed, err.value.total, err.value.resumed_keys) == (4, 4, ("k", "k2"))
    assert isinstance(err.value.first_error, gexc.NotFound)
    message = str(err.value)
    assert message.startswith(f"publish to {config.topic_path} failed: 4 of 4 message(s) not published; "
                              "resumed 2 ordering key(s); first error: NotFound: 404 ")
    assert "\n" not in message
    # Same publisher, same key: works again once the topic exists (the key was resumed).
    _, sub = create_topic_and_subscription(unique_name, ordering=True)
    publisher.publish_all([(b"again-%d" % i, None, "k") for i in range(3)])
    assert [m.data for m in pull_all(sub, 3)] == [b"again-0", b"again-1", b"again-2"]
    publisher.close()


def test_publish_to_missing_topic_and_rejected_message(pubsub_emulator_host: str, unique_name: str) -> None:
    config = emulator_publisher_config(f"{unique_name}-missing", max_latency_ms=5)
    with BatchPublisher(config) as publisher:
        with pytest.raises(PublishError) as err:
            publisher.publish_all([(b"a", None, None), (b"b", None, None)])
        assert (err.value.failed, err.value.total, err.value.resumed_keys) == (2, 2, ())
        with pytest.raises(PublishError) as err:  # refused by the client before any RPC
            publisher.publish_all([("not bytes", None, None)])  # type: ignore[list-item]
        assert str(err.value).startswith(
            f"publish to {config.topic_path} failed: stopped at a message the client rejected; "
            "1 of 1 message(s) not published; first error: TypeError: ")


@pytest.mark.parametrize("ordering", [False, True], ids=["unordered", "ordered"])
def test_flow_control_limits_do_not_deadlock(pubsub_emulator_host: str, unique_name: str,
                                             ordering: bool) -> None:
    _, sub = create_topic_and_subscription(unique_name, ordering=ordering)
    # Flow-control limits far below the batch size: every batch is cut short by blocking and
    # only the latency timer sends it. That must be slow, never stuck.
    config = emulator_publisher_config(unique_name, max_messages=100, max_latency_ms=5,
                                       flow_control_messages=7, flow_control_bytes=3000,
                                       enable_message_ordering=ordering)
    sent = [(bytes([i % 251]) * 200, {"seq": str(i)}, f"k{i % 3}" if ordering else None) for i in range(600)]
    # A deadlock never returns (the test's timeout ends it); what is asserted is that the call
    # returned having published every message, each exactly once below.
    with BatchPublisher(config) as publisher:
        assert publisher.publish_all(sent).messages == 600
    got = by_attribute(pull_all(sub, 600), "seq")
    assert {k: m.data for k, m in got.items()} == {str(i): d for i, (d, _, _) in enumerate(sent)}


def test_batch_publisher_is_picklable_and_builds_client_lazily(pubsub_emulator_host: str,
                                                               unique_name: str) -> None:
    _, sub = create_topic_and_subscription(unique_name)
    publisher = BatchPublisher(emulator_publisher_config(unique_name, max_latency_ms=5))
    publisher.publish_all([(b"driver", None, None)])
    clone = pickle.loads(pickle.dumps(publisher))  # e.g. captured in a Spark closure
    assert repr(clone) == f"BatchPublisher(topic='projects/{PROJECT}/topics/{unique_name}', client=lazy)"
    clone.publish_all([(b"worker", None, None)])
    publisher.close()
    clone.close()
    with pytest.raises(PubSubIOError, match="closed"):
        clone.publish_all([(b"late", None, None)])
    assert sorted(m.data for m in pull_all(sub, 2)) == [b"driver", b"worker"]


def test_worker_without_emulator_env_uses_captured_host(pubsub_emulator_host: str, unique_name: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A Spark worker may not see PUBSUB_EMULATOR_HOST: the host captured on the driver is used."""
    _, sub = create_topic_and_subscription(unique_name)
    driver_side = pickle.dumps((cps_publisher_config(sink_config(**{"cps.topic": unique_name})),
                                source_subscriber_config(sub, streaming=True)))
    with monkeypatch.context() as worker_env:
        worker_env.delenv("PUBSUB_EMULATOR_HOST")
        config, sub_config = pickle.loads(driver_side)
        assert config.connection.emulator_host == pubsub_emulator_host
        with BatchPublisher(config) as publisher:
            publisher.publish_all([(b"from a worker", {"a": "1"}, None)])
        with StreamingPuller(sub_config) as puller:
            got = puller.collect(max_messages=1, timeout=20)
            puller.ack(got)
    assert [(m.data, m.attributes) for m in got] == [(b"from a worker", {"a": "1"})]


# --------------------------------------------------------------------------------------------
# Subscriber side against the emulator
# --------------------------------------------------------------------------------------------


def source_subscriber_config(subscription: str, **kwargs) -> SubscriberConfig:
    return SubscriberConfig(connection=Connection.for_emulator(PROJECT), subscription=subscription,
                               **kwargs)


def test_sync_pull_ack_and_nack(pubsub_emulator_host: str, unique_name: str) -> None:
    # Not an ordered subscription: there the emulator withholds a key's next messages until the
    # previous ones are acked, and this test holds everything unacked on purpose.
    topic, sub = create_topic_and_subscription(unique_name)
    ids = publish(topic, [(b"m%d" % i, {"seq": str(i)}, "key" if i < 5 else None) for i in range(25)])
    config = source_subscriber_config(sub)
    client = subscriber_client(config)
    first = pull_batch(client, config.subscription_path, max_messages=10, timeout=5)
    assert 1 <= len(first) <= 10
    pulled = list(first)
    while len(pulled) < 25:
        pulled += pull_batch(client, config.subscription_path, max_messages=10, timeout=5)
    assert len(pulled) == 25
    assert sorted(m.message_id for m in pulled) == sorted(ids)
    by_seq = {m.attributes["seq"]: m for m in pulled}
    assert {s: (m.data, m.ordering_key) for s, m in by_seq.items()} == \
        {str(i): (b"m%d" % i, "key" if i < 5 else "") for i in range(25)}
    assert all(m.publish_time.tzinfo is not None and m.delivery_attempt is None for m in pulled)
    # nack one: redelivered at once, same message ID
    nacked = by_seq["7"]
    keep = [m.ack_id for m in pulled if m is not nacked]
    assert nack(client, config.subscription_path, [nacked.ack_id]) == AckResult(requested=1)
    again = pull_batch(client, config.subscription_path, max_messages=10, timeout=5)
    assert [(m.message_id, m.data) for m in again] == [(nacked.message_id, b"m7")]
    # ack in chunks of 4 requests (7 RPCs for 25 IDs); duplicates collapse.
    result = ack(client, config.subscription_path, [*keep, again[0].ack_id, *keep[:3]], chunk_size=4)
    assert (result.requested, result.invalid, result.succeeded) == (25, (), 25)
    with pytest.raises(ValueError, match="chunk_size"):
        ack(client, config.subscription_path, keep, chunk_size=2501)
    assert pull_batch(client, config.subscription_path, max_messages=10, timeout=1) == []
    missing = Connection.for_emulator(PROJECT).subscription_path(f"{unique_name}-nope")
    with pytest.raises(PubSubIOError, match=rf"^pull from {missing} failed: NotFound: 404 "):
        pull_batch(client, missing, 10, timeout=5)
    client.close()


def test_exactly_once_invalid_ack_ids_are_reported(pubsub_emulator_host: str, unique_name: str) -> None:
    topic, sub = create_topic_and_subscription(unique_name, exactly_once=True, ack_deadline_seconds=60)
    publish(topic, [b"a", b"b", b"c"])
    client = subscriber()
    pulled = []
    while len(pulled) < 3:
        pulled += pull_batch(client, sub, 10, timeout=5)
    a, b, c = (m.ack_id for m in sorted(pulled, key=lambda m: m.data))
    assert ack(client, sub, [a]) == AckResult(requested=1)
    # a is stale now: reported as invalid, while b in the same request is acked.
    assert ack(client, sub, [a, b]) == AckResult(requested=2, invalid=(a,))
    assert ack(client, sub, [b]) == AckResult(requested=1, invalid=(b,))
    extended = modify_ack_deadline(client, sub, [a, c], 30)
    assert (extended.invalid, extended.succeeded) == ((a,), 1)
    assert ack(client, sub, [c]) == AckResult(requested=1)


def test_sync_pull_leases_extended_until_ack(pubsub_emulator_host: str, unique_name: str) -> None:
    topic, sub = create_topic_and_subscription(unique_name, ack_deadline_seconds=10)
    publish(topic, [b"m%d" % i for i in range(6)])
    client = subscriber()
    pulled: list[PulledMessage] = []
    while len(pulled) < 6:
        pulled += pull_batch(client, sub, 10, timeout=5)
    pulled.sort(key=lambda m: m.data)
    held, acked = pulled[0:2], pulled[2:4]  # pulled[4:6] are abandoned
    with LeaseExtender(client, sub, [m.ack_id for m in held], deadline_s=30) as extender:
        assert ack(client, sub, [m.ack_id for m in acked], chunk_size=1) == AckResult(requested=2)
        # Only the abandoned messages come back: held ones are extended, acked ones are gone.
        # Their coming back is the event that shows the 10 s deadline has passed (held ones
        # shared it), so the test waits for them instead of sleeping past it.
        again = pull_all(sub, 2, timeout=30)
        assert sorted(m.data for m in again) == [b"m4", b"m5"]
        assert_no_more_messages(sub, wait=2.0)
        assert extender.lost == [] and extender.extensions >= 1
    assert ack(client, sub, [m.ack_id for m in held]) == AckResult(requested=2)


def test_streaming_pull_returns_unacked_and_extends_leases(pubsub_emulator_host: str,
                                                           unique_name: str) -> None:
    topic, sub = create_topic_and_subscription(unique_name, ack_deadline_seconds=10)
    # A second subscription with the same deadline is the witness that the deadline has passed.
    witness = create_subscription(topic, f"{unique_name}-witness", ack_deadline_seconds=10)
    ids = publish(topic, [(b"s%d" % i, {"seq": str(i)}, None) for i in range(6)])
    # Leases extended 10 s at a time, for at most 15 s in total.
    config = source_subscriber_config(sub, streaming=True, max_ms_per_ack_extension=10_000,
                                      max_ack_extension_ms=15_000)
    with StreamingPuller(config) as puller:
        batch = puller.collect(max_messages=6, timeout=20)
        assert sorted(m.message_id for m in batch) == sorted(ids)
        assert {m.attributes["seq"]: m.data for m in batch} == {str(i): b"s%d" % i for i in range(6)}
        assert puller.held == 6
        # Leased on the witness after the puller got them, unacked: their redelivery there shows
        # the puller's original deadline has passed; the client extended its leases, so none
        # of them is delivered again on the puller's subscription.
        pull_all(witness, 6, ack=False)
        assert sorted(m.message_id for m in pull_all(witness, 6, timeout=30)) == sorted(ids)
        assert_no_more_messages(sub, wait=1.0)
        batch.sort(key=lambda m: m.data)
        assert puller.ack(batch[:3]) == AckResult(requested=3)
        assert puller.held == 3
        # The other three are neither acked nor nacked. After the 15 s lease limit they expire
        # and are delivered again (same message IDs, new ack IDs). The acked three are not.
        again = puller.collect(max_messages=6, timeout=50, idle_timeout=5)
        assert sorted((m.data, m.message_id) for m in again) == \
            sorted((m.data, m.message_id) for m in batch[3:])
        assert not {m.ack_id for m in again} & {m.ack_id for m in batch}
        assert puller.ack(again) == AckResult(requested=3)
    assert_no_more_messages(sub, wait=1.0)


def test_streaming_pull_flow_control_bounds_a_batch(pubsub_emulator_host: str, unique_name: str) -> None:
    topic, sub = create_topic_and_subscription(unique_name)
    publish(topic, [(b"f%d" % i, {"seq": str(i)}, None) for i in range(20)])
    config = source_subscriber_config(sub, streaming=True, flow_control_messages=5)
    seen: dict[str, bytes] = {}
    with StreamingPuller(config) as puller:
        first = puller.collect(max_messages=20, timeout=10, idle_timeout=1.0)
        assert len(first) == 5  # flow control: at most 5 unacked messages handed out
        puller.ack(first)
        seen.update((m.attributes["seq"], m.data) for m in first)
        deadline = time.monotonic() + 20
        while len(seen) < 20 and time.monotonic() < deadline:
            batch = puller.collect(max_messages=20, timeout=5, idle_timeout=0.5)
            assert len(batch) <= 5
            puller.ack(batch)
            seen.update((m.attributes["seq"], m.data) for m in batch)
    assert seen == {str(i): b"f%d" % i for i in range(20)}


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("limits", "expected"), [
    ({"flow_control_messages": 4}, 4),
    # ~1 KB per message: the client admits messages while below 2,500 bytes, so a third overshoots
    ({"flow_control_bytes": 2_500}, 3),
])
def test_streaming_pull_batch_that_fills_flow_control_is_handed_out_at_once(
    pubsub_emulator_host: str, unique_name: str, limits: dict[str, int], expected: int,
) -> None:
    """No window and no idle timeout here: a collect that waited for more than the client may
    deliver would block until the test's timeout."""
    topic, sub = create_topic_and_subscription(unique_name)
    publish(topic, [(b"%04d" % i * 250, {"seq": str(i)}, None) for i in range(10)])
    config = source_subscriber_config(sub, streaming=True, **limits)
    with StreamingPuller(config) as puller:
        first = puller.collect(max_messages=10, timeout=3600)
        assert len(first) == expected and puller.held == expected
        assert puller.collect(max_messages=10, timeout=3600) == []  # nothing more until they are acked
        puller.ack(first)
        second = puller.collect(max_messages=10, timeout=3600)
        assert len(second) == expected
        puller.ack(second)
        assert not {m.message_id for m in first} & {m.message_id for m in second}


def test_streaming_pull_parallel_streams_and_missing_subscription(pubsub_emulator_host: str,
                                                                  unique_name: str) -> None:
    topic, sub = create_topic_and_subscription(unique_name)
    publish(topic, [b"p%d" % i for i in range(40)])
    config = source_subscriber_config(sub, streaming=True, parallel_streams=2, flow_control_messages=10)
    got: list[bytes] = []
    with StreamingPuller(config) as puller:
        deadline = time.monotonic() + 20
        while len(got) < 40 and time.monotonic() < deadline:
            batch = puller.collect(max_messages=40, timeout=3, idle_timeout=0.5)
            assert len(batch) <= 10
            assert puller.ack(batch).invalid == ()
            got += [m.data for m in batch]
    assert sorted(got) == sorted(b"p%d" % i for i in range(40))
    missing = source_subscriber_config(f"{unique_name}-nope", streaming=True)
    with StreamingPuller(missing) as puller, \
            pytest.raises(PubSubIOError, match=rf"^streaming pull from {missing.subscription_path} failed: "):
        puller.collect(max_messages=1, timeout=10)


def test_admin_helpers_tolerate_existing(pubsub_emulator_host: str, unique_name: str) -> None:
    conn = Connection.for_emulator(PROJECT)
    publisher = publisher_client(PublisherConfig(connection=conn, topic=unique_name))
    client = subscriber_client(conn)
    topic, sub = conn.topic_path(unique_name), conn.subscription_path(unique_name)
    assert ensure_topic(publisher, topic) is True
    assert ensure_topic(publisher, topic) is False
    assert ensure_subscription(client, sub, topic, enable_message_ordering=True) is True
    assert ensure_subscription(client, sub, topic, enable_message_ordering=True) is False
    assert client.get_subscription(request={"subscription": sub}).enable_message_ordering is True
    publisher.transport.close()
    client.close()
