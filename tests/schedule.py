"""The order in which the suite hands its test files to the pytest-xdist workers: longest first.

Each worker takes whole files (``--dist=loadfile``) from one queue. pytest-xdist orders that queue
by the number of tests in a file unless told otherwise, which puts the files of a few long tests
(the kill -9 loops, five to thirteen minutes) last: one worker then runs them alone while the
other has nothing left.
Handing out the longest files first and the hundreds of short unit tests last lets the two workers
finish within a short file of each other. ``pytest.ini_options`` turns xdist's own reordering off
(``--no-loadscope-reorder``), so this order is the queue's.

The figures only rank files; no test depends on them. They are the seconds each file took (setup,
calls and teardown) in one run of the whole suite on a 2-core machine (``pytest --durations=0``,
2026-12-07).
A file that is not listed ranks after every listed one, in collection order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: Seconds per file (path under ``tests/``), for the files that took 20 s or more.
MEASURED_SECONDS = {
    "reliability/test_kill9_native.py": 615,
    "reliability/test_service_restarts.py": 538,
    "reliability/test_kill9.py": 377,
    "reference/test_sink_conformance.py": 350,
    "e2e/test_cps_source.py": 347,
    # 395 s in that run; its test beside the running stages has since shed about 110 s.
    "e2e/test_maintenance.py": 285,
    "e2e/test_declarative_lite.py": 213,
    "e2e/test_declarative_pipelines.py": 181,
    "reference/test_reference_source.py": 176,
    "cluster/test_connectors_on_cluster.py": 163,
    "e2e/test_lite_source_fused.py": 140,
    "reference/test_avro_conformance.py": 134,
    "reference/test_reference_lite.py": 132,
    "e2e/test_kafka_security.py": 130,
    "e2e/test_trace.py": 127,
    "e2e/test_fallback.py": 112,
    "e2e/test_cps_source_fused.py": 108,
    "e2e/test_cps_source_avro.py": 94,
    "e2e/test_lite_sink.py": 93,
    "integration/test_driver_class_data.py": 92,
    "reliability/test_secrets.py": 91,
    "integration/test_kafka_source.py": 85,
    "e2e/test_lite_source.py": 79,
    "e2e/test_worker.py": 75,
    "e2e/test_cps_sink.py": 69,
    "reliability/test_cps_source_backlog.py": 68,
    "e2e/test_archive.py": 64,
    "e2e/test_cps_sink_avro.py": 64,
    "e2e/test_source_replay.py": 61,
    "e2e/test_replay.py": 61,
    "integration/test_tables.py": 61,
    "unit/test_cps_source_batch.py": 59,
    "integration/test_services.py": 53,
    "integration/test_pubsub_io.py": 46,
    "e2e/test_cps_sink_fused.py": 45,
    "reliability/test_bad_inputs.py": 45,
    "reference/test_avro_source_conformance.py": 43,
    "e2e/test_source_trace.py": 43,
    "reliability/test_produce_rejects.py": 42,
    "e2e/test_lite_sink_fused.py": 42,
    "e2e/test_quickstart.py": 41,
    "unit/test_avro_batch.py": 34,
    "e2e/test_cps_sink_json_schema.py": 27,
    "unit/test_jsonschema_model.py": 23,
    "e2e/test_cps_source_json_schema.py": 21,
}


def longest_files_first(items: list[pytest.Item], tests_root: Path) -> None:
    """Reorder ``items`` in place: files by their measured seconds, longest first; a file's own
    tests keep their order (a stable sort), and unlisted files keep collection order."""

    def seconds(item: pytest.Item) -> int:
        return MEASURED_SECONDS.get(Path(item.path).relative_to(tests_root).as_posix(), 0)

    items.sort(key=lambda item: -seconds(item))
