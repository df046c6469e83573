"""The Kafka sink's options and input columns, for both engines: Spark's native ``kafka`` sink and the
fallback's Python sink (:mod:`pubsub_connect.io.kafka.python_sink`).

Why a module of its own: the pipelines validate a write the same way whichever sink runs it, and
that validation must import on every supported Spark, while the fallback's sink needs the Python
streaming writer of a newer PySpark than the oldest the product supports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from pubsub_connect.io.kafka.options import (
    SINK_FORBIDDEN,
    KafkaOptionsError,
    client_config,
    lower_keys,
    require_bootstrap_servers,
)

#: librdkafka defaults that differ from what Spark's (Java) sink does.
PRODUCER_DEFAULTS: dict[str, str] = {
    "enable.idempotence": "true",
    "partitioner": "murmur2_random",  # the Java client's hash for keyed records
}


@dataclass(frozen=True)
class KafkaWriteOptions:
    """Sink options (``kafka.*``, ``topic``) and the validated input columns."""

    client: dict[str, str]
    topic: str | None
    columns: tuple[str, ...] = field(default=())

    @classmethod
    def parse(cls, options: Mapping[str, Any], schema: StructType | None = None, *,
              python_client: bool = True) -> KafkaWriteOptions:
        opts = lower_keys(options)
        if python_client:
            client = {**PRODUCER_DEFAULTS, **client_config(opts, SINK_FORBIDDEN)}
        else:
            require_bootstrap_servers(opts)
            client = {}
        topic = opts.get("topic") or None
        columns: tuple[str, ...] = ()
        if schema is not None:
            columns = _validate_schema(schema, topic)
        return cls(client=client, topic=topic, columns=columns)


def _validate_schema(schema: StructType, topic: str | None) -> tuple[str, ...]:
    """The checks of Spark's Kafka writer, with its messages' meaning; returns the used columns."""
    fields = {f.name.lower(): f for f in schema.fields}

    def check(name: str, allowed: tuple[DataType, ...], what: str) -> None:
        f = fields.get(name)
        if f is not None and f.dataType not in allowed:
            raise KafkaOptionsError(
                f"Kafka sink: column '{name}' must be {what}, got {f.dataType.simpleString()}"
            )

    if "value" not in fields:
        raise KafkaOptionsError("Kafka sink: required column 'value' not found")
    if topic is None and "topic" not in fields:
        raise KafkaOptionsError("Kafka sink: no 'topic' column and no 'topic' option; set one of them")
    check("value", (StringType(), BinaryType()), "string or binary")
    check("key", (StringType(), BinaryType()), "string or binary")
    check("topic", (StringType(),), "string")
    check("partition", (IntegerType(),), "int")
    if "headers" in fields:
        header_type = fields["headers"].dataType
        ok = (
            isinstance(header_type, ArrayType)
            and isinstance(header_type.elementType, StructType)
            and [(f.name, f.dataType) for f in header_type.elementType.fields]
            == [("key", StringType()), ("value", BinaryType())]
        )
        if not ok:
            raise KafkaOptionsError(
                "Kafka sink: column 'headers' must be array<struct<key:string,value:binary>>, "
                f"got {header_type.simpleString()}"
            )
    return tuple(n for n in ("topic", "key", "value", "partition", "headers") if n in fields)
