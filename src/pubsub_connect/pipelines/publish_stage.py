"""The publish stage's frame shared by the sink connectors: ``outbox/<name>`` → a Google service.

Why shared: the Cloud Pub/Sub sink and the Lite sink publish the same way — each micro-batch of
the outbox is published by executor tasks, the driver only collects how many messages were
accepted, and a batch (so the checkpoint) commits only when every message was: at-least-once,
no loss. They differ only in the client and in how rows are spread over tasks, which each
connector passes in as its ``publish_batch`` function.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.tables import TableRef
from pubsub_connect.model.error_text import error_line
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

STAGE = "publish"


def start_publishing(ctx: PipelineContext, config: ConnectorConfig, outbox: TableRef, target: str,
                     publish_batch: Callable[[DataFrame], int]) -> StreamingQuery:
    """Run ``publish_batch`` (rows → messages accepted) on every micro-batch of ``outbox``; a
    failure names the batch and ``target`` (the topic path) and fails the query."""

    def process(batch: DataFrame, batch_id: int) -> None:
        try:
            published = publish_batch(batch)
        except Exception as exc:
            raise ConnectorError(f"publish of batch {batch_id} to {target} failed: {error_line(exc)}") from exc
        log.info("%s publish batch %d: %d messages", config.name, batch_id, published)

    return ctx.start_batches(ctx.read_table_stream(outbox), config, STAGE, process)
