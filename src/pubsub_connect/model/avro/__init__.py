"""Schema Registry Avro: the wire format (``wire``), Avro schemas mapped to Connect schemas as
Confluent's ``AvroData`` maps them (``schema``), and datums decoded into the Connect values a sink
task gets from Confluent's ``AvroConverter`` (``reference``, per record: the reference the JVM
path is held against), and that path: ``batch`` (decoding by writer schema, a record's
attributes) over ``values`` (each value's body, Java text and JSON as Spark expressions)."""
