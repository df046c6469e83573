"""The local Pub/Sub Lite server (``tests/lite_server``) against the official client, unmodified.

The server runs in this process (a background thread); code using ``google-cloud-pubsublite``
runs in child processes because ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` (how the client trusts the
self-signed certificate) is process-wide. Protocol details the client cannot force (idempotent
deduplication, strict flow control, stream seeks, topic stats) are checked with raw gRPC calls
from this process, which pass the certificate explicitly instead.
"""

from __future__ import annotations

import contextlib
import json
import queue
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.cloud.pubsublite_v1.types import admin, common, cursor, publisher, subscriber, topic_stats
from google.longrunning import operations_pb2
from google.rpc import error_details_pb2, status_pb2

from lite_server import LiteServer, run_python

PROJECT = "test-project"
ZONE = "us-central1-a"
PREAMBLE = f"""
import base64, concurrent.futures, json, os, time
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud.pubsublite import AdminClient, Subscription, Topic
from google.cloud.pubsublite.cloudpubsub import MessageTransformer, PublisherClient, SubscriberClient
from google.cloud.pubsublite.types import (
    BacklogLocation, CloudZone, FlowControlSettings, Partition, SubscriptionPath, TopicPath,
)
from google.pubsub_v1 import PubsubMessage

OPTS = ClientOptions(api_endpoint=os.environ["LITE_ENDPOINT"])
CRED = AnonymousCredentials()
ZONE = CloudZone.parse("{ZONE}")
PROJECT = "{PROJECT}"

def raw_transformer():
    # Keep the whole SequencedMessage: the default transformer rejects multi-valued attributes.
    return MessageTransformer.of_callable(
        lambda seq: PubsubMessage(data=seq._pb.SerializeToString(), ordering_key=seq._pb.message.key.decode())
    )

def committed_total(sub_path):
    # The sum of the subscription's committed cursors, as the server reports them.
    from google.cloud.pubsublite_v1 import CursorServiceClient
    cursors = CursorServiceClient(transport="grpc", credentials=CRED, client_options=OPTS)
    return sum(pc.cursor.offset for pc in cursors.list_partition_cursors(parent=str(sub_path)))

def wait_until(condition, timeout):
    # Poll ``condition`` until it holds or ``timeout`` passes; the caller's assertions then fail.
    deadline = time.time() + timeout
    while not condition() and time.time() < deadline:
        time.sleep(0.05)

def receive(sub_path, want, *, committed, fixed=None, flow=1000, ack=lambda seq: True, timeout=60):
    # Receive ``want`` messages, then keep the subscriber open until the acknowledgements are
    # committed cursors adding up to ``committed`` (cancelling earlier would drop pending commits).
    from google.cloud.pubsublite_v1.types import common
    got = []
    def callback(message):
        seq = common.SequencedMessage.pb().FromString(message.data)
        got.append(seq)
        if ack(seq):
            message.ack()
    with SubscriberClient(credentials=CRED, client_options=OPTS, message_transformer=raw_transformer(),
                          executor=concurrent.futures.ThreadPoolExecutor(1)) as client:
        future = client.subscribe(sub_path, callback, FlowControlSettings(flow, 10**7),
                                  fixed_partitions=fixed)
        wait_until(lambda: len(got) >= want, timeout)
        wait_until(lambda: committed_total(sub_path) >= committed, timeout)
        future.cancel()
    return got

def describe(seq, partition=None):
    m = seq.message
    return {{
        "offset": seq.cursor.offset, "key": m.key.decode(), "data": m.data.decode(),
        "attributes": {{k: [v.decode() for v in m.attributes[k].values] for k in sorted(m.attributes)}},
        "event_time": [m.event_time.seconds, m.event_time.nanos] if m.HasField("event_time") else None,
        "publish_time": [seq.publish_time.seconds, seq.publish_time.nanos], "size": seq.size_bytes,
    }}
"""


def paths(tag: str) -> tuple[str, str]:
    base = f"projects/{PROJECT}/locations/{ZONE}"
    return f"{base}/topics/{tag}", f"{base}/subscriptions/{tag}-sub"


@pytest.fixture
def tag() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def client(lite: LiteServer, body: str, timeout: float = 120) -> Any:
    return run_python(PREAMBLE + body, cert_path=lite.cert_path, endpoint=lite.endpoint, timeout=timeout)


