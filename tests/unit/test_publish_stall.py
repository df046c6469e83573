"""A publish whose results never come (an RPC stuck on a dead connection) fails the batch once,
after one stall window, instead of hanging the task.

Why a client of our own: only a client whose futures never resolve makes the stall certain, and
only one that records how the publisher waited on them shows a single stall window per batch
instead of one per message (a timing could not tell them apart reliably on a loaded machine).
"""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from pubsub_connect.io.pubsub.credentials import Connection
from pubsub_connect.io.pubsub.publisher import BatchPublisher, PublisherConfig, PublishError

PROJECT = "p"


class WaitedFuture(Future):
    """A future that records each wait for its result (the timeout given), so a test can count
    the stall windows a publisher waited through instead of timing them."""

    def __init__(self, waits: list[float | None]) -> None:
        super().__init__()
        self._waits = waits

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._waits.append(timeout)
        return super().exception(timeout)


class HangingClient:
    """A publisher whose futures never resolve, like an RPC stuck on a dead connection."""

    def __init__(self) -> None:
        self.resumed: list[tuple[str, str]] = []
        self.transport = self
        self.waits: list[float | None] = []  # the timeouts the publisher waited on a result with

    def publish(self, topic: str, data: bytes, ordering_key: str = "", **attrs: str) -> Future:
        return WaitedFuture(self.waits)

    def resume_publish(self, topic: str, key: str) -> None:
        self.resumed.append((topic, key))

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_stalled_publish_fails_once_instead_of_hanging() -> None:
    client = HangingClient()
    config = PublisherConfig(connection=Connection(project=PROJECT, emulator_host="127.0.0.1:1"), topic="t",
                             total_timeout_ms=100, max_latency_ms=0, enable_message_ordering=True)
    publisher = BatchPublisher(config, client_factory=lambda _: client)
    publisher.PROGRESS_SLACK_S = 0.2
    with pytest.raises(PublishError) as err:
        publisher.publish_all([(b"m", None, f"k{i % 2}") for i in range(50)])
    # One stall window for the batch, not one per message: only the first result was waited for.
    (waited,) = client.waits
    assert waited is not None and waited <= 0.3  # at most the stall window (what is left of it)
    assert str(err.value) == (f"publish to projects/{PROJECT}/topics/t failed: 50 of 50 message(s) not published; "
                              "resumed 2 ordering key(s); first error: PubSubIOError: no publish result within 0.3 s")
    assert client.resumed == [(config.topic_path, "k0"), (config.topic_path, "k1")]
    publisher.close()
