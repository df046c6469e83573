"""The Cloud Pub/Sub source's pulling: windows of messages from a subscription, their leases kept
while the caller writes them, acked only after that.

Pub/Sub cannot replay a range, so pulling is not a Spark streaming source: ``tasks.max`` puller
threads (:class:`PullLoop`) each pull a window, keep its leases extended while it is written, and
only then ack. The staged ``pull`` stage writes a window to bronze (:class:`Puller`); the fused
mode writes it to bronze and Kafka at once (:mod:`pubsub_connect.pipelines.fused_source`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.pubsub.errors import PubSubIOError
from pubsub_connect.io.pubsub.leases import LeaseExtender, ack, nack
from pubsub_connect.io.pubsub.subscriber import PulledMessage, StreamingPuller, pull_batch, subscriber_client
from pubsub_connect.io.tables import BRONZE, TableRef
from pubsub_connect.model.cps_source.reference import check_value_converter
from pubsub_connect.model.cps_source.settings import CpsSourceSettings, UnsupportedConverterError
from pubsub_connect.model.schemas import PUBSUB_BRONZE
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext, query_name
from pubsub_connect.pipelines.pubsub_settings import cps_subscriber_config
from pubsub_connect.pipelines.redeliveries import BatchDeliveries, RedeliveryWatch
from pubsub_connect.pipelines.runner.query import SupervisedQuery

log = logging.getLogger(__name__)

#: How long one pull batch may collect messages before it is written (continuous mode).
BATCH_WINDOW_S = 1.0
#: In ``--once`` mode a pull that brings nothing for this long means the backlog is drained.
DRAINED_AFTER_S = 3.0
#: Lease (ack deadline) kept on messages while their batch is written, renewed every third of it.
#: Short enough that messages of a crashed puller come back soon, long enough to ride out a
#: slow commit between renewals.
LEASE_S = 20


def ensure_bronze(ctx: PipelineContext, config: ConnectorConfig) -> TableRef:
    """The pulled bronze table, created by whichever stage starts first. Its puller appends a
    small batch per flow-control window: a log checkpoint every 10 commits would stall it every
    tenth append, hence the store's ``delta.checkpointInterval`` of 100 (``STAGE_TABLE_PROPERTIES``)."""
    bronze = TableRef(BRONZE, config.name)
    ctx.store.ensure(bronze, PUBSUB_BRONZE)
    return bronze


def source_settings(config: ConnectorConfig) -> CpsSourceSettings:
    return CpsSourceSettings(
        kafka_key_attribute=config.get("kafka.key.attribute"),
        kafka_timestamp_attribute=config.get("kafka.timestamp.attribute"),
        make_ordering_key_attribute=bool(config.get("cps.makeOrderingKeyAttribute")),
        kafka_record_headers=bool(config.get("kafka.record.headers")),
        partition_scheme=str(config.get("kafka.partition.scheme")),
        partition_count=int(config.get("kafka.partition.count")),
        value_converter=str(config.get("value.converter")),
        value_schemas_enable=bool(config.get("value.converter.schemas.enable")),
        key_converter=str(config.get("key.converter")),
        key_schemas_enable=bool(config.get("key.converter.schemas.enable")),
        kafka_topic=str(config.get("kafka.topic") or ""),
        key_subject_strategy=str(config.get("key.converter.key.subject.name.strategy")),
        value_subject_strategy=str(config.get("value.converter.value.subject.name.strategy")),
        message_body_format=str(config.get("messageBodyFormat")),
    )


def check_settings(config: ConnectorConfig) -> CpsSourceSettings:
    """Start-up check: the converters must be able to write this connector's keys and values."""
    settings = source_settings(config)
    try:
        check_value_converter(settings)
    except UnsupportedConverterError as exc:
        raise ConfigError(f"{config.source}: {exc}") from None
    return settings


