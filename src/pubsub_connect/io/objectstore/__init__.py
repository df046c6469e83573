"""Object stores for the archive sink: S3, local directories and Databricks Volumes.

Why one small interface: the archive connector's exactly-once guarantee rests on three store
properties, and each target provides them differently:

1. **Atomic whole objects** — a reader (or a restarted connector) never sees part of a file.
   S3: a single ``PutObject`` for small files, otherwise a multipart upload that is *completed
   only after every part was uploaded* (an interrupted upload stays invisible; it is aborted on
   errors, and a crash leaves an incomplete upload that a bucket lifecycle rule
   ``AbortIncompleteMultipartUpload`` removes). Local directories: write a temporary file in a
   hidden ``.tmp`` folder of the same root, ``fsync`` it, ``rename`` it over the final name,
   ``fsync`` the directory. Volumes (``/Volumes/...``, a FUSE mount backed by cloud storage):
   the same through the plain file API, tolerating the calls that mount does not implement.
2. **Deterministic overwrite** — writing a key again replaces the object, so a retry that
   rewrites the same name with the same bytes is harmless.
3. **Listing and ranged reads** — the connector resumes from what the store holds, and
   ``archive read`` fetches a single block by byte range.

Keys are ``/``-separated strings; a local store maps them below its root directory.

Stores are used in Spark executors, not only on the driver: a store object is pickled into the
tasks that write archive files, so it must carry everything those processes need.
:meth:`ObjectStore.portable` gives that copy (for S3, the credentials, region and endpoint the
driver resolved; a local root is just a path).

Modules: ``base`` (the interface), ``s3``, ``local`` (directories and Volumes), ``locations``
(which store a config or a location names), ``archive_files`` (the archive's files in a store).
"""
