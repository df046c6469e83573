"""Small Pub/Sub helpers for tests against Google's emulator.

These helpers use the plain ``google-cloud-pubsub`` clients and not
``pubsub_connect.io.pubsub``, so tests check the product against an independent client, not
against itself. They need ``PUBSUB_EMULATOR_HOST``, which the ``pubsub_emulator_host`` fixture
sets. Typical use::

    topic, sub = create_topic_and_subscription(unique_name, ordering=True)
    ... run the sink ...
    got = pull_all(sub, expected_count=1000)
    assert sorted(m.data for m in got) == sorted(expected)
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import grpc
from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

PROJECT = "test-project"


@dataclass(frozen=True)
class Received:
    """One message read back from a subscription."""

    data: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    ordering_key: str = ""
    message_id: str = ""
    publish_time: datetime | None = None
    delivery_attempt: int | None = None


@functools.lru_cache(maxsize=4)
def _clients(host: str) -> tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient]:
    # One client pair per emulator host for the session: tests create many topics.
    # Ordering is enabled so that publish() below can send ordering keys, and the clients read
    # PUBSUB_EMULATOR_HOST themselves.
    assert os.environ.get("PUBSUB_EMULATOR_HOST") == host
    publisher = pubsub_v1.PublisherClient(
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True))
    # Pull answers may hold messages near Pub/Sub's 10 MB limit: over gRPC's default 4 MB.
    channel = grpc.insecure_channel(host, options=[("grpc.max_receive_message_length", -1)])
    return publisher, pubsub_v1.SubscriberClient(transport=SubscriberGrpcTransport(channel=channel))


def publisher() -> pubsub_v1.PublisherClient:
    """A shared plain PublisherClient (message ordering enabled) on the emulator."""
    return _clients(os.environ["PUBSUB_EMULATOR_HOST"])[0]


def subscriber() -> pubsub_v1.SubscriberClient:
    """A shared plain SubscriberClient on the emulator."""
    return _clients(os.environ["PUBSUB_EMULATOR_HOST"])[1]


def topic_path(name: str, project: str = PROJECT) -> str:
    return name if name.startswith("projects/") else f"projects/{project}/topics/{name}"


def subscription_path(name: str, project: str = PROJECT) -> str:
    return name if name.startswith("projects/") else f"projects/{project}/subscriptions/{name}"


def create_topic(name: str, project: str = PROJECT) -> str:
    """Create (or reuse) a topic; returns its path."""
    path = topic_path(name, project)
    with contextlib.suppress(gexc.AlreadyExists):
        publisher().create_topic(request={"name": path})
    return path


def create_subscription(topic: str, name: str, *, ordering: bool = False, ack_deadline_seconds: int = 10,
                        exactly_once: bool = False, project: str = PROJECT) -> str:
    """Create (or reuse) a subscription on ``topic``; returns its path."""
    path = subscription_path(name, project)
    with contextlib.suppress(gexc.AlreadyExists):
        subscriber().create_subscription(request={
            "name": path,
            "topic": topic_path(topic, project),
            "ack_deadline_seconds": ack_deadline_seconds,
            "enable_message_ordering": ordering,
            "enable_exactly_once_delivery": exactly_once,
        })
    return path


def create_topic_and_subscription(name: str, *, ordering: bool = False, ack_deadline_seconds: int = 10,
                                  exactly_once: bool = False, project: str = PROJECT) -> tuple[str, str]:
    """Topic ``name`` plus subscription ``name-sub``; returns ``(topic_path, subscription_path)``."""
    topic = create_topic(name, project)
    sub = create_subscription(topic, f"{name}-sub", ordering=ordering,
                              ack_deadline_seconds=ack_deadline_seconds, exactly_once=exactly_once,
                              project=project)
    return topic, sub


def create_avro_schema_topic(name: str, definition: str, project: str = PROJECT) -> tuple[str, str]:
    """A topic whose messages must be datums of the Avro schema ``definition`` (binary encoding);
    returns its path and the schema's revision id. The emulator keeps schemas and validates what
    is published, as Pub/Sub does."""
    from google.cloud.pubsub import SchemaServiceClient
    from google.pubsub_v1.types import Encoding, Schema

    schema_path = f"projects/{project}/schemas/{name}"
    created = SchemaServiceClient().create_schema(request={
        "parent": f"projects/{project}", "schema_id": name,
        "schema": Schema(name=schema_path, type_=Schema.Type.AVRO, definition=definition)})
    path = topic_path(name, project)
    publisher().create_topic(request={"name": path, "schema_settings": {"schema": schema_path,
                                                                       "encoding": Encoding.BINARY}})
    return path, created.revision_id


def delete_topic(topic: str) -> None:
    publisher().delete_topic(request={"topic": topic_path(topic)})


Input = bytes | tuple[bytes, "dict[str, str] | None", "str | None"]


def publish(topic: str, messages: Iterable[Input]) -> list[str]:
    """Publish test input (``data`` or ``(data, attributes, ordering_key)``); returns the
    message IDs in input order."""
    path = topic_path(topic)
    client = publisher()
    futures = []
    for item in messages:
        data, attrs, key = (item, None, None) if isinstance(item, bytes) else item
        futures.append(client.publish(path, data, ordering_key=key or "", **(attrs or {})))
    return [f.result(timeout=60) for f in futures]


def _received(raw: Any) -> Received:
    msg = raw.message
    return Received(
        data=msg.data,
        attributes=dict(msg.attributes),
        ordering_key=msg.ordering_key,
        message_id=msg.message_id,
        publish_time=msg.publish_time.astimezone(timezone.utc) if msg.publish_time else None,
        delivery_attempt=raw.delivery_attempt or None,
    )


def pull_all(subscription: str, expected_count: int, timeout: float = 30.0, *, ack: bool = True,
             batch_size: int = 1000, check: Callable[[], None] | None = None) -> list[Received]:
    """Pull until ``expected_count`` messages arrived, acking them unless ``ack=False``.

    Returns them in delivery order. Raises AssertionError naming the count if they do not all
    arrive within ``timeout``. If more arrive than expected, the extra ones are returned too,
    so callers can assert exact counts. ``check`` is called before each pull and may raise to
    stop waiting early (e.g. when the publisher being tested has failed).
    """
    client = subscriber()
    path = subscription_path(subscription)
    got: list[Received] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected_count:
        if check is not None:
            check()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"pulled {len(got)} of {expected_count} message(s) from {path} "
                                 f"within {timeout:.0f} s")
        try:
            response = client.pull(request={"subscription": path, "max_messages": batch_size},
                                   timeout=min(5.0, max(0.5, remaining)))
        except gexc.DeadlineExceeded:
            continue
        if ack and response.received_messages:
            ack_ids = [r.ack_id for r in response.received_messages]
            for start in range(0, len(ack_ids), 1000):
                client.acknowledge(request={"subscription": path, "ack_ids": ack_ids[start:start + 1000]})
        got.extend(_received(r) for r in response.received_messages)
    return got


def pull_distinct(subscription: str, expected_ids: set[object], id_of: Callable[[Received], object],
                  timeout: float = 60.0, *, hand_back: bool = False) -> list[Received]:
    """Pull (and ack) until every id in ``expected_ids`` arrived at least once.

    Why not ``pull_all``: after a crash an at-least-once connector republishes, so a count of
    deliveries reaches the expected number while some ids are still on their way. Returns every
    delivery, duplicates included, so callers can report redeliveries.

    With ``hand_back`` each delivery is handed straight back (a zero ack deadline) instead of
    acked, so the code under test receives it next: how a test waits for messages a killed
    process had leased to become deliverable again, instead of sleeping past the lease.
    """
    client = subscriber()
    path = subscription_path(subscription)
    got: list[Received] = []
    missing = set(expected_ids)
    deadline = time.monotonic() + timeout
    while missing:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"{len(missing)} id(s) never arrived on {path} within {timeout:.0f} s, "
                                 f"e.g. {sorted(map(str, missing))[:10]} ({len(got)} deliveries)")
        try:
            response = client.pull(request={"subscription": path, "max_messages": 1000},
                                   timeout=min(5.0, max(0.5, remaining)))
        except gexc.DeadlineExceeded:
            continue
        ack_ids = [r.ack_id for r in response.received_messages]
        if ack_ids and hand_back:
            client.modify_ack_deadline(request={"subscription": path, "ack_ids": ack_ids, "ack_deadline_seconds": 0})
        elif ack_ids:
            client.acknowledge(request={"subscription": path, "ack_ids": ack_ids})
        for message in response.received_messages:
            received = _received(message)
            got.append(received)
            missing.discard(id_of(received))
    return got


def assert_no_more_messages(subscription: str, wait: float = 2.0) -> None:
    """Fail if any message is delivered on ``subscription`` within ``wait`` seconds."""
    client = subscriber()
    path = subscription_path(subscription)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            response = client.pull(request={"subscription": path, "max_messages": 100},
                                   timeout=max(0.5, deadline - time.monotonic()))
        except gexc.DeadlineExceeded:
            continue
        if response.received_messages:
            found = [(r.message.message_id, r.message.data[:40]) for r in response.received_messages]
            raise AssertionError(f"unexpected message(s) on {path}: {found}")
        time.sleep(0.2)


def by_attribute(messages: Sequence[Received], name: str) -> dict[str, Received]:
    """Index messages by one attribute (e.g. a sequence number); fails on duplicates."""
    out: dict[str, Received] = {}
    for message in messages:
        value = message.attributes[name]
        assert value not in out, f"duplicate {name}={value}"
        out[value] = message
    return out
