"""Records Kafka refuses for good: which produce errors no retry can fix, and how a micro-batch's
refused records are written down in its transaction marker.

Why a class of its own: a produce error is either about the cluster (a broker down, a leader
moving, the producer fenced: the batch fails and its stage restarts from its checkpoint) or about
one record (a timestamp the topic does not accept, a record larger than the topic or the producer
allows, a record without a key on a compacted topic). Retrying the second kind sends the same
bytes and gets the same answer, so a connector that retries them is stuck; the produce stage
dead-letters such records instead (``errors.tolerance=all``) or stops naming the first
(``none``). Told apart by librdkafka's error code, never by its wording, and only when librdkafka
says the error is neither retriable nor fatal.

What librdkafka does with them inside a transaction (measured with librdkafka 2.16 against
Apache Kafka 4.3's broker, whose ``log.message.timestamp.after.max.ms`` is one hour by default):

- a record larger than the producer's ``message.max.bytes``: ``produce()`` raises
  ``MSG_SIZE_TOO_LARGE`` at once; nothing was sent, the transaction stays healthy;
- the broker's refusals (``INVALID_TIMESTAMP``, ``MSG_SIZE_TOO_LARGE`` over the topic's
  ``max.message.bytes``, ``INVALID_RECORD``): every record of the refused *broker batch* (up to
  ``batch.size`` of one partition) gets the same error in its delivery report, the good ones
  with it, and the transaction must be aborted. A producer that aborted such a transaction fails
  its next one too (``OUT_OF_ORDER_SEQUENCE_NUMBER``, "skipped sequence numbers"); a new producer
  for the same ``transactional.id`` (fencing the old one, ~0.1 s) does not.

So which record of a refused broker batch is the bad one is found by writing the suspects again
on their own (:mod:`pubsub_connect.io.kafka.transactions`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RejectKind:
    """What a record-level refusal means to a user: the exception Kafka's Java producer reports
    it with (what Kafka Connect users know it by) and what to look at."""

    java_class: str
    meaning: str


#: librdkafka error codes (``KafkaError.name()``) that refuse one record for good.
RECORD_REJECTS: Mapping[str, RejectKind] = {
    "INVALID_TIMESTAMP": RejectKind(
        "InvalidTimestampException",
        "the record's timestamp is further from the broker's clock than the topic accepts "
        "(message.timestamp.after.max.ms, message.timestamp.before.max.ms)"),
    "MSG_SIZE_TOO_LARGE": RejectKind(
        "RecordTooLargeException",
        "the record is larger than the topic's max.message.bytes or the producer's message.max.bytes"),
    "RECORD_LIST_TOO_LARGE": RejectKind(
        "RecordBatchTooLargeException", "the record is larger than the topic's segment.bytes"),
    "INVALID_RECORD": RejectKind(
        "InvalidRecordException",
        "the broker refused the record (a record without a key on a compacted topic, for one)"),
}


def is_record_reject(error: Any) -> bool:
    """Whether a librdkafka ``KafkaError`` refuses its record for good (see the module doc)."""
    return (error is not None and error.name() in RECORD_REJECTS and not error.retriable()
            and not error.fatal())


def reject_reason(code: str) -> str:
    """The one-line reason of a refused record, from its error code alone (a replayed batch
    knows only the code from its marker, and must tell the same reason)."""
    return f"Kafka refused the record ({code}): {RECORD_REJECTS[code].meaning}"


def encode_rejects(rejected: Mapping[int, str]) -> dict[str, list[list[int]]]:
    """``{row index: code}`` as a marker's compact form: per code, runs of consecutive indices
    ``[first, last]`` (a batch of refused records costs a few bytes, not one entry each)."""
    out: dict[str, list[list[int]]] = {}
    for index in sorted(rejected):
        runs = out.setdefault(rejected[index], [])
        if runs and runs[-1][1] == index - 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return out


def decode_rejects(encoded: Mapping[str, Iterable[Iterable[int]]] | None) -> dict[int, str]:
    """The inverse of :func:`encode_rejects` (None: a marker without rejects)."""
    out: dict[int, str] = {}
    for code, runs in (encoded or {}).items():
        for first, last in runs:
            out.update(dict.fromkeys(range(int(first), int(last) + 1), code))
    return out
