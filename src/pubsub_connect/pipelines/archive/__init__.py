"""The Block-GZIP archive sink: Kafka topics → ``.gz`` + ``.index.json`` objects (S3, local, Volumes).

Equivalent of ``com.deviantart.kafka_connect_s3.S3SinkConnector`` (see ``model/blockgzip/``
for the format). One stage, ``archive``: it reads Kafka with :func:`read_kafka` and writes
objects; unlike the Pub/Sub connectors it has no bronze/outbox tables because the object store
itself is the durable output *and* the offset store, and Kafka, which keeps every record for its
retention, is where records are read again when needed.

Exactly-once by construction
----------------------------
- **The store is the offset store.** On start, the sink lists the store: for each
  topic-partition the last complete file (the highest first offset whose ``.gz`` exists) and its
  index give the next offset; Kafka is read from there (partitions without files from the
  earliest offset). The Spark checkpoint is per run and thrown away; nothing in
  ``local.buffer.dir`` is trusted after a restart.
- **Deterministic names.** A file is named by topic, partition and first offset; its date
  folder comes from its first record's timestamp. A re-run starts each partition exactly at an
  existing file boundary, so the file it was writing when it died gets the same name again.
- **Deterministic cuts.** Blocks and files close on record data only (uncompressed block size,
  blocks per file, ``flush.size`` records, ``rotate.interval.ms`` of record time) — plus, at the
  end of a ``--once`` run or a clean stop, the open tail of each partition is written as a
  shorter file (like Connect's flush on stop) instead of being left for the next run. In a
  continuous run a file also closes once it has been open for ``offset.flush.interval.ms``
  (driver clock, from the micro-batch that read its first records; :class:`IdleFlusher` when no
  micro-batch comes), as the original uploads its open files at every Connect offset commit: a
  quiet topic's records reach the store within about that interval. Such a cut depends on time,
  so a re-run after a crash may end that file elsewhere; exactly-once does not depend on it (the
  store says where each partition resumes, and the retry rewrites the same name, index first).
- **Atomic objects, index first.** A file is compressed into ``local.buffer.dir``; then its
  ``.index.json`` is written, then the ``.gz`` (one PUT or a multipart upload completed only
  when whole; temp file + rename locally). A visible ``.gz`` is therefore always whole and
  indexed; an index without its ``.gz`` is a crash leftover the retry overwrites.

So after ``kill -9`` at any moment a restart neither skips nor repeats a record: files that were
committed are resumed after, and the file being written was never visible.

Where the work happens: executors write, the driver coordinates
------------------------------------------------------------------
No record reaches the driver. Each micro-batch is repartitioned by (topic, partition), sorted by
offset within each Spark partition and handed to :class:`ArchiveTask` with ``mapInArrow``: in
an executor task it cuts each topic-partition's records into files, compresses and uploads the
complete ones, and returns one small row per topic-partition (:class:`PartitionReport`: files
written, records skipped, where the partition now stands, which process did it). The driver
collects only those rows. Partitions are compressed in parallel, one task each.

A file usually spans micro-batches (a default file holds 1 GiB), but a task is a different
process each time — on a cluster another machine — so no open gzip stream can survive from one
batch to the next. Instead:

- **Plan without compressing.** :class:`~pubsub_connect.model.blockgzip.rotation.FilePlanner` runs the
  rotation rules on a partition's records with a block *sizer* that shares the writer's cut
  code but compresses nothing. What it knows about the unfinished file afterwards is a handful
  of numbers (:class:`~pubsub_connect.model.blockgzip.rotation.OpenFile`: first offset and timestamp,
  records and blocks so far, the open block's size); the driver keeps them per partition
  (:class:`PartitionState`) and ships them to the next batch's tasks inside the callable.
- **Compress once, when the file is complete.** Only files a rotation rule closed are written.
  When such a file began in an earlier micro-batch, the task reads that beginning — the offset
  range ``[first offset, next offset)`` in its partition state — once more from Kafka
  (:class:`KafkaRecordSource`, a plain Kafka client in the task), then the batch's own records.
  The records of the unfinished file from this batch are simply dropped at the end of the task.
  Each record is therefore compressed exactly once and read from Kafka at most twice, however
  small the micro-batches are; the price is that Kafka must still hold a file's first records
  when it completes (its retention must exceed the time a file stays open, which a restart
  after a crash needs anyway).
- **Same bytes as one writer.** The sizer cuts blocks exactly where the writer does, so the
  files are byte-identical to those of a single writer that saw every record, whatever the
  micro-batch boundaries (the tests compare them) — and to the original's writer given the
  same lines. Should Kafka return different records for a
  range on the second read (a compaction in between), the file holds what Kafka returned for
  that range and the ranges still tile the partition: nothing is archived twice or skipped.
- **End of run.** The open files are written as shorter files by one more small job
  (:meth:`ArchiveQuery._finish`), again reading their records from Kafka in tasks. When a
  micro-batch was cut short (the query failed or was stopped mid-batch), the driver does not
  know what its tasks wrote, so nothing is flushed: the next run resumes from the store.

Executors need no SparkSession: the callable carries the store (with the credentials, region and
endpoint the driver resolved, see :meth:`~pubsub_connect.io.objectstore.base.ObjectStore.portable`),
the Kafka client settings and the partition states. Files are compressed in a per-task
directory under ``local.buffer.dir`` (it must exist on every executor host), removed when the
task ends. Since executors write the objects, an ``output.path`` that is a plain directory must
be one every executor sees (the driver's host in local mode, a shared file system); on a cluster
use a Volume or S3.
"""
