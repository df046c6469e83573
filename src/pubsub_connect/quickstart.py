"""``pubsub-connect quickstart``: the embedded default, end to end, in one command.

Until the Cloud Pub/Sub sink pipeline lands this is a smoke run: it starts the local services
and a local Spark session and prints that they are up.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from pubsub_connect.io import services as svc
from pubsub_connect.io.spark import build_session, capabilities


def run_quickstart(storage_root: str | None, records: int) -> int:
    root = Path(storage_root or tempfile.mkdtemp(prefix="pubsub-connect-quickstart-"))
    started = time.monotonic()
    with svc.LocalServices(root / "services") as services:
        for name, service in services.running.items():
            print(f"{name:7s} up at {service.endpoint}", flush=True)
        spark = build_session()
        print(f"spark   up ({capabilities(spark).describe()}), {spark.version}", flush=True)
        spark.stop()
    print(f"all services stopped; {time.monotonic() - started:.1f} s", flush=True)
    return 0