# ----------------------------------------------------------------------------------------------
# Official client end to end
# ----------------------------------------------------------------------------------------------


def test_official_client_admin_publish_subscribe_multi_partition(lite: LiteServer, tag: str) -> None:
    topic, sub = paths(tag)
    result = client(
        lite,
        f"""
topic = TopicPath(PROJECT, ZONE, "{tag}")
sub = SubscriptionPath(PROJECT, ZONE, "{tag}-sub")
admin = AdminClient(region=ZONE.region, credentials=CRED, client_options=OPTS)
admin.create_topic(Topic(name=str(topic), partition_config=Topic.PartitionConfig(
    count=3, capacity=Topic.PartitionConfig.Capacity(publish_mib_per_sec=4, subscribe_mib_per_sec=8))))
admin.create_subscription(Subscription(name=str(sub), topic=str(topic), delivery_config=Subscription.DeliveryConfig(
    delivery_requirement=Subscription.DeliveryConfig.DeliveryRequirement.DELIVER_IMMEDIATELY)),
    starting_offset=BacklogLocation.BEGINNING)
count = admin.get_topic_partition_count(topic)
listed = [t.name for t in admin.list_topics(topic.to_location_path())]
subs = [str(s) for s in admin.list_topic_subscriptions(topic)]
ids = []
with PublisherClient(credentials=CRED, client_options=OPTS) as pub:
    futures = [pub.publish(topic, f"{{i}}".encode(), ordering_key=f"k{{i % 6}}", origin="test")
               for i in range(60)]
    ids = [f.result(timeout=30) for f in futures]
got = receive(sub, 60, committed=60)
print(json.dumps({{"count": count, "listed": listed, "subs": subs, "ids": ids,
                  "got": [describe(s) for s in got]}}))
""",
    )
    assert result["count"] == 3
    assert topic in result["listed"]
    assert result["subs"] == [sub]

    logs = {p: lite.messages(topic, p) for p in range(3)}
    assert sorted(int(m.message.data) for log in logs.values() for m in log) == list(range(60))  # each once
    # every key lives in exactly one partition, several partitions are used, order per key kept
    key_partition: dict[str, int] = {}
    for p, log in logs.items():
        assert [m.cursor.offset for m in log] == list(range(len(log)))  # dense offsets
        publish_times = [(m.publish_time.seconds, m.publish_time.nanos) for m in log]
        assert publish_times == sorted(publish_times)
        for m in log:
            assert key_partition.setdefault(m.message.key.decode(), p) == p
            assert {k: list(v.values) for k, v in m.message.attributes.items()} == {"origin": [b"test"]}
            assert m.size_bytes == m.message.ByteSize()
    assert len(set(key_partition.values())) == 3
    for key in key_partition:
        sent = [int(m.message.data) for m in logs[key_partition[key]] if m.message.key.decode() == key]
        assert sent == list(range(int(key.removeprefix("k")), 60, 6))  # each of the key's once, in publish order
    # the publisher was told the offsets the server assigned: message id "partition,offset"
    server_ids = {f"{p},{m.cursor.offset}": m.message.data.decode() for p, log in logs.items() for m in log}
    assert sorted(result["ids"]) == sorted(server_ids)  # one id per message the server holds, each once
    assert sorted(result["ids"], key=lambda i: int(server_ids[i])) == result["ids"]

    got = result["got"]
    assert sorted(int(m["data"]) for m in got) == list(range(60))  # each message exactly once
    for key in key_partition:  # delivered in order per key (single-thread executor)
        seen = [int(m["data"]) for m in got if m["key"] == key]
        assert seen == sorted(seen)
    for p in range(3):
        assert lite.committed_cursor(sub, p) == len(logs[p])
    calls = lite.calls
    for rpc in (
        "AdminService.CreateTopic",
        "AdminService.CreateSubscription",
        "AdminService.GetTopicPartitions",
        "PublisherService.Publish",
        "PartitionAssignmentService.AssignPartitions",
        "SubscriberService.Subscribe",
        "CursorService.StreamingCommitCursor",
    ):
        assert calls[rpc] >= 1, rpc


