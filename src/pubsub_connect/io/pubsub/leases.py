"""Acknowledging pulled messages and keeping them leased until their batch is committed.

Acks go out as synchronous Acknowledge / ModifyAckDeadline RPCs, so the caller knows the
outcome when the call returns. IDs the service no longer accepts (``INVALID_ACK_ID`` on
exactly-once subscriptions, an expired lease) are *reported* in :class:`AckResult`, not raised:
the message was committed, its redelivery gives a duplicate ``message_id``, and the convert
stage drops it. :class:`LeaseExtender` keeps synchronously pulled messages leased while the
pull stage stages and commits them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pubsub_connect.io.pubsub.errors import PubSubIOError
from pubsub_connect.model.error_text import one_line

log = logging.getLogger(__name__)

#: Pub/Sub rejects Acknowledge/ModifyAckDeadline requests above 512 KB. Ack IDs are a few
#: hundred bytes on the real service, so the Python client sends 1000 per request. We do the
#: same and never exceed 2500 (the documented hard maximum).
ACK_IDS_PER_REQUEST = 1000
MAX_ACK_IDS_PER_REQUEST = 2500
#: Ack deadlines the service accepts (seconds).
MIN_ACK_DEADLINE_S = 10
MAX_ACK_DEADLINE_S = 600


class AckError(PubSubIOError):
    """Acknowledge / ModifyAckDeadline failed for a reason other than expired ack IDs."""


@dataclass(frozen=True)
class AckResult:
    """Outcome of acking/modacking a set of ack IDs.

    ``invalid`` lists IDs Pub/Sub no longer accepts (exactly-once subscriptions report them as
    ``PERMANENT_FAILURE_INVALID_ACK_ID``): their lease had expired or they were acked already.
    For an ack after the Delta commit this is harmless. The message is redelivered and the
    convert stage drops the duplicate ``message_id``. For a deadline extension it means the
    lease was lost.
    """

    requested: int
    invalid: tuple[str, ...] = ()

    @property
    def succeeded(self) -> int:
        return self.requested - len(self.invalid)


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _ack_id_failures(exc: BaseException) -> dict[str, str] | None:
    """Per-ack-ID failures from an exactly-once error (ErrorInfo ``EXACTLY_ONCE_ACKID_FAILURE``
    with metadata ``{ack_id: PERMANENT_FAILURE_… | TRANSIENT_FAILURE_…}``), or ``None``."""
    for detail in getattr(exc, "details", None) or ():
        metadata = getattr(detail, "metadata", None)
        if metadata and getattr(detail, "reason", "") == "EXACTLY_ONCE_ACKID_FAILURE":
            return dict(metadata)
    return None


def _ack_rpc(call: Callable[[Sequence[str]], Any], ack_ids: Sequence[str], what: str, subscription_path: str,
             chunk_size: int, attempts: int = 5) -> AckResult:
    """Run an ack-type RPC over ``ack_ids`` in chunks, sorting out exactly-once failures.

    Per Pub/Sub semantics, IDs not named in an exactly-once error *succeeded*. IDs with
    ``TRANSIENT_FAILURE_*`` are retried, ``PERMANENT_FAILURE_*`` are reported as invalid.
    Transient RPC errors (UNAVAILABLE…) are retried by the client's default retry.
    """
    from google.api_core import exceptions as gexc

    if not 0 < chunk_size <= MAX_ACK_IDS_PER_REQUEST:
        raise ValueError(f"chunk_size must be 1..{MAX_ACK_IDS_PER_REQUEST}, got {chunk_size}")
    ids = list(dict.fromkeys(ack_ids))  # a duplicate ID in one request is an error on the service
    invalid: list[str] = []
    for chunk in _chunks(ids, chunk_size):
        pending: Sequence[str] = chunk
        for attempt in range(attempts):
            try:
                call(pending)
                break
            except gexc.GoogleAPICallError as exc:
                failures = _ack_id_failures(exc)
                if failures is None:
                    raise AckError(f"{what} on {subscription_path} failed for {len(pending)} ack ID(s): "
                                   f"{one_line(exc)}") from exc
                invalid.extend(i for i, reason in failures.items() if not reason.startswith("TRANSIENT_"))
                pending = [i for i, reason in failures.items() if reason.startswith("TRANSIENT_")]
                if not pending:
                    break
                time.sleep(min(2.0, 0.2 * 2**attempt))
        else:
            raise AckError(f"{what} on {subscription_path}: {len(pending)} ack ID(s) still failing "
                           f"transiently after {attempts} attempts")
    return AckResult(requested=len(ids), invalid=tuple(invalid))


def ack(subscriber: Any, subscription_path: str, ack_ids: Sequence[str],
        chunk_size: int = ACK_IDS_PER_REQUEST) -> AckResult:
    """Acknowledge ``ack_ids`` (call this only after the Delta commit holding the messages)."""
    return _ack_rpc(
        lambda ids: subscriber.acknowledge(request={"subscription": subscription_path, "ack_ids": ids}),
        ack_ids, "acknowledge", subscription_path, chunk_size)


def modify_ack_deadline(subscriber: Any, subscription_path: str, ack_ids: Sequence[str], seconds: int,
                        chunk_size: int = ACK_IDS_PER_REQUEST) -> AckResult:
    """Set the ack deadline of ``ack_ids`` to ``seconds`` from now (0 = nack: redeliver now)."""
    if not (seconds == 0 or 0 < seconds <= MAX_ACK_DEADLINE_S):
        raise ValueError(f"ack deadline must be 0..{MAX_ACK_DEADLINE_S} s, got {seconds}")
    return _ack_rpc(
        lambda ids: subscriber.modify_ack_deadline(
            request={"subscription": subscription_path, "ack_ids": ids, "ack_deadline_seconds": seconds}),
        ack_ids, "modifyAckDeadline", subscription_path, chunk_size)


def nack(subscriber: Any, subscription_path: str, ack_ids: Sequence[str],
         chunk_size: int = ACK_IDS_PER_REQUEST) -> AckResult:
    """Give messages back for immediate redelivery (e.g. a batch that will not be committed)."""
    return modify_ack_deadline(subscriber, subscription_path, ack_ids, 0, chunk_size)


class LeaseExtender:
    """Keeps synchronously pulled messages leased while their batch is staged and committed.

    A background thread sets the deadline of every held ack ID to ``deadline_s`` right away
    and then every ``deadline_s / 3`` seconds, until :meth:`stop` (or until ``max_total_s``,
    so a wedged task cannot hold messages for ever). IDs whose lease turned out lost
    (``invalid``) are dropped from the set and recorded in :attr:`lost`.

    Usage in the pull stage::

        msgs = pull_batch(sub, path, n)
        with LeaseExtender(sub, path, [m.ack_id for m in msgs]):
            write_and_commit(msgs)          # may take longer than the subscription's deadline
        ack(sub, path, [m.ack_id for m in msgs])
    """

    def __init__(self, subscriber: Any, subscription_path: str, ack_ids: Iterable[str], deadline_s: int = 60,
                 max_total_s: float = 3600.0):
        if not MIN_ACK_DEADLINE_S <= deadline_s <= MAX_ACK_DEADLINE_S:
            raise ValueError(f"deadline_s must be {MIN_ACK_DEADLINE_S}..{MAX_ACK_DEADLINE_S}, "
                             f"got {deadline_s}")
        self._subscriber = subscriber
        self._path = subscription_path
        self._ids = list(dict.fromkeys(ack_ids))
        self._deadline_s = deadline_s
        self._max_total_s = max_total_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost: list[str] = []
        self.extensions = 0
        self.error: BaseException | None = None

    def start(self) -> LeaseExtender:
        if self._ids:
            self._extend()  # first extension inline: the original deadline may be close already
            self._thread = threading.Thread(target=self._run, name="pubsub-lease-extender", daemon=True)
            self._thread.start()
        return self

    def _extend(self) -> None:
        try:
            result = modify_ack_deadline(self._subscriber, self._path, self._ids, self._deadline_s)
        except Exception as exc:  # keep trying; the next round may succeed before the deadline
            self.error = exc
            log.warning("extending %d lease(s) on %s failed: %s", len(self._ids), self._path, one_line(exc))
            return
        self.extensions += 1
        if result.invalid:
            gone = set(result.invalid)
            self.lost.extend(result.invalid)
            self._ids = [i for i in self._ids if i not in gone]

    def _run(self) -> None:
        started = time.monotonic()
        interval = self._deadline_s / 3.0
        while not self._stop.wait(interval):
            if not self._ids or time.monotonic() - started > self._max_total_s:
                return
            self._extend()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> LeaseExtender:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
