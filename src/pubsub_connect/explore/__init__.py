"""What the notebooks show, as plain functions: table counts and samples, checkpoint offsets and
lag, throughput and latency over time.

Why here and not in the notebooks: notebooks are hard to test and to review, so they only pick
parameters, call these functions and print or plot the result. The functions run the same on
Databricks (Unity Catalog tables, checkpoints in a volume) and locally (delta-rs tables under
``storage.root``), because they go through the project's table store and read Spark's own files.

Sources of truth, on purpose the durable ones rather than a live query's memory:

- offsets come from a stage's Spark checkpoint — ``offsets/<N>`` is written when batch N is
  planned (its end offsets), ``commits/<N>`` when batch N finished — so the last committed
  source offsets are ``offsets/<max committed N>``; these are the Kafka Connect offsets of the
  original connectors;
- throughput comes from the Delta log of a table: each stage commits one Delta version per
  micro-batch, with its commit time and row count (``commitInfo.operationMetrics``, else the
  ``numRecords`` statistics of the added files);
- latency comes from the bronze rows themselves: ``ingest_time`` minus the record's own time
  (Kafka ``timestamp`` or Pub/Sub ``publish_time``).

Modules: ``context`` (notebook parameters, the connector and its table store), ``tables`` (counts
and samples), ``checkpoints`` (offsets and lag), ``history`` (throughput and latency), ``output``
(printing and plotting).
"""
