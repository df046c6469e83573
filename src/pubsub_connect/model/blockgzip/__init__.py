"""Block-GZIP: the archive sink's file format (byte-compatible with the Kafka Connect S3 sink).

Why this format: archive files should be large (few objects to list and fetch for batch jobs)
yet allow fetching a handful of records at a given offset without downloading the whole file.
Gzip allows both: a file that is the concatenation of several gzip *members* is itself a valid
gzip file, so ``gzip -dc`` (or any gzip reader) sees one stream of newline-delimited records,
while a sibling ``.index.json`` records where each member (a *block*, called a *chunk* in the
index) starts, so a range read of one block decompresses on its own.

This package is pure: no paths, no network, no clocks. One module per part of the format: ``lines``
(a record as one line), ``blocks`` (cutting, writing and reading gzip members), ``index`` (the
``.index.json``), ``names`` (object keys), ``rotation`` (where files end). The writer emits compressed bytes into a
binary sink the caller supplies (a staged file in ``local.buffer.dir``, or memory in tests). The
same block-cutting code also runs without compressing (:class:`BlockSizer`), and
:class:`FilePlanner` applies the rotation rules with it: the archive decides where files end
before compressing anything, and can carry that decision from one process to the next as a few
numbers (:class:`OpenFile`).

Layout
------
- A record is one line: its value bytes followed by LF (``0x0A``). Values are written as bytes,
  never decoded or re-encoded.
- Blocks are cut by the original's rule: before a record is written, if the open block's
  *length* plus the record's would exceed ``compressed_block_size`` (the original's name; it is a
  size of uncompressed input), the block closes and the record starts the next block. A length is
  what the original measures: Java's ``String.length()`` of the line's text (UTF-16 code units:
  the byte count for ASCII, fewer for other UTF-8) plus 1 for the LF, and it is what the index
  calls ``byte_length_uncompressed``. A record is never split: one longer than a block is alone in
  its block, and when it is the first record of a file, the file starts with an empty block (a
  20-byte gzip member indexed with ``num_records`` 0), as the original's writer leaves it.
- A block also closes before a record whose offset is not the previous offset + 1 (a gap left by
  compaction or by transaction markers). Why: the index only has ``first_record_offset`` and
  ``num_records`` per block, so records inside a block must have consecutive offsets for
  "offset N is line N - first_record_offset" to hold; the original connector silently assumed
  it. With this rule the index is exact on every topic and still has the original's exact shape.
- Each block is one gzip member written like Java's ``GZIPOutputStream``: a fixed 10-byte header
  (mtime 0, no file name, OS 255 as JDK 16+ writes it), zlib raw deflate at level 6, CRC-32 and
  length. The same records always produce the same bytes (a retried upload rewrites an identical
  object), and the original's bytes for the same lines.

Index: ``{"chunks":[{"byte_length_uncompressed":…,"num_records":…,"byte_length":…,
"byte_offset":…,"first_record_offset":…},…]}`` — exactly the original's keys, in its order.

File names: ``<prefix>/<yyyy-mm-dd>/<topic>-<partition %05d>-<first offset %012d>.gz`` and the
same with ``.index.json``; like the original, a non-empty prefix gets a ``/`` unless it already
ends with one (``systest`` and ``systest/`` both give ``systest/2016-02-24/…``; an empty prefix
gives ``2016-02-24/…``). The date is the UTC date of the file's *first record timestamp*, not
the wall clock (the original uses the upload date), so a retry after a crash writes exactly the
same object name. Beside them, ``<prefix>/last_chunk_index.<topic>-<partition %05d>.txt`` holds
the key of the partition's last index, the cursor the original resumes from.

Newline escaping rule (values are bytes)
----------------------------------------
A line is the value itself when the value contains neither LF (``0x0A``) nor CR (``0x0D``) and
does not start with the byte RS (``0x1E``, ASCII "record separator"). That is the common case
(JSON, CSV, log lines), and such files are identical to the original connector's output.

Otherwise the line is RS followed by the value with three substitutions, applied left to right:
``\\`` → ``\\``, LF → ``\n``, CR → ``\r``. A null value (a Kafka tombstone) is a line that
is RS alone — unambiguous, because an empty value needs no escaping and is an empty line.
Decoding: a line without a leading RS is the value; RS alone is null; otherwise drop the RS and
undo the three escapes. CR is escaped too because common line readers (Spark's text source,
Python's universal newlines) also split on CR. Every record is therefore exactly one line and
``gzip -dc FILE | wc -l`` counts records.
"""
