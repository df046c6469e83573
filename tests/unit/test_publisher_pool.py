"""The publish stage's per-process publisher: built by the first task, reused by the later tasks
and micro-batches of that process, replaced after a failed batch, closed at exit."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import grpc
import pyarrow as pa
import pytest
from google.pubsub_v1.types import PublishRequest, PublishResponse

from pubsub_connect.io.pubsub import publisher as publisher_module
from pubsub_connect.io.pubsub import publisher_pool
from pubsub_connect.io.pubsub.credentials import Connection
from pubsub_connect.io.pubsub.publisher import PublisherConfig
from pubsub_connect.pipelines.cps_sink import PubSubPublishPartition

CONFIG = PublisherConfig(connection=Connection(project="p", emulator_host="127.0.0.1:1"), topic="t")


class Refused(grpc.RpcError):
    """What a gRPC call that the service refused raises."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.PERMISSION_DENIED

    def details(self) -> str:
        return "refused"

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()


class FakeClient:
    """Stands in for the official client and its channel: records the messages of every Publish
    request sent on the channel; refuses every request once ``failing`` is set."""

    def __init__(self) -> None:
        self.published: list[tuple[str, bytes, str, dict[str, str]]] = []
        self.failing = False
        self.stopped = False
        self.transport = self
        self.grpc_channel = self
        self.compressed_requests = 0

    def unary_unary(self, method: str) -> FakeClient:
        assert method == "/google.pubsub.v1.Publisher/Publish"
        return self

    def future(self, payload: bytes, **_call_options: Any) -> Future[bytes]:
        future: Future[bytes] = Future()
        if self.failing:
            future.set_exception(Refused())
            return future
        request = PublishRequest.pb().FromString(payload)
        for message in request.messages:
            self.published.append((request.topic, message.data, message.ordering_key, dict(message.attributes)))
        ids = [str(len(self.published) - i) for i in range(len(request.messages))]
        future.set_result(PublishResponse.pb()(message_ids=ids).SerializeToString())
        return future

    def stop(self) -> None:
        self.stopped = True

    def close(self) -> None:
        pass


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FakeClient]]:
    built: list[FakeClient] = []

    def factory(_config: PublisherConfig) -> Any:
        built.append(FakeClient())
        return built[-1]

    monkeypatch.setattr(publisher_module, "publisher_client", factory)
    publisher_pool.close_publishers()
    yield built
    publisher_pool.close_publishers()


def task(rows: list[bytes]) -> int:
    """One Spark task of the publish stage, as its worker process runs it."""
    batch = pa.RecordBatch.from_pydict({
        "data": pa.array(rows, pa.binary()),
        "attributes": pa.array([[("seq", str(i))] for i in range(len(rows))], pa.map_(pa.string(), pa.string())),
        "ordering_key": pa.array([""] * len(rows), pa.string()),
    })
    (out,) = PubSubPublishPartition(CONFIG)(iter([batch]))
    return out.column("published").to_pylist()[0]


def test_later_tasks_and_batches_reuse_the_first_tasks_publisher(clients: list[FakeClient]) -> None:
    assert task([b"a", b"b"]) == 2
    assert task([b"c"]) == 1
    assert task([b"d", b"e", b"f"]) == 3
    assert len(clients) == 1
    assert [(data, attrs) for _, data, _, attrs in clients[0].published] == [
        (b"a", {"seq": "0"}), (b"b", {"seq": "1"}), (b"c", {"seq": "0"}),
        (b"d", {"seq": "0"}), (b"e", {"seq": "1"}), (b"f", {"seq": "2"}),
    ]
    assert publisher_pool.open_publisher_count() == 1
    assert not clients[0].stopped


def test_a_failed_batch_discards_the_publisher_and_the_retry_builds_a_new_one(clients: list[FakeClient]) -> None:
    assert task([b"a"]) == 1
    clients[0].failing = True
    with pytest.raises(publisher_module.PublishError) as err:
        task([b"b"])
    assert str(err.value) == ("publish to projects/p/topics/t failed: 1 of 1 message(s) not published; "
                              "first error: PermissionDenied: 403 refused")
    assert clients[0].stopped
    assert publisher_pool.open_publisher_count() == 0
    assert task([b"b"]) == 1
    assert len(clients) == 2
    assert [data for _, data, _, _ in clients[1].published] == [b"b"]


def test_each_configuration_has_its_own_publisher_and_exit_closes_them_all(clients: list[FakeClient]) -> None:
    other = PublisherConfig(connection=CONFIG.connection, topic="u")
    first = publisher_pool.shared_publisher(CONFIG)
    assert publisher_pool.shared_publisher(CONFIG) is first
    second = publisher_pool.shared_publisher(other)
    assert second is not first
    first.client, second.client  # noqa: B018 - builds both clients
    publisher_pool.close_publishers()
    assert [c.stopped for c in clients] == [True, True]
    assert publisher_pool.open_publisher_count() == 0
