"""Schema Registry JSON Schema (Confluent's ``JsonSchemaConverter``), read by the sink: JSON
Schemas mapped to Connect schemas as Confluent's ``JsonSchemaData`` maps them (``schema``), and
framed JSON read into the Connect values a sink task gets (``reference``, per record: what the
JVM path is held against), and that path (``batch``: Spark's Variant type reads the JSON, column
expressions check and convert each value). The wire format is Avro's (:mod:`..avro.wire`), the
datum UTF-8 JSON text; the values then go through the same mapping as Avro's
(:mod:`..avro.values`)."""
