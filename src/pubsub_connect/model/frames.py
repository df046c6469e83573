"""DataFrame helpers the model functions share.

Why ``map_in_arrow``: the model's Arrow mappers (``mapInArrow``) also run in Lakeflow
Declarative Pipelines, whose query functions build their plans through Spark Connect and may not
ask the server anything. Spark Connect's ``mapInArrow`` asks the server for the input's column
names (an analysis), unless the DataFrame already knows its schema; every caller here has just
selected a known set of columns, so it can say what they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType


def schema_of(columns: StructType, names: tuple[str, ...] | list[str]) -> StructType:
    """The fields ``names`` of ``columns``, in that order: the schema of ``df.select(*names)``."""
    from pyspark.sql.types import StructType

    return StructType([columns[name] for name in names])


def utf8_bytes(text: Column) -> Column:
    """The UTF-8 bytes of a Spark string that is valid UTF-8 (text Spark wrote itself, from valid
    strings, or passed through ``make_valid_utf8``).

    Why a cast rather than ``encode(text, 'UTF-8')``: a Spark string is already its UTF-8 bytes, so
    the cast copies them, where ``encode`` decodes them into a Java string and encodes that again,
    about 1.6 times the CPU per 1 KB value. The two differ only on malformed bytes (which ``encode``
    replaces with U+FFFD), so the argument must not hold any."""
    return text.cast("binary")


def map_in_arrow(frame: DataFrame, function: Callable[[Iterator[pa.RecordBatch]], Iterator[Any]],
                 schema: StructType, input_schema: StructType) -> DataFrame:
    """``frame.mapInArrow(function, schema)`` where the caller knows ``frame``'s schema
    (``input_schema``): a Spark Connect DataFrame is told it, so that no analysis is needed."""
    if type(frame).__module__.startswith("pyspark.sql.connect") and getattr(frame, "_cached_schema", None) is None:
        frame._cached_schema = input_schema  # type: ignore[attr-defined]
    return frame.mapInArrow(function, schema)
