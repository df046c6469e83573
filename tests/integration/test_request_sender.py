"""Publishing pre-encoded requests against an in-process gRPC Publisher service on 127.0.0.1 that
answers as told: retries with backoff on transient codes within the total budget, at once on
others, stops sending after a failure, splits requests by the batching keys, sends the routing
header, and compresses requests at the threshold. Time is a fake clock advanced by the backoff
sleeps, so the budget arithmetic is exact and nothing waits."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field

import grpc
import pyarrow as pa
import pytest
from google.api_core import exceptions as gexc
from google.pubsub_v1.types import PublishRequest, PublishResponse

from pubsub_connect.io.pubsub.request_sender import RequestSender, SenderSettings
from pubsub_connect.model.pubsub_wire import framed_messages

TOPIC = "projects/p/topics/t"
#: What the service answers to call n (0-based): None to accept, else (code, details).
Script = Callable[[int], "tuple[grpc.StatusCode, str] | None"]


@dataclass
class PublisherService:
    """Records each Publish call (messages, metadata) and answers per ``script``."""

    script: Script = lambda _n: None
    ids_per_request: int | None = None  # None: one id per message, as the service does
    calls: list[tuple[list[bytes], dict[str, str]]] = field(default_factory=list)

    def publish(self, payload: bytes, context: grpc.ServicerContext) -> bytes:
        request = PublishRequest.pb().FromString(payload)
        assert request.topic == TOPIC
        self.calls.append(([m.data for m in request.messages], dict(context.invocation_metadata())))
        answer = self.script(len(self.calls) - 1)
        if answer is not None:
            context.abort(*answer)
        count = len(request.messages) if self.ids_per_request is None else self.ids_per_request
        ids = [f"id-{len(self.calls)}-{i}" for i in range(count)]
        return PublishResponse.pb()(message_ids=ids).SerializeToString()


@dataclass
class FakeTime:
    now: float = 0.0
    sleeps: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


@pytest.fixture
def service() -> Iterator[tuple[PublisherService, grpc.Channel]]:
    servicer = PublisherService()
    handler = grpc.method_handlers_generic_handler(
        "google.pubsub.v1.Publisher", {"Publish": grpc.unary_unary_rpc_method_handler(servicer.publish)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=(handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield servicer, channel
    finally:
        channel.close()
        server.stop(None)


def settings(**overrides: object) -> SenderSettings:
    values: dict[str, object] = dict(topic=TOPIC, max_messages=100, max_bytes=9_500_000, attempt_timeout_s=10.0,
                                     total_timeout_s=60.0, window_messages=20_000, window_bytes=64 << 20)
    values.update(overrides)
    return SenderSettings(**values)  # type: ignore[arg-type]


def batch(first: int, count: int, size: int = 10) -> pa.Array:
    return pa.array([str(i).zfill(size).encode() for i in range(first, first + count)], pa.binary())


def send(channel: grpc.Channel, time: FakeTime, payloads: list[pa.Array], **overrides: object):
    sender = RequestSender(channel, settings(**overrides), clock=time.clock, sleep=time.sleep)
    return sender, sender.send_all(framed_messages(data) for data in payloads)


def test_transient_failures_are_retried_with_backoff(service) -> None:
    servicer, channel = service
    servicer.script = lambda n: (grpc.StatusCode.UNAVAILABLE, "busy") if n < 2 else None
    time = FakeTime()
    _, outcome = send(channel, time, [batch(0, 5)])
    assert (outcome.sent, outcome.failed, outcome.first_error) == (5, 0, None)
    assert outcome.data_bytes == 50
    assert [messages for messages, _ in servicer.calls] == [list(batch(0, 5).to_pylist())] * 3
    assert time.sleeps == [0.1, 0.2]
    assert servicer.calls[0][1]["x-goog-request-params"] == f"topic={TOPIC}"


def test_other_codes_fail_at_once(service) -> None:
    servicer, channel = service
    servicer.script = lambda _n: (grpc.StatusCode.NOT_FOUND, "Topic not found")
    time = FakeTime()
    _, outcome = send(channel, time, [batch(0, 5)])
    assert (outcome.sent, outcome.failed, len(servicer.calls), time.sleeps) == (5, 5, 1, [])
    assert isinstance(outcome.first_error, gexc.NotFound)
    assert str(outcome.first_error) == "404 Topic not found"


def test_retries_end_when_the_next_backoff_would_pass_the_total_budget(service) -> None:
    servicer, channel = service
    servicer.script = lambda _n: (grpc.StatusCode.UNAVAILABLE, "down")
    time = FakeTime()
    _, outcome = send(channel, time, [batch(0, 3)], total_timeout_s=1.0)
    # 0.1 + 0.2 + 0.4 = 0.7 s slept; a further 0.8 s would end past 1.0 s
    assert time.sleeps == [0.1, 0.2, 0.4]
    assert (outcome.failed, len(servicer.calls)) == (3, 4)
    assert isinstance(outcome.first_error, gexc.RetryError)
    assert str(outcome.first_error) == "Timeout of 1.0s exceeded, last exception: 503 down"


def test_requests_follow_the_batching_keys_across_arrow_batches(service) -> None:
    servicer, channel = service
    _, outcome = send(channel, FakeTime(), [batch(0, 150), batch(150, 100)], max_messages=100)
    # requests are in flight together, so they may arrive in any order
    assert sorted(messages[0] for messages, _ in servicer.calls) == [b"0000000000", b"0000000100", b"0000000150"]
    assert sorted(m for messages, _ in servicer.calls for m in messages) == batch(0, 250).to_pylist()
    assert sorted(len(messages) for messages, _ in servicer.calls) == [50, 100, 100]
    assert (outcome.sent, outcome.failed) == (250, 0)

    # 40 messages of 10 bytes, 14 bytes each framed (tag and length for the data field, then for
    # the message); the topic field takes 21 bytes of each request
    servicer.calls.clear()
    send(channel, FakeTime(), [batch(0, 40)], max_bytes=21 + 14 * 10)
    assert [len(messages) for messages, _ in servicer.calls] == [10, 10, 10, 10]


def test_nothing_more_is_sent_after_a_failure(service) -> None:
    servicer, channel = service
    servicer.script = lambda n: (grpc.StatusCode.PERMISSION_DENIED, "no") if n == 1 else None
    _, outcome = send(channel, FakeTime(), [batch(0, 500)], max_messages=100, window_messages=100)
    assert len(servicer.calls) == 2  # the window settles each request before the next is sent
    assert (outcome.sent, outcome.failed) == (200, 100)
    assert str(outcome.first_error) == "403 no"


def test_a_short_answer_fails_the_request(service) -> None:
    servicer, channel = service
    servicer.ids_per_request = 1
    _, outcome = send(channel, FakeTime(), [batch(0, 3)])
    assert outcome.failed == 3
    assert str(outcome.first_error) == "500 Pub/Sub returned 1 message id(s) for 3 message(s)"


def test_requests_at_the_threshold_are_compressed(service) -> None:
    servicer, channel = service
    sender, outcome = send(channel, FakeTime(), [batch(0, 200, size=50), batch(200, 1, size=50)],
                           max_messages=100, compression_threshold=1000)
    assert sender.compressed_requests == 2  # the two full requests; the single message is below
    assert outcome.failed == 0
    assert sorted(m for messages, _ in servicer.calls for m in messages) == batch(0, 201, size=50).to_pylist()
