"""The Cloud Pub/Sub source's keys and values as a Schema Registry converter writes them, in
Spark expressions: the batch side of :func:`~pubsub_connect.model.cps_source.reference.serialize_key`
and friends for ``io.confluent.connect.avro.AvroConverter`` and
``io.confluent.connect.json.JsonSchemaConverter`` (the same framing; the schema's text and the
datum in Avro's binary encoding, or as JSON: :mod:`pubsub_connect.model.jsonschema.writer`).

Why a job per micro-batch: a message with custom attributes (``kafka.record.headers=false``) is a
record with one field per attribute, so its schema, subject version and id depend on the names
it carries. The converter registers a schema the first time it writes it; here one small job
collects a batch's distinct field-name lists (and whether any record has a key), the driver
resolves the schemas it has not resolved yet, and the batch's rows are framed from a literal map
of header bytes. A schema the registry refuses (an incompatible new version; without
``auto.register.schemas`` one it does not have) or that Avro refuses (an attribute name that is
not an Avro name) makes its records dead letters with that line, as the converter fails them.
Once the key and the bytes value are resolved, a connector writing headers (or whose batches
carry no attributes) runs no job: the set of schemas it can write is then complete.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pubsub_connect.model.avro.writer import SchemaIds, avro_schema_text, schema_frame
from pubsub_connect.model.avro.written_columns import bytes_datum, optional_string_datum, string_data, string_datum
from pubsub_connect.model.connect import BYTES, OPTIONAL_STRING, DataError, Schema
from pubsub_connect.model.cps_source.settings import (
    AVRO_BODY,
    SCHEMA_ENCODING_ATTRIBUTE,
    SCHEMA_NAME_ATTRIBUTE,
    SCHEMA_REVISION_ATTRIBUTE,
    CpsSourceSettings,
    MessageSchemaError,
    MessageSchemas,
    message_schema_problem,
    struct_schema,
    written_definition,
)
from pubsub_connect.model.frames import utf8_bytes
from pubsub_connect.model.json_columns import jackson_base64, jackson_string
from pubsub_connect.model.jsonschema.writer import json_schema_text

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: The map key of the bytes value's schema (a field-name list is a JSON array).
_BYTES = ""


class RegistryColumns:
    """What the source's staged select needs for Avro keys and values; see the module docstring.

    Columns it adds to a batch (:meth:`annotate`), read by the expressions it builds:
    ``_key_header`` and ``_value_header`` (the 5 bytes framing a row's key and value),
    ``_schema_error_class`` and ``_schema_error`` (a row whose schema was refused)."""

    def __init__(self, settings: CpsSourceSettings, schema_ids: SchemaIds,
                 message_schemas: MessageSchemas | None = None) -> None:
        """``message_schemas``: with ``messageBodyFormat=avro``, the schema revisions messages name."""
        self._settings = settings
        self._schema_ids = schema_ids
        self._message_schemas = message_schemas
        self._datums = settings.message_body_format == AVRO_BODY
        if self._datums and message_schemas is None:
            raise ValueError("messageBodyFormat=avro needs the messages' schemas")
        #: Resolved schemas: field-name list (or ``_BYTES``) → header bytes; the key's header.
        self._values: dict[str, bytes] = {}
        self._key: bytes | None = None
        self._headers_only = settings.kafka_record_headers

    # -- per stage: the expressions -------------------------------------------------------------

    def signature(self, names: Column, needs_struct: Column, attributes: Column) -> Column:
        """``_sig``: the field names of a row's STRUCT value as JSON (null: a BYTES value); with
        ``messageBodyFormat=avro``, the schema, revision and encoding its attributes name."""
        from pyspark.sql import functions as F

        if self._datums:
            return F.to_json(F.array(*[F.try_element_at(attributes, F.lit(name)) for name in (
                SCHEMA_NAME_ATTRIBUTE, SCHEMA_REVISION_ATTRIBUTE, SCHEMA_ENCODING_ATTRIBUTE)]))
        return F.when(needs_struct, F.to_json(names))

    def key(self, key: Column) -> Column:
        """The framed key of a row with a key (null stays null)."""
        from pyspark.sql import functions as F

        datum = utf8_bytes(jackson_string(key)) if self._settings.json_schema("key") else optional_string_datum(key)
        return F.when(key.isNotNull(), F.concat(F.col("_key_header"), datum))

    def value(self, needs_struct: Column, data: Column, entries: Column, made: Column, ordering_key: Column,
              json_struct: Column | None = None) -> Column:
        """The framed value: a STRUCT's data, attribute values (``entries``, sorted by name) and
        ``orderingKey``; a BYTES value's data as it is (Confluent's Avro serializer writes top-level
        bytes without their length); with ``messageBodyFormat=avro`` the data, which is the datum.
        JSON Schema: ``json_struct`` is the STRUCT's JSON (the source's JsonConverter columns, as
        Jackson writes it), a BYTES value its base64 text."""
        from pyspark.sql import functions as F

        if self._datums:
            return F.concat(F.col("_value_header"), data)
        if self._settings.json_schema("value"):
            quoted = utf8_bytes(F.concat(F.lit('"'), jackson_base64(data), F.lit('"')))
            datum = F.when(needs_struct, json_struct).otherwise(quoted) if json_struct is not None else quoted
            return F.concat(F.col("_value_header"), datum)
        datum = F.when(
            needs_struct,
            F.concat(bytes_datum(data), string_data(entries["value"]),
                     F.when(made, string_datum(ordering_key)).otherwise(F.lit(b""))),
        ).otherwise(data)
        return F.concat(F.col("_value_header"), datum)

    # -- per batch: the schemas -------------------------------------------------------------------

    def annotate(self, staged: DataFrame, written: Column) -> DataFrame:
        """``staged`` with this batch's header and error columns; ``written`` marks the rows the
        converters write (no earlier dead-letter reason)."""
        from pyspark.sql import functions as F

        s = self._settings
        errors: dict[str, tuple[str, str]] = {}
        key_error: tuple[str, str] | None = None
        if self._needs_job():
            seen = staged.where(written).select(F.col("_sig"), F.col("_key").isNotNull().alias("_keyed")).distinct()
            rows = seen.collect()  # a handful of rows: distinct field-name lists
            # The key first, as Connect converts it: a record whose key is refused has no value
            # written, so nothing is registered for it.
            if s.registry_key and any(row["_keyed"] for row in rows):
                key_error = self._resolve_key()
            if s.registry_value:
                written_values = {row["_sig"] or _BYTES for row in rows if not (row["_keyed"] and key_error)}
                for sig in sorted(written_values):
                    problem = self._resolve_value(sig)
                    if problem is not None:
                        errors[sig] = problem
        key_header = F.lit(self._key).cast("binary") if self._key is not None else F.lit(None).cast("binary")
        lookup = F.coalesce(F.col("_sig"), F.lit(_BYTES))
        value_header = _literal_map(self._values, "binary", lookup)
        keyed = F.col("_key").isNotNull()
        value_class = _literal_map({sig: e[0] for sig, e in errors.items()}, "string", lookup)
        value_message = _literal_map({sig: e[1] for sig, e in errors.items()}, "string", lookup)
        if key_error is not None:
            error_class = F.when(keyed, F.lit(key_error[0])).otherwise(value_class)
            error_message = F.when(keyed, F.lit(key_error[1])).otherwise(value_message)
        else:
            error_class, error_message = value_class, value_message
        return staged.select(
            F.col("*"), key_header.alias("_key_header"), value_header.alias("_value_header"),
            error_class.alias("_schema_error_class"), error_message.alias("_schema_error"))

    def _needs_job(self) -> bool:
        s = self._settings
        if self._datums:  # each batch may name schema revisions not seen yet
            return True
        complete = (not s.registry_value or (self._headers_only and _BYTES in self._values)) and \
            (not s.registry_key or self._key is not None)
        return not complete

    def _resolve_value(self, sig: str) -> tuple[str, str] | None:
        if sig in self._values:
            return None
        try:
            if self._datums:
                self._values[sig] = self._datum_header(*json.loads(sig))
            else:
                schema = BYTES if sig == _BYTES else struct_schema(json.loads(sig))
                self._values[sig] = self._header("value", self._schema_text("value", schema))
        except DataError as exc:
            return exc.error_class, str(exc)
        return None

    def _datum_header(self, name: str | None, revision: str | None, encoding: str | None) -> bytes:
        problem = message_schema_problem(name, revision, encoding)
        if problem is not None:
            raise MessageSchemaError(problem)
        assert name is not None and revision is not None and self._message_schemas is not None
        return self._header("value", written_definition(name, revision, *self._message_schemas(name, revision)))

    def _resolve_key(self) -> tuple[str, str] | None:
        if self._key is not None:
            return None
        try:
            self._key = self._header("key", self._schema_text("key", OPTIONAL_STRING))
        except DataError as exc:
            return exc.error_class, str(exc)
        return None

    def _schema_text(self, side: str, schema: Schema) -> str:
        return json_schema_text(schema) if self._settings.json_schema(side) else avro_schema_text(schema)

    def _header(self, side: str, text: str) -> bytes:
        s = self._settings
        return schema_frame(self._schema_ids, side, s.subject_strategy(side), s.kafka_topic, text)


def _literal_map(entries: dict[str, bytes] | dict[str, str], value_type: str, key: Column) -> Column:
    """``entries[key]`` as an expression over a literal map (null when absent or empty)."""
    from pyspark.sql import functions as F

    if not entries:
        return F.lit(None).cast(value_type)
    pairs = [c for name, value in sorted(entries.items()) for c in (F.lit(name), F.lit(value).cast(value_type))]
    return F.element_at(F.create_map(*pairs), key)
