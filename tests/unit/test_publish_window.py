"""The publisher keeps a bounded window of unsettled messages: a task's memory does not grow
with its share of the micro-batch, and a failure seen in the window stops the rest."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from pubsub_connect.io.pubsub.credentials import Connection
from pubsub_connect.io.pubsub.publisher import BatchPublisher, PublisherConfig, PublishError

CONFIG = PublisherConfig(connection=Connection(project="p", emulator_host="127.0.0.1:1"), topic="t")


class LazyFuture(Future):
    """Settles when somebody waits for it, as a publish settles once its RPC returned."""

    def __init__(self, client: WindowClient, fail: bool) -> None:
        super().__init__()
        self.client = client
        self.fail = fail

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self.done():
            self.client.unsettled -= 1
            if self.fail:
                self.set_exception(RuntimeError("refused"))
            else:
                self.set_result("id")
        return super().exception(timeout)


class WindowClient:
    def __init__(self, failing: set[bytes] = frozenset()) -> None:
        self.failing = failing
        self.published: list[bytes] = []
        self.unsettled = 0
        self.most_unsettled = 0

    def publish(self, topic: str, data: bytes, ordering_key: str = "", **attributes: str) -> Future:
        self.published.append(data)
        self.unsettled += 1
        self.most_unsettled = max(self.most_unsettled, self.unsettled)
        return LazyFuture(self, data in self.failing)

    def resume_publish(self, topic: str, key: str) -> None:
        pass


def publisher(client: WindowClient, window: int) -> BatchPublisher:
    pub = BatchPublisher(CONFIG, client_factory=lambda _config: client)
    pub.WINDOW_MESSAGES = window
    return pub


def test_at_most_a_window_of_messages_is_unsettled_and_all_are_published() -> None:
    client = WindowClient()
    stats = publisher(client, window=4).publish_all((f"m{i}".encode(), None, None) for i in range(10))
    assert stats.messages == 10
    assert client.published == [f"m{i}".encode() for i in range(10)]
    assert client.most_unsettled == 4
    assert client.unsettled == 0


def test_the_byte_window_bounds_large_messages_too() -> None:
    client = WindowClient()
    pub = publisher(client, window=1000)
    pub.WINDOW_BYTES = 3_000
    pub.publish_all((bytes(1000), None, None) for _ in range(9))
    assert client.most_unsettled == 3


def test_a_failure_seen_in_the_window_stops_publishing_the_rest() -> None:
    client = WindowClient(failing={b"m1"})
    with pytest.raises(PublishError) as err:
        publisher(client, window=4).publish_all((f"m{i}".encode(), None, None) for i in range(10))
    assert client.published == [b"m0", b"m1", b"m2", b"m3"]
    assert (err.value.failed, err.value.total) == (1, 4)
    assert str(err.value).endswith("1 of 4 message(s) not published; first error: RuntimeError: refused")


