"""Run code that uses the official Lite client in a child process that trusts the test server.

Why a child process: ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` is read once per process and replaces
the trust roots for every TLS channel in it, so it must be set before the first channel and must
not leak into the pytest process (other tests may open real TLS channels).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

_TESTS_DIR = Path(__file__).resolve().parent.parent
_SRC_DIR = _TESTS_DIR.parent / "src"


class ClientProcessError(AssertionError):
    """The child failed; the message carries its exit code and stderr tail."""


def run_python(code: str, *, cert_path: Path, endpoint: str, timeout: float = 120) -> Any:
    """Run ``code`` with ``LITE_ENDPOINT`` set and return the JSON on its last stdout line.

    The child prints its result with ``print(json.dumps(...))``; everything else it prints
    before that line is ignored. The child is killed if it outlives ``timeout``.
    """
    env = dict(os.environ)
    env["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(cert_path)
    env["LITE_ENDPOINT"] = endpoint
    env["PYTHONPATH"] = os.pathsep.join(
        [str(_TESTS_DIR), str(_SRC_DIR), *filter(None, [env.get("PYTHONPATH")])]
    )
    # A proxy would intercept the loopback TLS connection.
    for var in ("https_proxy", "HTTPS_PROXY", "grpc_proxy", "http_proxy", "HTTP_PROXY"):
        env.pop(var, None)
    env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1"
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise ClientProcessError(f"client process exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        raise ClientProcessError(f"client process printed no result; stderr:\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1])
