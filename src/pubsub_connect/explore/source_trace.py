"""A message's journey through a source connector: ``pubsub-connect trace NAME --message-id ID``
(Cloud Pub/Sub) or ``--partition P --offset O`` (Lite), from its tables and the produce checkpoint.

Why: the question a source's operator asks is the sink's turned round — "did message X reach
Kafka, and as what?" — and the tables answer it the same way (:mod:`.trace`). Bronze holds every
delivery of the message (a Cloud Pub/Sub redelivery lands twice); the outbox the Kafka record the
convert stage made of it (key, value, headers, partition, timestamp), or the dead letters why there
is none; the produce stage's checkpoint which of its micro-batches read the outbox version the
record was committed in, and when that batch's Kafka transaction committed. The record's Kafka
offset is not recorded: the produce stage's writer would have to hand every offset back to the
driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import CPS_SOURCE, LITE_SOURCE
from pubsub_connect.explore.trace import FROM_OUTBOX, Journey, batch_that_read, dead_letters, row_and_version
from pubsub_connect.io.tables import BRONZE, DLQ, OUTBOX, TableRef, TableStore
from pubsub_connect.pipelines.maintenance import consumed_below
from pubsub_connect.pipelines.modes import FUSED, stored_mode

if TYPE_CHECKING:
    from pyspark.sql import Column

def cps_message(message_id: str) -> tuple[str, Column, Column]:
    """A Cloud Pub/Sub message: its name, and its rows in bronze and in the outbox and dead letters."""
    where = F.col("message_id") == message_id
    return f"message {message_id}", where, where


def lite_message(partition: int, offset: int) -> tuple[str, Column, Column]:
    """A Lite message: its name, its bronze row (``partition``, ``offset``) and its rows in the
    outbox and dead letters (``lite_partition``, ``lite_offset``)."""
    return (f"Lite partition {partition}@{offset}",
            (F.col("partition") == partition) & (F.col("offset") == offset),
            (F.col("lite_partition") == partition) & (F.col("lite_offset") == offset))


def parse_message(kind: str, text: str) -> tuple[str, Column, Column]:
    """The explore notebook's ``trace`` widget for a source: a Cloud Pub/Sub message id, or a Lite
    message as ``partition@offset``."""
    if kind == CPS_SOURCE:
        return cps_message(text.strip())
    partition, _, offset = text.strip().partition("@")
    if kind != LITE_SOURCE or not partition.isdigit() or not offset.isdigit():
        raise ConfigError(f"trace {text!r}: name a Lite source's message as partition@offset, e.g. 0@42")
    return lite_message(int(partition), int(offset))


def trace_message(store: TableStore, name: str, message: tuple[str, Column, Column]) -> Journey:
    """The journey of ``message`` (:func:`cps_message`, :func:`lite_message`) through source
    connector ``name``. Raises :class:`ConfigError` (one line) when none of its tables holds it."""
    label, in_bronze, in_outbox = message
    journey = Journey(label, sent="produced", sent_as="kafka record")
    tables = {kind: TableRef(kind, name) for kind in (BRONZE, OUTBOX, DLQ)}
    journey.bronze, bronze_version = row_and_version(store, tables[BRONZE], in_bronze)
    if journey.bronze is not None:
        deliveries = store.read(tables[BRONZE]).filter(in_bronze).count()
        if deliveries > 1:  # a redelivery (a crash between bronze's commit and the ack) lands again
            journey.bronze["deliveries in bronze"] = deliveries
    journey.dead_letters = dead_letters(store, tables[DLQ], in_outbox)
    if journey.bronze is None and not journey.dead_letters:
        raise ConfigError(f"{name}: no {label} in its bronze table or dead letters")
    record, version = row_and_version(store, tables[OUTBOX], in_outbox)
    if record is not None:  # what the produce stage wrote
        journey.message = {k: v for k, v in record.items() if k not in ("lite_partition", "lite_offset")}
        journey.message_from = FROM_OUTBOX
        journey.published = batch_that_read(store, name, "produce", version)
    elif journey.dead_letters or journey.bronze is None:
        pass  # dead-lettered (by convert, or refused by Kafka): nothing was produced
    elif stored_mode(store, name) == FUSED:
        journey.published = "by the fused mode, in the window that landed it in bronze (it keeps no outbox)"
    elif bronze_version is not None and consumed_below(store.checkpoint(name, "convert")) <= bronze_version:
        journey.published = "not yet: waiting in bronze for the convert stage"
    else:  # converted, and its outbox row deleted: retention deletes only what the produce stage read
        journey.published = "by the produce stage; its outbox row has expired since (outbox.retention.ms)"
    return journey
