"""``python -m lite_server [--port N] [--cert-dir DIR]``: serve until SIGTERM/SIGINT.

Prints one JSON line ``{"endpoint": ..., "port": ..., "cert": ...}`` once listening, so a parent
process can start the server in its own process and read where to connect. SIGUSR1 prints every
thread's stack to stderr, so a parent that finds the server stuck can say where.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import signal
import sys
import threading
from pathlib import Path

from pubsub_connect.pipelines.runner.signals import install_stop_signals

from .server import LiteServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lite_server", description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cert-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    stopped = threading.Event()
    install_stop_signals(stopped)  # the connector's own handling: a signal never deadlocks the wait
    with LiteServer(port=args.port, cert_dir=args.cert_dir) as server:
        print(json.dumps({"endpoint": server.endpoint, "port": server.port, "cert": str(server.cert_path)}),
              flush=True)
        stopped.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