def test_commit_and_resume_from_committed_cursor(lite: LiteServer, tag: str) -> None:
    """Ack a prefix, stop, resubscribe: delivery resumes exactly at the committed cursor. Raw Lite
    fields (multi-valued attributes, event time, publish time) arrive as stored."""
    topic, sub = paths(tag)
    lite.create_topic(topic, 2)
    lite.create_subscription(sub, topic)
    message_type = common.PubSubMessage.pb()
    for p in range(2):
        batch = []
        for i in range(10):
            m = message_type(key=f"p{p}".encode(), data=f"{p}-{i}".encode())
            m.attributes["multi"].values.extend([b"a", f"{i}".encode()])
            if i % 2 == 0:
                m.event_time.seconds, m.event_time.nanos = 1_000 + i, 5
            batch.append(m)
        assert lite.publish(topic, p, batch) == list(range(10))

    first = client(
        lite,
        f"""
sub = SubscriptionPath(PROJECT, ZONE, "{tag}-sub")
got = receive(sub, 20, committed=8, fixed={{Partition(0), Partition(1)}},
              ack=lambda seq: seq.cursor.offset < 4, flow=20)
print(json.dumps([describe(s) for s in got]))
""",
    )
    assert len(first) == 20
    assert lite.committed_cursor(sub, 0) == 4
    assert lite.committed_cursor(sub, 1) == 4
    stored = lite.messages(topic, 0)[2]
    p0 = [m for m in first if m["key"] == "p0"]
    assert p0[2] == {
        "offset": 2,
        "key": "p0",
        "data": "0-2",
        "attributes": {"multi": ["a", "2"]},
        "event_time": [1002, 5],
        "publish_time": [stored.publish_time.seconds, stored.publish_time.nanos],
        "size": stored.message.ByteSize(),
    }
    assert p0[3]["event_time"] is None

    # second session: partitions come from AssignPartitions (no fixed set), start at cursor 4
    second = client(
        lite,
        f"""
sub = SubscriptionPath(PROJECT, ZONE, "{tag}-sub")
got = receive(sub, 12, committed=20)
print(json.dumps([describe(s) for s in got]))
""",
    )
    assert sorted((m["key"], m["offset"]) for m in second) == [
        (f"p{p}", o) for p in range(2) for o in range(4, 10)
    ]
    assert lite.committed_cursor(sub, 0) == 10
    assert lite.committed_cursor(sub, 1) == 10


def test_admin_seek_resets_a_live_subscriber(lite: LiteServer, tag: str) -> None:
    topic, sub = paths(tag)
    lite.create_topic(topic, 1)
    lite.create_subscription(sub, topic)
    lite.publish(topic, 0, [common.PubSubMessage.pb()(data=f"m{i}".encode()) for i in range(5)])
    result = client(
        lite,
        f"""
sub = SubscriptionPath(PROJECT, ZONE, "{tag}-sub")
admin = AdminClient(region=ZONE.region, credentials=CRED, client_options=OPTS)
got = []
def callback(message):
    got.append(message.data.decode())
    message.ack()
with SubscriberClient(credentials=CRED, client_options=OPTS, executor=concurrent.futures.ThreadPoolExecutor(1)) as c:
    future = c.subscribe(sub, callback, FlowControlSettings(2, 10**6), fixed_partitions={{Partition(0)}})
    wait_until(lambda: len(got) >= 5 and committed_total(sub) >= 5, 60)
    admin.seek_subscription(sub, BacklogLocation.BEGINNING).result(timeout=10)  # cursor back to 0
    wait_until(lambda: len(got) >= 10 and committed_total(sub) >= 5, 60)
    future.cancel()
print(json.dumps(got))
""",
    )
    assert result == [f"m{i}" for i in range(5)] * 2  # flow control of 2 messages; RESET → replay
    assert lite.committed_cursor(sub, 0) == 5


# ----------------------------------------------------------------------------------------------
# Protocol details via raw gRPC (certificate passed explicitly, no process-wide trust change)
# ----------------------------------------------------------------------------------------------


class Raw:
    """Minimal raw-protobuf stubs for the server's services."""

    def __init__(self, lite: LiteServer) -> None:
        creds = grpc.ssl_channel_credentials(root_certificates=lite.cert_path.read_bytes())
        self.channel = grpc.secure_channel(lite.endpoint, creds)

    def unary(self, service: str, method: str, request: Any, response_type: Any) -> Any:
        call = self.channel.unary_unary(
            f"/google.cloud.pubsublite.v1.{service}/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_type.FromString,
        )
        return call(request, timeout=10)

    def stream(self, service: str, method: str, response_type: Any) -> tuple[queue.Queue, Iterator[Any]]:
        """Open a bidi stream; put requests on the queue (None closes), iterate responses."""
        requests: queue.Queue = queue.Queue()

        def gen() -> Iterator[Any]:
            while (item := requests.get()) is not None:
                yield item

        call = self.channel.stream_stream(
            f"/google.cloud.pubsublite.v1.{service}/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_type.FromString,
        )
        return requests, call(gen(), timeout=20)


