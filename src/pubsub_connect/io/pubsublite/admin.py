"""Pub/Sub Lite administration: a topic's partition count and a subscription's topic
(``AdminService``), unary RPCs usable from any process."""

from __future__ import annotations

from typing import Any

from pubsub_connect.io.pubsublite.connection import LiteConnection, lite_error


def admin_client(conn: LiteConnection) -> Any:
    """The generated ``AdminServiceClient`` (the ``google.cloud.pubsublite`` wrapper around it
    costs seconds of imports in every Spark Python process that plans or reads)."""
    from google.cloud.pubsublite_v1 import AdminServiceClient

    return AdminServiceClient(transport="grpc", **conn.client_kwargs())


def topic_partition_count(conn: LiteConnection, topic_path: str, admin: Any = None) -> int:
    """``GetTopicPartitions``: how many partitions the Lite topic has now."""
    try:
        return int((admin or admin_client(conn)).get_topic_partitions(name=topic_path).partition_count)
    except Exception as exc:
        raise lite_error(f"cannot read the partitions of Lite topic {topic_path}", exc, conn) from None


def subscription_topic(conn: LiteConnection, subscription_path: str, admin: Any = None) -> str:
    """The topic a subscription reads (``GetSubscription``)."""
    try:
        return str((admin or admin_client(conn)).get_subscription(name=subscription_path).topic)
    except Exception as exc:
        raise lite_error(f"cannot read Lite subscription {subscription_path}", exc, conn) from None
