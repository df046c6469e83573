"""The order in which the suite hands its test files to the pytest-xdist workers: longest first.

Each worker takes whole files (``--dist=loadfile``) from one queue. pytest-xdist orders that queue
by the number of tests in a file unless told otherwise, which puts the files of a few long tests
(the kill -9 loops, five to thirteen minutes) last: one worker then runs them alone while the
other has nothing left.
Handing out the longest files first and the hundreds of short unit tests last lets the two workers
finish within a short file of each other. ``pytest.ini_options`` turns xdist's own reordering off
(``--no-loadscope-reorder``), so this order is the queue's.

The figures only rank files; no test depends on them. They are the seconds each file took (setup,
calls and teardown) in one run of the whole suite on a 2-core machine (``pytest --durations=0``).
A file that is not listed ranks after every listed one, in collection order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: Seconds per file (path under ``tests/``), for the files that took 20 s or more.
MEASURED_SECONDS = {
    # Scaled from that run (two kills per connector since, three Spark driver starts instead of four).
    "reliability/test_kill9_native.py": 770,
    "reliability/test_kill9.py": 399,
    "reliability/test_service_restarts.py": 484,
    "e2e/test_cps_source.py": 354,
    "e2e/test_cps_source_fused.py": 200,
    "e2e/test_lite_source_fused.py": 120,
    "reference/test_sink_conformance.py": 345,
    "e2e/test_declarative_pipelines.py": 292,
    # Scaled from that run by the file's own before/after times alone (246 s -> 166 s): its five
    # scenarios' first runs became one application.
    "cluster/test_connectors_on_cluster.py": 275,
    "reference/test_reference_source.py": 252,
    # Measured alone (Google's worker started for it): 121 s.
    "reference/test_avro_conformance.py": 130,
    # Measured alone (Google's worker started for it, its jars cached): 60 s.
    "reference/test_avro_source_conformance.py": 60,
    "e2e/test_declarative_lite.py": 250,
    "e2e/test_kafka_security.py": 228,
    "reference/test_reference_lite.py": 226,
    "e2e/test_fallback.py": 201,
    "reliability/test_bad_inputs.py": 190,
    "e2e/test_lite_source.py": 173,
    # Scaled like the cluster file (76 s -> 69 s alone): fewer Spark jobs per settings combination.
    "unit/test_cps_source_batch.py": 172,
    "e2e/test_lite_sink.py": 169,
    # Measured alone: 168 s for the first two tests (nine one-stage runs and three maintenance
    # runs); the log trim's test adds about 100 s (fifteen one-stage runs, five maintenance runs).
    "e2e/test_maintenance.py": 270,
    # Measured alone: 49 s and about 60 s.
    "e2e/test_replay.py": 50,
    "e2e/test_trace.py": 60,
    # Measured alone: 66 s (a staged run, four replays, a replay from a shell).
    "e2e/test_source_replay.py": 66,
    # Measured alone (with test_trace.py): about 60 s.
    "e2e/test_source_trace.py": 60,
    "integration/test_kafka_source.py": 165,
    "integration/test_driver_class_data.py": 138,
    "e2e/test_worker.py": 128,
    "reliability/test_secrets.py": 124,
    "integration/test_tables.py": 111,
    "e2e/test_cps_sink.py": 104,
    "e2e/test_archive.py": 86,
    "reliability/test_cps_source_backlog.py": 85,
    "e2e/test_cps_sink_fused.py": 80,
    # Measured alone (its registry and the emulator shared with the session): 52 s, plus ~100 s for
    # the Avro-schema topic (two runs) and ~45 s for the JSON bodies.
    "e2e/test_cps_sink_avro.py": 200,
    # Measured alone (registry and emulator started for it): 54 s, plus ~75 s for the Avro-schema
    # topic (both modes).
    "e2e/test_cps_source_avro.py": 130,
    "e2e/test_cps_sink_json_schema.py": 45,
    "e2e/test_cps_source_json_schema.py": 40,
    "unit/test_jsonschema_model.py": 40,
    "reliability/test_produce_rejects.py": 71,
    "integration/test_services.py": 65,
    "e2e/test_quickstart.py": 64,
    "integration/test_pubsub_io.py": 62,
    "e2e/test_lite_sink_fused.py": 45,
    "integration/test_convert_tolerance.py": 31,
    "reference/test_cutover.py": 31,
    "reliability/test_stuck_batch.py": 27,
    "unit/test_cps_sink_batch.py": 27,
    "integration/test_kafka_sink.py": 26,
    "bundle/test_bundle.py": 25,
}


def longest_files_first(items: list[pytest.Item], tests_root: Path) -> None:
    """Reorder ``items`` in place: files by their measured seconds, longest first; a file's own
    tests keep their order (a stable sort), and unlisted files keep collection order."""

    def seconds(item: pytest.Item) -> int:
        return MEASURED_SECONDS.get(Path(item.path).relative_to(tests_root).as_posix(), 0)

    items.sort(key=lambda item: -seconds(item))
