"""Pub/Sub Lite as a Spark streaming source (Python data source ``pubsub_connect_lite``).

Why a Spark source and not a pull loop like the Cloud Pub/Sub source: Lite partitions are
replayable logs with dense offsets, exactly like Kafka. So the pull stage gets what the Kafka
ingest has: a micro-batch is fully described by per-partition offset ranges that Spark writes
to the checkpoint *before* reading, and a replay after a crash re-reads exactly the same
messages. Together with the idempotent bronze append this gives exactly-once into bronze
without any dedupe.

Offsets are ``{"<partition>": <next offset>}`` (numerically sorted). Planning (driver side):

* the first batch of a new checkpoint starts at the subscription's committed cursor, raised to
  the ``startingOffsets`` floor the pipeline passes (the end of what bronze already holds, so a
  lost checkpoint does not duplicate) and to the oldest retained message;
* each batch ends at the partition heads (frozen once under ``availableNow``); where Spark offers
  Python sources admission control (4.2+, :mod:`pubsub_connect.io.pubsublite.admission_control`)
  it is capped per partition by ``pubsublite.partition_flow_control.messages`` and ``.bytes`` — a
  batch's messages are outstanding until the batch is durable, which is what those keys bound in
  Google's connector — and overall by ``maxMessagesPerTrigger`` (shared like Spark's Kafka
  ``maxOffsetsPerTrigger``); on Spark 4.0 and 4.1 a batch takes everything up to the heads;
* a partition added to the topic joins at its start position (see :class:`LiteStreamReader` for
  how each API does it).

Tasks read their range with :func:`pubsub_connect.io.pubsublite.subscriber.read_range`. Nothing is
committed to Lite here: the pull stage commits cursors after the batch is in bronze (see
:mod:`pubsub_connect.pipelines.lite_source`), where the batch is known to be durable;
:meth:`LiteStreamReader.commit` is a no-op because Spark calls it on its own schedule (when it
plans a later batch), which would leave the last batch's cursors uncommitted in ``--once`` runs.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from pubsub_connect.io.pubsublite.read_options import LiteReadOptions
from pubsub_connect.io.pubsublite.stream_reader import LITE_SOURCE_SCHEMA, LiteStreamReader
from pubsub_connect.io.spark_versions import python_stream_admission_control

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SOURCE_NAME = "pubsub_connect_lite"


class LiteDataSource(DataSource):
    """``spark.readStream.format("pubsub_connect_lite")`` (streaming only)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return LITE_SOURCE_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = LiteReadOptions.parse(self.options)
        if python_stream_admission_control():
            from pubsub_connect.io.pubsublite.admission_control import AdmissionControlledLiteStreamReader

            return AdmissionControlledLiteStreamReader(opts)
        return LiteStreamReader(opts)


_REGISTERED: weakref.WeakSet[Any] = weakref.WeakSet()


def read_lite(spark: SparkSession, opts: LiteReadOptions) -> DataFrame:
    """A streaming DataFrame of Lite messages (``LITE_SOURCE_SCHEMA``) for ``opts``."""
    if spark not in _REGISTERED:
        spark.dataSource.register(LiteDataSource)
        _REGISTERED.add(spark)
    return spark.readStream.format(SOURCE_NAME).options(**opts.to_options()).load()


__all__ = ["LiteDataSource", "read_lite"]
