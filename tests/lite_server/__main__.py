"""``python -m lite_server [--port N] [--cert-dir DIR]``: serve until SIGTERM/SIGINT.

Prints one JSON line ``{"endpoint": ..., "port": ..., "cert": ...}`` once listening, so a parent
process can start the server in its own process and read where to connect.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from .server import LiteServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lite_server", description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cert-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    # Blocked before the server starts its threads, so every thread inherits the block and the
    # signal stays pending until ``sigwait`` takes it: no handler runs, so none can deadlock on a
    # lock the main thread holds at that moment, and a signal sent before the wait is not lost.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    with LiteServer(port=args.port, cert_dir=args.cert_dir) as server:
        print(json.dumps({"endpoint": server.endpoint, "port": server.port, "cert": str(server.cert_path)}),
              flush=True)
        signal.sigwait(stop_signals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
