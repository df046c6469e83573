"""Local Pub/Sub Lite gRPC server for tests (see ``server.py`` for how to use it)."""

from .certs import TlsFiles, make_self_signed
from .clientproc import run_python
from .server import LiteServer, RpcFailure

__all__ = ["LiteServer", "RpcFailure", "TlsFiles", "make_self_signed", "run_python"]
