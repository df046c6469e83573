"""Kafka's class names in the Spark Kafka options: relocated on Databricks, whose Java client is
shaded under ``kafkashaded.``, and left alone everywhere else.

Why it matters: a Connect file's ``sasl.jaas.config`` names
``org.apache.kafka.common.security.plain.PlainLoginModule``, which Databricks Runtime does not
have ("No LoginModule found" in every job task and pipeline); locally the same name is the only
one that works. The librdkafka clients read the same settings and never see a rewrite.
"""

from __future__ import annotations

from typing import Any

import pytest

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.kafka.options import shade_kafka_class_names, spark_client_options
from pubsub_connect.io.spark import Capabilities
from pubsub_connect.lakeflow.datasets import define
from pubsub_connect.pipelines.context import PipelineContext
from pubsub_connect.pipelines.kafka_ingest import kafka_read_options

PLAIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="connect" password="s3cret";'
SHADED_PLAIN = ('kafkashaded.org.apache.kafka.common.security.plain.PlainLoginModule required username="connect" '
                'password="s3cret";')
OAUTH_HANDLER = "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler"
SHADED_OAUTH_HANDLER = "kafkashaded." + OAUTH_HANDLER

JAVA = {
    "bootstrap.servers": "broker-1.example.com:9093",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "PLAIN",
    "sasl.jaas.config": PLAIN,
    "sasl.login.callback.handler.class": OAUTH_HANDLER,
    "sasl.client.callback.handler.class": "com.example.kafka.TokenHandler",  # a user's own class
    "sasl.login.class": "kafkashaded.org.apache.kafka.common.security.oauthbearer.internals.OAuthBearerRefreshingLogin",
    "partition.assignment.strategy": "org.apache.kafka.clients.consumer.RangeAssignor,"
                                     "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
    "client.id": "org.apache.kafka.looks-like-a-class",  # not a class setting: never touched
}


def test_on_databricks_kafkas_classes_are_relocated_in_the_settings_that_name_classes() -> None:
    assert spark_client_options(JAVA, shaded_kafka=True) == {
        "kafka.bootstrap.servers": "broker-1.example.com:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": SHADED_PLAIN,
        "kafka.sasl.login.callback.handler.class": SHADED_OAUTH_HANDLER,
        "kafka.sasl.client.callback.handler.class": "com.example.kafka.TokenHandler",
        "kafka.sasl.login.class":
            "kafkashaded.org.apache.kafka.common.security.oauthbearer.internals.OAuthBearerRefreshingLogin",
        "kafka.partition.assignment.strategy": "kafkashaded.org.apache.kafka.clients.consumer.RangeAssignor,"
                                               "kafkashaded.org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
        "kafka.client.id": "org.apache.kafka.looks-like-a-class",
    }


def test_elsewhere_the_settings_pass_unchanged() -> None:
    assert spark_client_options(JAVA, shaded_kafka=False) == {f"kafka.{k}": v for k, v in JAVA.items()}


def test_a_relocated_name_stays_as_it_is() -> None:
    once = shade_kafka_class_names({"sasl.jaas.config": PLAIN})
    assert once == {"sasl.jaas.config": SHADED_PLAIN}
    assert shade_kafka_class_names(once) == once


def _worker() -> cfg.WorkerConfig:
    return cfg.validate_worker({
        "bootstrap.servers": "broker-1.example.com:9093", "storage.root": "/tmp/state",
        "consumer.security.protocol": "SASL_SSL", "consumer.sasl.mechanism": "PLAIN",
        "consumer.sasl.jaas.config": PLAIN,
        "producer.security.protocol": "SASL_SSL", "producer.sasl.mechanism": "PLAIN",
        "producer.sasl.jaas.config": PLAIN,
    })


SINK = {"name": "orders", "connector.class": "cps-sink", "topics": "orders", "cps.project": "p", "cps.topic": "t",
        "consumer.override.sasl.login.callback.handler.class": OAUTH_HANDLER}


@pytest.mark.parametrize(("databricks", "jaas", "handler"), [(True, SHADED_PLAIN, SHADED_OAUTH_HANDLER),
                                                              (False, PLAIN, OAUTH_HANDLER)],
                         ids=["databricks", "local"])
def test_the_stages_options_follow_the_sessions_runtime_and_librdkafka_never_sees_a_rewrite(
        databricks: bool, jaas: str, handler: str) -> None:
    worker = _worker()
    config = cfg.validate_connector(SINK, "sink.properties", worker=worker)
    caps = Capabilities(native_kafka=True, native_delta=True, databricks=databricks)
    ctx = PipelineContext(spark=None, worker=worker, caps=caps, store=None)  # type: ignore[arg-type]

    read = kafka_read_options(worker, config, shaded_kafka=caps.databricks)  # the ingest stage's
    assert (read["kafka.sasl.jaas.config"], read["kafka.sasl.login.callback.handler.class"]) == (jaas, handler)
    assert ctx.kafka_client_options("producer.")["kafka.sasl.jaas.config"] == jaas  # the dead-letter topic's
    # the librdkafka clients (start-up checks, transactional producer) take user name and password
    assert ctx.librdkafka_client("producer") == {
        "bootstrap.servers": "broker-1.example.com:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "sasl.username": "connect", "sasl.password": "s3cret"}


class _Captured(Exception):
    """What the bronze dataset's query asked Spark's Kafka source for (raised by the stand-in)."""

    def __init__(self, options: dict[str, str]):
        super().__init__("captured")
        self.options = options


class _Reader:
    def format(self, name: str) -> _Reader:
        assert name == "kafka"
        return self

    def options(self, **options: str) -> _Reader:
        raise _Captured(options)


class _Spark:
    readStream = _Reader()


class _Pipelines:
    """``pyspark.pipelines`` stand-in: records datasets and sinks (no expectations, as open source)."""

    def __init__(self) -> None:
        self.tables: dict[str, Any] = {}
        self.sinks: dict[str, dict[str, str]] = {}

    def table(self, name: str, comment: str) -> Any:
        return lambda query: self.tables.__setitem__(name, query)

    def temporary_view(self, name: str) -> Any:
        return lambda query: None

    def create_sink(self, name: str, format: str, options: dict[str, str]) -> None:
        self.sinks[name] = options

    def append_flow(self, target: str, name: str) -> Any:
        return lambda query: None


@pytest.mark.parametrize(("runtime", "jaas"), [("17.3", SHADED_PLAIN), (None, PLAIN)], ids=["databricks", "local"])
def test_a_pipelines_kafka_datasets_follow_the_runtime(monkeypatch: pytest.MonkeyPatch, runtime: str | None,
                                                       jaas: str) -> None:
    if runtime is None:
        monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    else:
        monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", runtime)
    worker = _worker()
    config = cfg.validate_connector({**SINK, "errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq"},
                                    "sink.properties", worker=worker)
    dp = _Pipelines()
    define(_Spark(), dp, cfg.RunConfig(worker, [config]), store=None)  # type: ignore[arg-type]
    with pytest.raises(_Captured) as bronze:
        dp.tables["bronze_orders"]()
    assert bronze.value.options["kafka.sasl.jaas.config"] == jaas
    assert dp.sinks["dlq_topic_dlq_orders"]["kafka.sasl.jaas.config"] == jaas
