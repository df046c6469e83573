"""Loopback stand-ins for the Google endpoints that Google's connector insists on.

Why they are needed: the Java Pub/Sub client bundled in Google's connector only opens TLS
channels and ignores ``PUBSUB_EMULATOR_HOST``; it always authenticates, so it needs credentials
and exchanges them for an access token; and the source connector checks its subscription on the
default endpoint ``pubsub.googleapis.com:443`` whatever ``cps.endpoint`` says. The emulator
speaks plaintext gRPC and ignores tokens. Three small servers bridge the gap, all on 127.0.0.1:

* a **TLS front**: terminates TLS (ALPN ``h2``, a certificate for ``pubsub.googleapis.com`` from a
  CA the tests made and only the reference JVM trusts) and pipes the decrypted bytes to the
  emulator. It does not parse HTTP/2: the emulator accepts gRPC over cleartext HTTP/2 with prior
  knowledge, so the bytes are valid as they are.
* an **HTTPS CONNECT proxy**: the JVM is started with ``-Dhttps.proxyHost`` pointing here, so
  gRPC asks it for a tunnel to ``pubsub.googleapis.com:443``; the tunnel ends at the TLS front.
  Any other target is refused and recorded: nothing the reference does may leave the machine.
* a **token endpoint**: the ``token_uri`` of the fake service account the connector is given;
  it hands out a fixed access token.
* optionally a **Lite TLS front** (:meth:`GoogleApiFronts.route_lite`): Google's Pub/Sub Lite
  connectors dial ``{region}-pubsublite.googleapis.com:443`` and have no endpoint setting. The
  proxy tunnels those hosts to a second TLS front (same certificate, which also names them) that
  re-encrypts to the local Lite server: that server only speaks TLS, with its own self-signed
  certificate for ``localhost``, so the front is a TLS client of it (ALPN ``h2``) and pipes the
  decrypted HTTP/2 both ways.

They run in one asyncio loop on a thread of the test process: they are tiny, and a thread is
stopped with the fixture that started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path

from integration.kafka_tls import ServerTls

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
#: The host and port the Java client dials unless ``cps.endpoint`` says otherwise.
PUBSUB_DEFAULT_ENDPOINT = "pubsub.googleapis.com:443"
#: The Pub/Sub Lite regions the reference tests use (the region of a zone such as ``us-central1-a``).
LITE_REGIONS = ("us-central1",)


def lite_endpoint(region: str) -> str:
    """The host and port the Java Lite client dials for ``region`` (``Endpoints.regionalEndpoint``);
    it has no setting to dial anything else."""
    return f"{region}-pubsublite.googleapis.com:443"


#: The names the front's certificate must carry: the default endpoint, the Lite regional
#: endpoints, and loopback for a ``cps.endpoint`` that points at the front directly.
FRONT_DNS_NAMES = ("pubsub.googleapis.com", *(lite_endpoint(r).rpartition(":")[0] for r in LITE_REGIONS), "localhost")
FRONT_IP_ADDRESSES = ("127.0.0.1",)
FAKE_ACCESS_TOKEN = "reference-test-token"
#: The longest request head the proxy and the token endpoint read (both get a few hundred bytes).
MAX_HEAD_BYTES = 16 * 1024


@dataclass
class FrontActivity:
    """What the servers saw, for diagnostics and for asserting that nothing tried to leave."""

    tunnels: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    token_requests: int = 0
    tls_connections: int = 0


class GoogleApiFronts:
    """The TLS front, the CONNECT proxy and the token endpoint for one emulator (see module doc).

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Ports are chosen by the OS
    when binding (port 0), so they cannot be taken between choosing and binding.
    """

    def __init__(self, emulator_host: str, tls: ServerTls):
        host, _, port = emulator_host.rpartition(":")
        self.emulator = (host, int(port))
        self.tls = tls
        self.activity = FrontActivity()
        self.tls_port = 0
        self.lite_tls_port = 0
        self.proxy_port = 0
        self._lite: tuple[str, int, ssl.SSLContext] | None = None
        self.token_port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="google-api-fronts", daemon=True)
        self._servers: list[asyncio.Server] = []
        self._open: set[asyncio.StreamWriter] = set()

    @property
    def token_uri(self) -> str:
        return f"http://{LOOPBACK}:{self.token_port}/token"

    def jvm_options(self) -> list[str]:
        """System properties that make a JVM trust the front and reach Google only through the proxy.

        ``http.proxyHost`` too, although the token endpoint is plain HTTP on loopback (which the
        JDK never proxies): any other plain-HTTP call, such as a probe of the GCE metadata server,
        then reaches the proxy and is refused instead of leaving the machine.
        """
        return [f"-Djavax.net.ssl.trustStore={self.tls.java_truststore}",
                f"-Djavax.net.ssl.trustStorePassword={self.tls.truststore_password}",
                "-Djavax.net.ssl.trustStoreType=PKCS12",
                f"-Dhttps.proxyHost={LOOPBACK}", f"-Dhttps.proxyPort={self.proxy_port}",
                f"-Dhttp.proxyHost={LOOPBACK}", f"-Dhttp.proxyPort={self.proxy_port}"]

    def route_lite(self, lite_endpoint_host: str, lite_cert: Path) -> None:
        """Tunnel the Lite regional endpoints to the local Lite server at ``lite_endpoint_host``
        (``localhost:PORT``), whose self-signed certificate ``lite_cert`` is trusted for that hop only."""
        host, _, port = lite_endpoint_host.rpartition(":")
        upstream = ssl.create_default_context(cafile=str(lite_cert))
        upstream.set_alpn_protocols(["h2"])
        self._lite = (host, int(port), upstream)

    @property
    def tunnelled_targets(self) -> frozenset[str]:
        """The ``CONNECT`` targets the proxy accepts; everything else is refused and recorded."""
        lite = {lite_endpoint(region) for region in LITE_REGIONS} if self._lite else set()
        return frozenset({PUBSUB_DEFAULT_ENDPOINT, *lite})

    def start(self, timeout_s: float = 10.0) -> GoogleApiFronts:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start_servers(), self._loop).result(timeout_s)
        log.info("Google API fronts: TLS %s:%d -> emulator %s:%d, proxy :%d, token endpoint :%d",
                 LOOPBACK, self.tls_port, *self.emulator, self.proxy_port, self.token_port)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._stop_servers(), self._loop).result(timeout_s)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> GoogleApiFronts:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------------------------------

    async def _start_servers(self) -> None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.tls.cert_chain_pem, self.tls.key_pem)
        context.set_alpn_protocols(["h2"])  # gRPC refuses a TLS channel that did not negotiate h2
        tls_server = await asyncio.start_server(self._serve_tls, LOOPBACK, 0, ssl=context)
        lite_tls_server = await asyncio.start_server(self._serve_lite_tls, LOOPBACK, 0, ssl=context)
        proxy_server = await asyncio.start_server(self._serve_proxy, LOOPBACK, 0)
        token_server = await asyncio.start_server(self._serve_token, LOOPBACK, 0)
        self._servers = [tls_server, lite_tls_server, proxy_server, token_server]
        self.tls_port, self.lite_tls_port, self.proxy_port, self.token_port = (
            s.sockets[0].getsockname()[1] for s in self._servers)

    async def _stop_servers(self) -> None:
        for server in self._servers:
            server.close()
        for writer in list(self._open):
            writer.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)

    def _track(self, *writers: asyncio.StreamWriter) -> None:
        self._open.update(writers)

    def _untrack(self, *writers: asyncio.StreamWriter) -> None:
        for writer in writers:
            self._open.discard(writer)
            writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy until end of stream, then close the other side: h2 needs no half-close."""
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _splice(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter,
                      host: str, port: int, what: str, upstream_tls: ssl.SSLContext | None = None) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                host, port, ssl=upstream_tls, server_hostname=host if upstream_tls else None)
        except (OSError, ssl.SSLError) as exc:
            log.warning("%s: cannot reach %s:%d: %s", what, host, port, exc)
            client_writer.close()
            return
        self._track(client_writer, upstream_writer)
        try:
            await asyncio.gather(self._pipe(client_reader, upstream_writer), self._pipe(upstream_reader, client_writer))
        finally:
            self._untrack(client_writer, upstream_writer)

    async def _serve_tls(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.activity.tls_connections += 1
        await self._splice(reader, writer, *self.emulator, "TLS front")

    async def _serve_lite_tls(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.activity.tls_connections += 1
        if self._lite is None:
            writer.close()
            return
        host, port, upstream_tls = self._lite
        await self._splice(reader, writer, host, port, "Lite TLS front", upstream_tls)

    async def _read_head(self, reader: asyncio.StreamReader) -> list[str] | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return None
        return head[:MAX_HEAD_BYTES].decode("latin-1").split("\r\n")

    async def _serve_proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lines = await self._read_head(reader)
        if not lines:
            writer.close()
            return
        method, _, rest = lines[0].partition(" ")
        target = rest.rpartition(" ")[0]
        if method != "CONNECT" or target not in self.tunnelled_targets:
            self.activity.refused.append(lines[0])
            log.warning("proxy: refused %r (only CONNECT to %s is tunnelled)", lines[0],
                        sorted(self.tunnelled_targets))
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            writer.close()
            return
        self.activity.tunnels.append(target)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        front = self.tls_port if target == PUBSUB_DEFAULT_ENDPOINT else self.lite_tls_port
        await self._splice(reader, writer, LOOPBACK, front, "proxy")

    async def _serve_token(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Any request gets the fixed token: the emulator accepts every bearer token."""
        lines = await self._read_head(reader)
        if lines is None:
            writer.close()
            return
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip() or 0)
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            await reader.readexactly(length)
        self.activity.token_requests += 1
        body = json.dumps({"access_token": FAKE_ACCESS_TOKEN, "expires_in": 3600, "token_type": "Bearer"}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n%s" % (len(body), body))
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()


def write_fake_service_account(path: Path, token_uri: str, project: str) -> Path:
    """A service-account key file whose token exchange goes to ``token_uri``.

    The connector always builds credentials (it has no "no credentials" mode), and without a key
    file it would look for Application Default Credentials, which may probe the GCE metadata
    server. The RSA key is new and belongs to nothing; the client signs its token request with it.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "type": "service_account", "project_id": project, "private_key_id": "0" * 40,
        "private_key": private_pem, "client_email": f"reference-connector@{project}.iam.gserviceaccount.com",
        "client_id": "100000000000000000000", "token_uri": token_uri}, indent=1))
    path.chmod(0o600)
    return path