def messages_to_arrow(messages: list[PulledMessage], subscription: str) -> pa.Table:
    """Pulled messages as a bronze Arrow table (column order and types of ``PUBSUB_BRONZE``)."""
    from pubsub_connect.model.schemas import to_arrow

    now = datetime.now(timezone.utc)
    schema = to_arrow(PUBSUB_BRONZE)
    return pa.Table.from_pydict({
        "message_id": [m.message_id for m in messages],
        "data": [m.data for m in messages],
        "attributes": [list(m.attributes.items()) for m in messages],
        "ordering_key": [m.ordering_key for m in messages],
        "publish_time": [m.publish_time for m in messages],
        "delivery_attempt": [m.delivery_attempt for m in messages],
        "subscription": [subscription] * len(messages),
        "ingest_time": [now] * len(messages),
    }, schema=schema)


class Puller:
    """One puller (one of ``tasks.max``): pull → commit to bronze → ack, batch after batch."""

    #: The stage that names this puller's lines.
    stage = "pull"
    #: How long a window may go on after its first messages came (None: the whole window).
    linger_s: float | None = None

    def __init__(self, ctx: PipelineContext, config: ConnectorConfig):
        self.ctx = ctx
        self.config = config
        self.bronze = TableRef(BRONZE, config.name)
        self.sub_config = cps_subscriber_config(config)
        self.max_records = int(ctx.worker.get("pipeline.max.records.per.batch"))
        self.streaming = bool(config.get("cps.streamingPull.enabled"))
        self._subscriber: Any = None
        self._streamer: StreamingPuller | None = None
        self.redeliveries = RedeliveryWatch()


    def _collect(self, window_s: float) -> list[PulledMessage]:
        """The messages of one window: pulled for up to ``window_s``, and for at most
        :attr:`linger_s` after the first ones came (the fused mode's latency bound)."""
        linger_s = self.linger_s
        path = self.sub_config.subscription_path
        if self.streaming:
            if self._streamer is None:
                self._streamer = StreamingPuller(self.sub_config).start()
            return self._streamer.collect(self.max_records, window_s, idle_timeout=0.5, linger=linger_s)
        if self._subscriber is None:
            self._subscriber = subscriber_client(self.sub_config)
        per_request = int(self.config.get("cps.maxBatchSize"))
        out: list[PulledMessage] = []
        deadline = time.monotonic() + window_s
        while len(out) < self.max_records:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            got = pull_batch(self._subscriber, path, min(per_request, self.max_records - len(out)),
                                    timeout=max(remaining, 0.5) if not out else min(remaining, 1.0))
            if not got:
                break
            if not out and linger_s is not None:
                deadline = min(deadline, time.monotonic() + linger_s)
            out.extend(got)
        return out

    def _ack(self, messages: list[PulledMessage]) -> None:
        if self._streamer is not None:
            self._streamer.ack(messages)
        else:
            ack(self._subscriber, self.sub_config.subscription_path, [m.ack_id for m in messages])

    def _give_back(self, messages: list[PulledMessage]) -> None:
        """A window that failed hands its messages back for immediate redelivery, so the
        restarted stage gets them at once rather than after their leases lapse (a failure here
        only delays them: they come back either way)."""
        try:
            if self._streamer is not None:
                self._streamer.nack(messages)
            elif self._subscriber is not None:
                nack(self._subscriber, self.sub_config.subscription_path, [m.ack_id for m in messages])
        except PubSubIOError as exc:
            log.warning("%s: could not hand back %d message(s) of a failed window (%s); they come back when their "
                        "leases lapse", self.config.name, len(messages), exc)

    def run_batch(self, window_s: float) -> BatchDeliveries:
        """Pull one batch, commit it, ack it. Returns its counts (0 delivered: nothing came).

        When the pull stopped making progress (:class:`RedeliveryWatch`) it says so in one line:
        printed while the connector runs on (the leases may recover), raised under ``--once``,
        whose drain would otherwise never end."""
        messages = self._collect(window_s)
        if not messages:
            return BatchDeliveries(0, 0)
        table = messages_to_arrow(messages, self.sub_config.subscription_path)
        try:
            if self._streamer is None:
                with LeaseExtender(self._subscriber, self.sub_config.subscription_path,
                                   [m.ack_id for m in messages], deadline_s=LEASE_S):
                    self.write(table)
            else:  # the streaming client keeps extending leases of messages it holds
                self.write(table)
        except BaseException:
            self._give_back(messages)
            raise
        self._ack(messages)
        batch = self.redeliveries.committed(m.message_id for m in messages)
        verdict = self.redeliveries.verdict(self.sub_config.subscription_path)
        if verdict is not None:
            if self.ctx.once:
                raise ConnectorError(verdict)
            self.ctx.progress(f"[{self.config.name}.{self.stage}] {verdict}")
        return batch

    def write(self, table: pa.Table) -> None:
        """Commit a window's messages (a bronze Arrow table) before they are acked: the staged
        pull appends them to bronze."""
        self.ctx.store.append_rows(self.bronze, table, PUBSUB_BRONZE)

    def close(self) -> None:
        if self._streamer is not None:
            self._streamer.close()
            self._streamer = None