@pytest.fixture
def raw(lite: LiteServer) -> Iterator[Raw]:
    r = Raw(lite)
    yield r
    r.channel.close()


def test_idempotent_publish_drops_resent_sequence_numbers(lite: LiteServer, raw: Raw, tag: str) -> None:
    topic, _ = paths(tag)
    lite.create_topic(topic, 1)
    pub_req = publisher.PublishRequest.pb()
    requests, responses = raw.stream("PublisherService", "Publish", publisher.PublishResponse.pb())
    requests.put(pub_req(initial_request={"topic": topic, "partition": 0, "client_id": b"0123456789abcdef"}))
    assert next(responses).HasField("initial_response")

    def batch(first_seq: int, datas: list[str]) -> Any:
        req = pub_req()
        req.message_publish_request.first_sequence_number = first_seq
        for d in datas:
            req.message_publish_request.messages.add(data=d.encode())
        return req

    requests.put(batch(0, ["a", "b", "c"]))
    r1 = next(responses).message_response
    requests.put(batch(1, ["b", "c", "d", "e"]))  # a retry overlapping the first batch
    r2 = next(responses).message_response
    requests.put(None)
    assert [(r.start_cursor.offset, r.start_index, r.end_index) for r in r1.cursor_ranges] == [(0, 0, 3)]
    assert [(r.start_cursor.offset, r.start_index, r.end_index) for r in r2.cursor_ranges] == [(3, 2, 4)]
    assert [m.message.data for m in lite.messages(topic, 0)] == [b"a", b"b", b"c", b"d", b"e"]


def test_subscribe_never_exceeds_flow_control_and_seeks_on_stream(lite: LiteServer, raw: Raw, tag: str) -> None:
    topic, sub = paths(tag)
    lite.create_topic(topic, 1)
    message_type = common.PubSubMessage.pb()
    lite.publish(topic, 0, [message_type(data=b"x" * 10) for _ in range(6)])
    size = lite.messages(topic, 0)[0].size_bytes
    lite.create_subscription(sub, topic)
    lite.set_committed_cursor(sub, 0, 1)
    req = subscriber.SubscribeRequest.pb()
    requests, responses = raw.stream("SubscriberService", "Subscribe", subscriber.SubscribeResponse.pb())
    requests.put(req(initial={"subscription": sub, "partition": 0}))  # no location: committed cursor
    assert next(responses).initial.cursor.offset == 1
    requests.put(req(flow_control={"allowed_messages": 10, "allowed_bytes": 2 * size + 1}))
    first = next(responses).messages.messages
    assert [m.cursor.offset for m in first] == [1, 2]  # the byte allowance stops a third one
    requests.put(req(flow_control={"allowed_messages": 0, "allowed_bytes": size - 1}))  # tokens add up
    assert [m.cursor.offset for m in next(responses).messages.messages] == [3]
    requests.put(req(seek={"cursor": {"offset": 0}}))
    assert next(responses).seek.cursor.offset == 0
    requests.put(req(flow_control={"allowed_messages": 0, "allowed_bytes": 2 * size}))
    assert [m.cursor.offset for m in next(responses).messages.messages] == [0, 1]
    requests.put(req(seek={"named_target": subscriber.SeekRequest.NamedTarget.HEAD}))
    assert next(responses).seek.cursor.offset == 6
    lite.publish(topic, 0, [message_type(data=b"new")])  # a live subscriber is woken by appends
    requests.put(req(flow_control={"allowed_messages": 0, "allowed_bytes": 10 * size}))
    assert [m.message.data for m in next(responses).messages.messages] == [b"new"]
    requests.put(None)


