"""Replay and backfill from bronze: ``pubsub-connect replay NAME``.

Why: Pub/Sub delivers to a subscription only what was published after it existed, and Kafka's
retention may have dropped the records long ago; a connector's bronze table still holds every
record or message as it came in. Replay takes a range of it (:mod:`.ranges`) and sends it again
through the connector's *current* data model and client settings, to its topic or to another
(``--to-topic``: backfilling the topic of a new subscription, or a new Kafka topic).

- A sink's bronze (Kafka records) is published to Cloud Pub/Sub or Lite again (:mod:`.sink`), at
  least once, as its publish stage does: a replay cut short is run again from the chunk its last
  line names.
- A source's bronze (Pub/Sub or Lite messages) is produced to Kafka again (:mod:`.source`), one
  Kafka transaction per chunk: exactly once for ``read_committed`` consumers, and the same replay
  run again skips the chunks that committed.

It is a bounded batch job, not a stage: no checkpoint, no outbox. The range is read in chunks of
at most ``batch_size`` records (per partition, where bronze has partitions), each converted, its
dead letters handled by the connector's ``errors.tolerance`` (``dlq/<name>`` with stage
``replay``, or a stop naming the first record before anything of that chunk is sent), then sent;
a progress line follows each chunk. ``--dry-run`` converts and counts without sending.
"""
