"""Noticing a Cloud Pub/Sub pull that goes round in circles.

Pub/Sub redelivers a message whose lease expired before its ack, and the pull stage acks only
after the Delta commit. When leases keep expiring before batches commit, the pull receives the
same messages again and again: bronze grows, Kafka gets nothing new, and nothing fails. That is
the one way this stage can be busy without making progress, so :class:`RedeliveryWatch` counts,
per batch, the messages this puller already committed, and says so in one line when most of a
window of batches were such repeats. The line names the figures and what to look at; the puller
goes on (the leases may recover), and says it again only after a healthy window.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

#: Message ids remembered as committed (about 100 bytes each): enough to recognise the
#: redeliveries of a backlog many flow-control windows deep.
REMEMBERED_IDS = 200_000
#: Batches judged together, and the share of repeats in them that means "no progress".
WINDOW_BATCHES = 10
NO_PROGRESS_SHARE = 0.5


class RecentIds:
    """The newest ``remembered`` ids added, oldest forgotten first: a bounded memory of message
    ids (about 100 bytes each) for recognising redeliveries."""

    def __init__(self, remembered: int = REMEMBERED_IDS):
        self._order: deque[str] = deque()
        self._ids: set[str] = set()
        self._remembered = remembered

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._ids

    def add(self, message_id: str) -> bool:
        """Remember ``message_id``; returns False when it was remembered already."""
        if message_id in self._ids:
            return False
        self._ids.add(message_id)
        self._order.append(message_id)
        if len(self._order) > self._remembered:
            self._ids.discard(self._order.popleft())
        return True


@dataclass(frozen=True)
class BatchDeliveries:
    """One committed pull batch: how many messages it held and how many were repeats."""

    delivered: int
    repeated: int


class RedeliveryWatch:
    """Counts repeats of committed message ids per batch and judges the last
    :data:`WINDOW_BATCHES` batches together."""

    def __init__(self, remembered: int = REMEMBERED_IDS, window: int = WINDOW_BATCHES,
                 no_progress_share: float = NO_PROGRESS_SHARE):
        self._committed = RecentIds(remembered)
        self._window: deque[BatchDeliveries] = deque(maxlen=window)
        self._share = no_progress_share
        self._reported = False

    def committed(self, message_ids: Iterable[str]) -> BatchDeliveries:
        """Record a committed batch's message ids; returns its counts."""
        delivered = repeated = 0
        for message_id in message_ids:
            delivered += 1
            if not self._committed.add(message_id):
                repeated += 1
        batch = BatchDeliveries(delivered, repeated)
        self._window.append(batch)
        return batch

    def verdict(self, subscription: str) -> str | None:
        """The one line to print when the window shows no progress (once per streak), else None."""
        if len(self._window) < (self._window.maxlen or 0):
            return None
        delivered = sum(b.delivered for b in self._window)
        repeated = sum(b.repeated for b in self._window)
        stuck = delivered > 0 and repeated >= self._share * delivered
        if not stuck:
            self._reported = False
            return None
        if self._reported:
            return None
        self._reported = True
        return (f"not making progress: {repeated:,} of the last {delivered:,} messages pulled from "
                f"{subscription} were redeliveries of messages already committed to bronze (their "
                f"leases expired before their batch was committed and acked); a batch's commit takes "
                f"longer than the ack deadline allows: check the load, or lower "
                f"cps.streamingPull.flowControlMessages / pipeline.max.records.per.batch")