def test_a_subscriber_offline_during_an_admin_seek_is_reset_when_it_resumes(
    lite: LiteServer, raw: Raw, tag: str
) -> None:
    topic, sub = paths(tag)
    lite.create_topic(topic, 1)
    lite.publish(topic, 0, [common.PubSubMessage.pb()(data=f"m{i}".encode()) for i in range(3)])
    lite.create_subscription(sub, topic)
    req = subscriber.SubscribeRequest.pb()

    def subscribe(location: dict[str, Any]) -> tuple[queue.Queue, Iterator[Any]]:
        requests, responses = raw.stream("SubscriberService", "Subscribe", subscriber.SubscribeResponse.pb())
        requests.put(req(initial={"subscription": sub, "partition": 0, "initial_location": location}))
        requests.put(req(flow_control={"allowed_messages": 10, "allowed_bytes": 10**6}))
        return requests, responses

    requests, responses = subscribe({"cursor": {"offset": 0}})
    assert next(responses).initial.cursor.offset == 0
    assert [m.message.data for m in next(responses).messages.messages] == [b"m0", b"m1", b"m2"]
    requests.put(None)  # the subscriber goes offline, having read everything
    with pytest.raises(StopIteration):
        next(responses)

    raw.unary(
        "AdminService", "SeekSubscription",
        admin.SeekSubscriptionRequest.pb()(name=sub, named_target=admin.SeekSubscriptionRequest.NamedTarget.TAIL),
        operations_pb2.Operation,
    )
    requests, responses = subscribe({"cursor": {"offset": 3}})  # back online, resuming where it stopped
    with pytest.raises(grpc.RpcError) as info:
        next(responses)
    requests.put(None)
    assert info.value.code() == grpc.StatusCode.ABORTED
    details = status_pb2.Status.FromString(dict(info.value.trailing_metadata())["grpc-status-details-bin"])
    reason = error_details_pb2.ErrorInfo()
    details.details[0].Unpack(reason)
    assert (reason.reason, reason.domain) == ("RESET", "pubsublite.googleapis.com")

    commit = cursor.StreamingCommitCursorRequest.pb()
    commits, acks = raw.stream("CursorService", "StreamingCommitCursor", cursor.StreamingCommitCursorResponse.pb())
    commits.put(commit(initial={"subscription": sub, "partition": 0}))
    assert next(acks).HasField("initial")
    commits.put(commit(commit={"cursor": {"offset": 3}}))  # the reset flushes a pre-seek commit
    assert next(acks).commit.acknowledged_commits == 1
    commits.put(None)
    assert lite.committed_cursor(sub, 0) == 0  # acknowledged, not applied

    requests, responses = subscribe({"named_target": subscriber.SeekRequest.NamedTarget.COMMITTED_CURSOR})
    assert next(responses).initial.cursor.offset == 0
    assert [m.message.data for m in next(responses).messages.messages] == [b"m0", b"m1", b"m2"]
    requests.put(None)
    requests, responses = subscribe({"cursor": {"offset": 3}})  # the seek was seen: no second reset
    assert next(responses).initial.cursor.offset == 3
    requests.put(None)


def test_unary_cursor_and_topic_stats(lite: LiteServer, raw: Raw, tag: str) -> None:
    topic, sub = paths(tag)
    lite.create_topic(topic, 2)
    message_type = common.PubSubMessage.pb()
    messages = []
    for i in range(4):
        m = message_type(data=f"{i}".encode())
        m.event_time.seconds = 100 + i
        messages.append(m)
    lite.publish(topic, 1, messages)
    lite.create_subscription(sub, topic)
    assert lite.committed_cursor(sub, 1) == 0
    raw.unary(
        "CursorService", "CommitCursor",
        cursor.CommitCursorRequest.pb()(subscription=sub, partition=1, cursor={"offset": 3}),
        cursor.CommitCursorResponse.pb(),
    )
    listed = raw.unary(
        "CursorService", "ListPartitionCursors",
        cursor.ListPartitionCursorsRequest.pb()(parent=sub), cursor.ListPartitionCursorsResponse.pb(),
    )
    assert [(c.partition, c.cursor.offset) for c in listed.partition_cursors] == [(0, 0), (1, 3)]
    head = raw.unary(
        "TopicStatsService", "ComputeHeadCursor",
        topic_stats.ComputeHeadCursorRequest.pb()(topic=topic, partition=1),
        topic_stats.ComputeHeadCursorResponse.pb(),
    )
    assert head.head_cursor.offset == 4
    stats = raw.unary(
        "TopicStatsService", "ComputeMessageStats",
        topic_stats.ComputeMessageStatsRequest.pb()(topic=topic, partition=1, start_cursor={"offset": 1},
                                                    end_cursor={"offset": 3}),
        topic_stats.ComputeMessageStatsResponse.pb(),
    )
    assert (stats.message_count, stats.minimum_event_time.seconds) == (2, 101)
    assert stats.message_bytes == sum(m.size_bytes for m in lite.messages(topic, 1)[1:3])
    time_cursor = raw.unary(
        "TopicStatsService", "ComputeTimeCursor",
        topic_stats.ComputeTimeCursorRequest.pb()(topic=topic, partition=1, target={"event_time": {"seconds": 102}}),
        topic_stats.ComputeTimeCursorResponse.pb(),
    )
    assert time_cursor.cursor.offset == 2


