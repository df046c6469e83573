"""Fixtures of the reference tests: Google's connector in Kafka Connect standalone, one worker
per session (a JVM, ~300 MB), started only when a test asks for it and stopped at the end of the
session together with the loopback fronts it reaches Pub/Sub through.

The first use resolves the worker's and the connector's jars from Maven Central (~3 min); the
timings are shown in the terminal summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.kafka_tls import make_server_tls
from integration.pubsub_helpers import PROJECT
from lite_server import LiteServer
from reference.connect import ConnectStandalone, resolve_reference_jars
from reference.fronts import FRONT_DNS_NAMES, FRONT_IP_ADDRESSES, GoogleApiFronts, write_fake_service_account
from timings import section, timed

#: Timings shown in the terminal summary (see :mod:`timings`).
TIMINGS = section("reference connector (Google's, in Kafka Connect)")


@pytest.fixture(scope="session")
def google_api_fronts(pubsub_emulator_host: str, services_dir: Path) -> Iterator[GoogleApiFronts]:
    """TLS front, CONNECT proxy and token endpoint for the emulator, on loopback.

    At teardown, fails if anything asked the proxy for another destination than Pub/Sub's
    default endpoint: the reference must not try to leave the machine.
    """
    tls = make_server_tls(services_dir / "google-api-tls", FRONT_DNS_NAMES, FRONT_IP_ADDRESSES)
    with GoogleApiFronts(pubsub_emulator_host, tls) as fronts:
        yield fronts
    assert not fronts.activity.refused, f"the reference tried to reach other hosts: {fronts.activity.refused}"


@pytest.fixture(scope="session")
def google_connect(kafka_bootstrap: str, google_api_fronts: GoogleApiFronts,
                   services_dir: Path) -> Iterator[ConnectStandalone]:
    """A Kafka Connect standalone worker running Google's connector against the test broker and
    the emulator; tests add connectors with :meth:`ConnectStandalone.running`."""
    directory = services_dir / "google-connect"
    credentials = write_fake_service_account(directory / "service-account.json", google_api_fronts.token_uri,
                                             PROJECT)
    with timed(TIMINGS, "jars (Connect runtime, Google connector, Apicurio converter) from the cache or "
                       "Maven Central"):
        resolve_reference_jars()
    worker = ConnectStandalone(directory, kafka_bootstrap, google_api_fronts, credentials)
    worker.start()
    TIMINGS["Connect start (JVM start to REST API answering)"] = worker.started_in_s
    try:
        yield worker
    finally:
        with timed(TIMINGS, "Connect stop"):
            worker.stop()


@pytest.fixture(scope="session")
def google_lite(google_api_fronts: GoogleApiFronts, services_dir: Path) -> Iterator[LiteServer]:
    """A local Pub/Sub Lite server that Google's Lite connectors reach through the fronts (their
    regional endpoint is tunnelled to it) and this project's connectors reach directly."""
    with LiteServer(cert_dir=services_dir / "reference-lite-tls") as server:
        google_api_fronts.route_lite(server.endpoint, server.cert_path)
        yield server
