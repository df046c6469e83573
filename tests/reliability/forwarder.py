"""A loopback TCP forwarder whose upstream can be switched or cut, for service-restart tests.

Why: Google's Pub/Sub emulator keeps topics in memory, so a restarted emulator comes back
empty, unlike the real service, whose topics outlive an outage. A connector retrying against a
fresh emulator could hit it between "port open" and "test recreated the topic" and see NOT_FOUND:
a race of the test, not a behaviour of the product. Behind this forwarder the connector sees the
real outage (connections refused/closed by a killed emulator process) and then a restarted
emulator that already has its topic: the forwarder switches to it only once it is prepared.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class Forwarder:
    """Listens on 127.0.0.1:<port>; forwards each connection to ``upstream`` (host, port), or
    closes it at once while ``upstream`` is None (an unreachable service)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._upstream: tuple[str, int] | None = None
        self._open: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept_loop, name="forwarder", daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def route_to(self, upstream: str | None) -> None:
        """Send new connections to ``host:port``, or refuse them (None); drop existing ones."""
        with self._lock:
            if upstream is None:
                self._upstream = None
            else:
                host, port = upstream.rsplit(":", 1)
                self._upstream = (host, int(port))
            sockets, self._open = self._open, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def close(self) -> None:
        self._closed = True
        self.route_to(None)
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                upstream = self._upstream
            if upstream is None:
                client.close()
                continue
            try:
                server = socket.create_connection(upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, server))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
            with self._lock:
                self._open.discard(source)
                self._open.discard(sink)