class PullLoop(SupervisedQuery):
    """The pull stage as a :class:`SupervisedQuery`, so the runner drives it like the Spark
    stages (progress lines, stop, failure): ``tasks.max`` threads, each running a :class:`Puller`
    batch after batch. The fused mode runs its own puller in it (``stage``, ``puller``,
    ``pullers``: :mod:`pubsub_connect.pipelines.fused_source`)."""

    def __init__(self, ctx: PipelineContext, config: ConnectorConfig, stage: str = "pull",
                 puller: Callable[[], Puller] | None = None, pullers: int | None = None):
        self.ctx = ctx
        self.config = config
        self._name = query_name(config, stage)
        self._new_puller = puller or (lambda: Puller(ctx, config))
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._batches = 0
        self._progress: list[dict[str, Any]] = []
        count = int(config.get("tasks.max")) if pullers is None else pullers
        self._threads = [threading.Thread(target=self._run, name=f"{self.name}-{i}", daemon=True)
                         for i in range(count)]

    def start(self) -> PullLoop:
        ensure_bronze(self.ctx, self.config)
        for thread in self._threads:
            thread.start()
        return self

    def _run(self) -> None:
        puller = self._new_puller()
        idle_since = time.monotonic()
        try:
            while not self._stop.is_set() and self._error is None:
                started = time.monotonic()
                batch = puller.run_batch(DRAINED_AFTER_S if self.ctx.once else BATCH_WINDOW_S)
                count = batch.delivered
                if count == 0:
                    if self.ctx.once and time.monotonic() - idle_since >= DRAINED_AFTER_S:
                        return
                    continue
                idle_since = time.monotonic()
                elapsed = max(time.monotonic() - started, 1e-6)
                with self._lock:
                    self._progress.append({"batchId": self._batches, "numInputRows": count,
                                           "numRedeliveredRows": batch.repeated,
                                           "processedRowsPerSecond": count / elapsed})
                    self._progress = self._progress[-100:]
                    self._batches += 1
        except BaseException as exc:  # surfaced through exception()/awaitTermination
            self._error = exc
        finally:
            puller.close()

    @property
    def name(self) -> str:
        return self._name

    @property
    def id(self) -> str:
        return self._name

    @property
    def isActive(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    @property
    def recentProgress(self) -> list[dict[str, Any]]:
        """The last 100 batches' progress, oldest first."""
        with self._lock:
            return list(self._progress)

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        """The newest batch's progress (the runner ends a restart streak on it)."""
        with self._lock:
            return self._progress[-1] if self._progress else None

    def awaitTermination(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if self._error is not None:
            raise self._error
        return not self.isActive

    def exception(self) -> BaseException | None:
        return self._error

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(120)
