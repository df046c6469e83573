"""Creating Cloud Pub/Sub topics and subscriptions (quickstart, tests): idempotent, an existing
resource is left as it is."""

from __future__ import annotations

from typing import Any


def ensure_topic(publisher: Any, topic_path: str) -> bool:
    """Create the topic unless it exists. Returns whether it was created."""
    from google.api_core import exceptions as gexc

    try:
        publisher.create_topic(request={"name": topic_path})
        return True
    except gexc.AlreadyExists:
        return False


def ensure_subscription(subscriber: Any, subscription_path: str, topic_path: str, *,
                        enable_message_ordering: bool = False, ack_deadline_seconds: int = 10,
                        enable_exactly_once_delivery: bool = False) -> bool:
    """Create the subscription unless it exists. Returns whether it was created.

    An existing subscription is left as it is (its settings are not compared or updated).
    """
    from google.api_core import exceptions as gexc

    try:
        subscriber.create_subscription(request={
            "name": subscription_path,
            "topic": topic_path,
            "ack_deadline_seconds": ack_deadline_seconds,
            "enable_message_ordering": enable_message_ordering,
            "enable_exactly_once_delivery": enable_exactly_once_delivery,
        })
        return True
    except gexc.AlreadyExists:
        return False
