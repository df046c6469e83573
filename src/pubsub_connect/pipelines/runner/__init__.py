"""The stage runner: how a connector's stages are started, watched, restarted and stopped.

One concern per module: :mod:`.query` (what is supervised), :mod:`.failures` (which failures a
restart can fix, and the one line shown for them), :mod:`.supervisor` (restarts, stuck batches,
``run_stages``), :mod:`.progress` (one line per micro-batch), :mod:`.signals` (Ctrl-C /
SIGTERM) and :mod:`.interrupted` (a batch a stop cuts short, told to Spark as an interruption).
"""
