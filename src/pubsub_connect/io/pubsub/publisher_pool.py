"""One Pub/Sub publisher per process and publisher configuration, reused across tasks and
micro-batches.

Why: building a publisher costs a gRPC channel, credentials and the client's batching threads,
and its first RPCs pay for the channel's connection set-up. A Spark Python worker process is
reused by every task Spark runs in it (``spark.python.worker.reuse``, on by default), so a
publisher built by the first publish task of a stage serves all its later tasks and
micro-batches: the publish stage then costs what the messages cost, not a new client per task.

Safe to share because a worker process runs one task at a time, and
:meth:`BatchPublisher.publish_all` returns only once every message it was given has a result:
between two tasks nothing is pending. A publisher whose batch failed is discarded (closed and
forgotten), so a retry starts from a fresh channel rather than one that may be broken.

At interpreter exit the publishers are closed (``atexit``). A Spark worker process usually ends
without running ``atexit`` (the daemon stops it with a signal or ``os._exit``); nothing is lost
then either, since nothing is pending between tasks.
"""

from __future__ import annotations

import atexit
import threading

from pubsub_connect.io.pubsub.publisher import BatchPublisher, PublisherConfig

_publishers: dict[PublisherConfig, BatchPublisher] = {}
_lock = threading.Lock()


def shared_publisher(config: PublisherConfig) -> BatchPublisher:
    """This process's publisher for ``config``, built on first use."""
    with _lock:
        publisher = _publishers.get(config)
        if publisher is None:
            publisher = _publishers[config] = BatchPublisher(config)
        return publisher


def discard_publisher(config: PublisherConfig) -> None:
    """Close and forget the publisher for ``config`` (after a failed batch); a no-op without one."""
    with _lock:
        publisher = _publishers.pop(config, None)
    if publisher is not None:
        publisher.close()


def close_publishers() -> None:
    """Close every publisher of this process (registered with ``atexit``)."""
    with _lock:
        publishers = list(_publishers.values())
        _publishers.clear()
    for publisher in publishers:
        publisher.close()


def open_publisher_count() -> int:
    """How many publishers this process holds (what the reuse tests count)."""
    with _lock:
        return len(_publishers)


atexit.register(close_publishers)
