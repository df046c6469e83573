"""``pubsub-connect worker``: a long-running worker with Kafka Connect's REST API.

Why a separate entry from ``run``: ``run`` is ``connect-standalone`` for a fixed set of
connector files; the worker is what operators keep running and drive over HTTP (create, pause,
resume, stop, restart, delete connectors; read and move their offsets), with its connectors'
configs and target states kept under ``storage.root`` so that a restart brings them back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from pubsub_connect.config import loader as cfg
from pubsub_connect.connect.herder import Herder
from pubsub_connect.connect.rest import ConnectRestApi, RestServer, credentials_file, parse_listener, security_for

log = logging.getLogger(__name__)


def kafka_cluster_id(worker: cfg.WorkerConfig) -> Callable[[], str | None]:
    """``GET /``'s ``kafka_cluster_id``, asked of the brokers once and remembered."""
    found: list[str | None] = []

    def lookup() -> str | None:
        if not found:
            from pubsub_connect.io.kafka.admin import cluster_id
            from pubsub_connect.pipelines.context import librdkafka_client

            try:
                found.append(cluster_id(librdkafka_client(worker, "admin")))
            except Exception as exc:  # an unreachable broker: unknown for now, asked again next time
                log.debug("cluster id: %s", exc)
                return None
        return found[0]

    return lookup


def run_worker(worker: cfg.WorkerConfig, connector_files: Mapping[str, Mapping[str, str]],
               stop: threading.Event, emit: Callable[[str], None] = print) -> None:
    """Serve the REST API and run the connectors until ``stop`` is set."""
    from pubsub_connect.pipelines.runtime import build_context

    listener = parse_listener(str(worker.get("listeners")))
    auth = security_for(listener, credentials_file(worker))

    def shared_context():
        from pubsub_connect.io.spark import quiet_routine_stops, silence_query_failure_logs

        ctx = build_context(worker, once=False, progress=emit)
        silence_query_failure_logs(ctx.spark)  # each failure is one line and the status's trace
        quiet_routine_stops(ctx.spark)
        emit(f"spark: {ctx.caps.describe()}, storage {ctx.store.root}")
        return ctx

    herder = Herder(worker, listener.worker_id, shared_context, progress=emit)
    server = RestServer(listener, ConnectRestApi(herder, kafka_cluster_id(worker)), auth).start()
    emit(f"REST API on {server.url}" + (" (basic authentication)" if auth else ""))
    try:
        herder.start(connector_files)
        emit(f"worker running {len(herder.names())} connector(s); press Ctrl-C to stop")
        while not stop.wait(0.5):  # short waits: signal handlers run between them
            pass
    finally:
        server.close()
        herder.shutdown()