def test_errors_use_grpc_status_codes(lite: LiteServer, raw: Raw, tag: str) -> None:
    topic, _ = paths(tag)
    get_partitions = admin.GetTopicPartitionsRequest.pb()
    with pytest.raises(grpc.RpcError) as info:
        raw.unary("AdminService", "GetTopicPartitions", get_partitions(name=topic), admin.TopicPartitions.pb())
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    lite.create_topic(topic, 2)
    create = admin.CreateTopicRequest.pb()(
        parent=topic.rsplit("/topics/", 1)[0], topic_id=tag, topic={"partition_config": {"count": 1}}
    )
    with pytest.raises(grpc.RpcError) as info:
        raw.unary("AdminService", "CreateTopic", create, common.Topic.pb())
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
    requests, responses = raw.stream("PublisherService", "Publish", publisher.PublishResponse.pb())
    requests.put(publisher.PublishRequest.pb()(initial_request={"topic": topic, "partition": 2}))
    with pytest.raises(grpc.RpcError) as info:
        next(responses)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    requests.put(None)


def test_standalone_server_process(tmp_path: Path) -> None:
    """``python -m lite_server`` prints where it listens and exits cleanly on SIGTERM."""
    tests_dir = Path(__file__).resolve().parent.parent
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lite_server", "--cert-dir", str(tmp_path)],
            cwd=tests_dir,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        assert info["endpoint"] == f"localhost:{info['port']}"
        assert Path(info["cert"]) == tmp_path / "cert.pem"
        creds = grpc.ssl_channel_credentials(root_certificates=Path(info["cert"]).read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{info['port']}", creds) as channel:
            grpc.channel_ready_future(channel).result(timeout=10)  # the IP SAN is valid too
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            returncode = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # the server prints its threads' stacks, then is killed
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            proc.kill()
            proc.wait()
            pytest.fail(f"the server did not stop on SIGTERM; its stderr:\n{stderr_path.read_text()}")
    assert (returncode, stderr_path.read_text()) == (0, "")


def test_model_round_trip_through_the_server(lite: LiteServer, tag: str) -> None:
    """The sink example stored by the server and read back by the source mapping."""
    from pubsub_connect.model.connect import SchemaAndValue
    from pubsub_connect.model.converters import BYTE_ARRAY_CONVERTER
    from pubsub_connect.model.lite.sink import LiteSinkRecord, sink_message
    from pubsub_connect.model.lite.source import LiteReceived, LiteSourceConverters, source_record

    topic, _ = paths(tag)
    lite.create_topic(topic, 1)
    message = sink_message(
        LiteSinkRecord(
            key=SchemaAndValue(None, "dog"), value=SchemaAndValue(None, "fox"), topic="brown", partition=0,
            offset=-1, timestamp_ms=50001, timestamp_type=1, headers=[("h", b"1"), ("h", b"2")],
        )
    ).message
    lite.publish(topic, 0, [message.to_proto()])
    stored = lite.messages(topic, 0)[0]
    raw_headers = LiteSourceConverters(header_converter=BYTE_ARRAY_CONVERTER)
    record = source_record(LiteReceived.from_proto(0, stored), "kafka-out", raw_headers)
    assert (record.key, record.value, record.timestamp_ms) == (b"dog", b"fox", 50001)
    assert record.headers == (
        ("h", b"1"),
        ("h", b"2"),
        ("x-goog-pubsublite-source-kafka-event-time-type", b"LogAppendTime"),
        ("x-goog-pubsublite-source-kafka-offset", b"-1"),
        ("x-goog-pubsublite-source-kafka-partition", b"0"),
        ("x-goog-pubsublite-source-kafka-topic", b"brown"),
    )
