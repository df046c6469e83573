"""Offsets of a Lite subscription: committed cursors, partition heads and oldest messages, range
sizes, cursor commits (``CursorService``, ``TopicStatsService``), and offsets' JSON form.

The source plans its micro-batches from these (driver side) and the pull stage commits cursors
once a batch is durable in bronze.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pubsub_connect.io.pubsublite.admin import admin_client, subscription_topic, topic_partition_count
from pubsub_connect.io.pubsublite.connection import LiteConnection, lite_error

log = logging.getLogger(__name__)


class OffsetClient:
    """Cursor and topic-stats look-ups of one subscription (driver side; clients built once)."""

    def __init__(self, conn: LiteConnection, subscription_path: str):
        self.conn = conn
        self.subscription_path = subscription_path
        self._admin: Any = None
        self._cursors: Any = None
        self._stats: Any = None
        self._topic: str | None = None

    @property
    def admin(self) -> Any:
        if self._admin is None:
            self._admin = admin_client(self.conn)
        return self._admin

    @property
    def topic_path(self) -> str:
        if self._topic is None:
            self._topic = subscription_topic(self.conn, self.subscription_path, self.admin)
        return self._topic

    def partition_count(self) -> int:
        return topic_partition_count(self.conn, self.topic_path, self.admin)

    def _cursor_client(self) -> Any:
        if self._cursors is None:
            from google.cloud.pubsublite_v1 import CursorServiceClient

            self._cursors = CursorServiceClient(transport="grpc", **self.conn.client_kwargs())
        return self._cursors

    def _stats_client(self) -> Any:
        if self._stats is None:
            from google.cloud.pubsublite_v1 import TopicStatsServiceClient

            self._stats = TopicStatsServiceClient(transport="grpc", **self.conn.client_kwargs())
        return self._stats

    def committed_cursors(self) -> dict[int, int]:
        """``{partition: committed offset}`` (partitions never committed are left out)."""
        try:
            pager = self._cursor_client().list_partition_cursors(parent=self.subscription_path)
            return {int(pc.partition): int(pc.cursor.offset) for pc in pager}
        except Exception as exc:
            raise lite_error(f"cannot list the cursors of {self.subscription_path}", exc, self.conn) from None

    def head_offsets(self, partitions: Iterable[int]) -> dict[int, int]:
        """``{partition: offset of the next message to be published}``."""
        from google.cloud.pubsublite_v1 import ComputeHeadCursorRequest

        client = self._stats_client()
        heads: dict[int, int] = {}
        for partition in partitions:
            try:
                request = ComputeHeadCursorRequest(topic=self.topic_path, partition=partition)
                response = client.compute_head_cursor(request=request)
            except Exception as exc:
                raise lite_error(f"cannot read the head of {self.topic_path} partition {partition}", exc,
                            self.conn) from None
            heads[partition] = int(response.head_cursor.offset)
        return heads

    def earliest_offsets(self, partitions: Iterable[int]) -> dict[int, int]:
        """``{partition: offset of the oldest retained message}`` (the head when none is left):
        the first message published at or after the epoch (``ComputeTimeCursor``)."""
        from google.cloud.pubsublite_v1 import ComputeTimeCursorRequest, TimeTarget
        from google.protobuf import timestamp_pb2

        partitions = list(partitions)
        client = self._stats_client()
        found: dict[int, int] = {}
        for partition in partitions:
            request = ComputeTimeCursorRequest(topic=self.topic_path, partition=partition,
                                               target=TimeTarget(publish_time=timestamp_pb2.Timestamp(seconds=0)))
            try:
                response = client.compute_time_cursor(request=request)
            except Exception as exc:
                raise lite_error(f"cannot find the oldest message of {self.topic_path} partition {partition}", exc,
                            self.conn) from None
            if "cursor" in response:
                found[partition] = int(response.cursor.offset)
        missing = [p for p in partitions if p not in found]
        return {**found, **self.head_offsets(missing)} if missing else found

    def range_bytes(self, partition: int, start: int, end: int) -> int:
        """Bytes of the messages ``[start, end)`` of a partition (``ComputeMessageStats``)."""
        from google.cloud.pubsublite_v1 import ComputeMessageStatsRequest, Cursor

        request = ComputeMessageStatsRequest(topic=self.topic_path, partition=partition,
                                             start_cursor=Cursor(offset=start), end_cursor=Cursor(offset=end))
        try:
            return int(self._stats_client().compute_message_stats(request=request).message_bytes)
        except Exception as exc:
            raise lite_error(f"cannot compute the size of {self.topic_path} partition {partition} [{start}, {end})",
                        exc, self.conn) from None

    def close(self) -> None:
        """Close the channels (the object can be used again; clients are rebuilt on demand)."""
        for client in (self._admin, self._cursors, self._stats):
            if client is not None:
                try:
                    client.transport.close()
                except Exception:  # closing must not mask what the caller is doing
                    log.debug("closing a Lite client failed", exc_info=True)
        self._admin = self._cursors = self._stats = None

    def commit(self, cursors: Mapping[int, int]) -> None:
        """Commit ``{partition: next offset to read}`` for the subscription (``CommitCursor``)."""
        from google.cloud.pubsublite_v1 import CommitCursorRequest, Cursor

        client = self._cursor_client()
        for partition, offset in sorted(cursors.items()):
            request = CommitCursorRequest(subscription=self.subscription_path, partition=partition,
                                          cursor=Cursor(offset=offset))
            try:
                client.commit_cursor(request=request)
            except Exception as exc:
                raise lite_error(f"cannot commit cursor {offset} of {self.subscription_path} partition {partition}",
                            exc, self.conn) from None


#: Probes guessed from the mean message size before :func:`bounded_end` falls back to bisecting.
_GUESSED_PROBES = 8


def bounded_end(partition_bytes: Callable[[int], int], start: int, end: int, budget: int) -> int:
    """The largest ``e`` in ``(start, end]`` whose range ``[start, e)`` is at most ``budget``
    bytes (``partition_bytes(e)`` is that size), at least ``start + 1`` so a single large message
    never stalls a partition.

    Each size look-up is a ``ComputeMessageStats`` call, and a plain bisection over a large
    backlog took ~17 of them per partition for every micro-batch. Messages of a topic are mostly
    of similar size, so the next probe is where the budget ends at the mean message size of the
    last range measured: about three look-ups find the end. After ``_GUESSED_PROBES`` guesses
    (sizes that vary wildly) the search bisects, so it stays O(log n) look-ups."""
    if end <= start + 1:
        return end
    size = partition_bytes(end)
    if size <= budget:
        return end
    lo, hi = start + 1, end - 1  # lo always fits (by definition), hi + 1 does not
    probed_end, probed_size = end, size
    guesses = 0
    while lo < hi:
        if guesses < _GUESSED_PROBES:
            guesses += 1
            probe = start + (probed_end - start) * budget // max(probed_size, 1)
            probe = min(max(probe, lo + 1), hi)
        else:
            probe = (lo + hi + 1) // 2
        probed_end, probed_size = probe, partition_bytes(probe)
        if probed_size <= budget:
            lo = probe
        else:
            hi = probe - 1
    return lo


def offsets_to_json(offsets: Mapping[int, int]) -> dict[str, int]:
    """Canonical form ``{"0": 12, "1": 7}`` (numeric partition order): Spark compares serialised
    offsets to decide whether a batch has new data, so equal offsets must serialise equally."""
    return {str(p): int(offsets[p]) for p in sorted(offsets)}


def offsets_from_json(offsets: Mapping[str, Any] | str | None) -> dict[int, int]:
    if isinstance(offsets, str):
        offsets = json.loads(offsets) if offsets.strip() else {}
    return {int(p): int(o) for p, o in (offsets or {}).items()}
