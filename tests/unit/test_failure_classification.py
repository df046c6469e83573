"""Failure classification by type (``runner.failures.is_transient``): Python exception classes,
librdkafka and gRPC codes, errno values, Java exception classes of a JVM error's cause chain,
and type names quoted in the text of errors that crossed the JVM."""

from __future__ import annotations

import errno
from dataclasses import dataclass

import grpc
import pytest
from confluent_kafka import KafkaError, KafkaException
from google.api_core import exceptions as google

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.io.kafka.admin import KafkaLoginError, KafkaUnreachableError
from pubsub_connect.model.connect import DataError
from pubsub_connect.model.error_text import error_line
from pubsub_connect.pipelines.context import ConnectorError
from pubsub_connect.pipelines.runner.failures import is_transient


@pytest.mark.parametrize(("exc", "transient"), [
    (ConnectionRefusedError("[Errno 111] Connection refused"), True),
    (TimeoutError("no fetch response"), True),
    (OSError(errno.ECONNRESET, "reset by peer"), True),
    (OSError(errno.ENOENT, "no such file"), False),
    (PermissionError(errno.EACCES, "denied"), False),
    (KafkaUnreachableError("no broker answered"), True),
    (KafkaLoginError("SASL authentication failed"), False),
    (DataError("value is not valid JSON"), False),
    (ConfigError("cps.topic is required"), False),
    (ValueError("something else entirely"), False),
    (ConnectorError("t: the topic does not exist"), False),
])
def test_python_exceptions_are_classified_by_their_class_hierarchy(exc: BaseException, transient: bool) -> None:
    assert is_transient(exc) is transient


@pytest.mark.parametrize(("exc", "transient"), [
    (google.ServiceUnavailable("503"), True),
    (google.DeadlineExceeded("504"), True),
    (google.Aborted("409"), True),
    (google.InternalServerError("500"), True),
    (google.TooManyRequests("429"), True),
    (google.RetryError("Timeout of 60.0s exceeded", cause=None), True),
    (google.NotFound("404 Topic not found"), False),
    (google.PermissionDenied("403"), False),
    (google.InvalidArgument("400"), False),
    (google.Unauthenticated("401"), False),
])
def test_google_api_errors_are_classified_by_type(exc: BaseException, transient: bool) -> None:
    assert is_transient(exc) is transient


@pytest.mark.parametrize(("error", "transient"), [
    (KafkaError(KafkaError._TRANSPORT), True),
    (KafkaError(KafkaError._ALL_BROKERS_DOWN), True),
    (KafkaError(KafkaError._TIMED_OUT), True),
    (KafkaError(KafkaError._NOENT, "Failed to query partition leaders: No leaders found"), True),
    (KafkaError(KafkaError.LEADER_NOT_AVAILABLE), True),
    (KafkaError(KafkaError._MSG_TIMED_OUT, retriable=True), True),  # flagged retriable by librdkafka
    (KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), False),
    (KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED), False),
    (KafkaError(KafkaError._INVALID_ARG), False),
    (KafkaError(KafkaError.INVALID_TIMESTAMP), False),
    (KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), False),
    (KafkaError(KafkaError.RECORD_LIST_TOO_LARGE), False),
    (KafkaError(KafkaError.INVALID_RECORD), False),
])
def test_kafka_exceptions_are_classified_by_librdkafka_code(error: KafkaError, transient: bool) -> None:
    assert is_transient(KafkaException(error)) is transient


class _RpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode):
        super().__init__()
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


@pytest.mark.parametrize(("code", "transient"), [
    (grpc.StatusCode.UNAVAILABLE, True),
    (grpc.StatusCode.DEADLINE_EXCEEDED, True),
    (grpc.StatusCode.NOT_FOUND, False),
    (grpc.StatusCode.PERMISSION_DENIED, False),
    (grpc.StatusCode.INVALID_ARGUMENT, False),
])
def test_grpc_errors_are_classified_by_status_code(code: grpc.StatusCode, transient: bool) -> None:
    assert is_transient(_RpcError(code)) is transient


def test_the_cause_chain_counts_but_a_context_hidden_by_from_none_does_not() -> None:
    try:
        try:
            raise ConnectionRefusedError("refused")
        except ConnectionRefusedError as exc:
            raise ConnectorError("publishing the last files failed") from exc
    except ConnectorError as err:
        assert is_transient(err)
    try:
        try:
            raise ConnectionRefusedError("refused")
        except ConnectionRefusedError:
            raise ConnectorError("the login was refused") from None
    except ConnectorError as err:
        assert not is_transient(err)


@dataclass
class JavaClass:
    """What py4j gives for ``throwable.getClass()``."""

    name: str
    parent: JavaClass | None = None

    def getName(self) -> str:
        return self.name

    def getSuperclass(self) -> JavaClass | None:
        return self.parent


@dataclass
class JavaThrowable:
    cls: JavaClass
    cause: JavaThrowable | None = None

    def getClass(self) -> JavaClass:
        return self.cls

    def getCause(self) -> JavaThrowable | None:
        return self.cause


THROWABLE = JavaClass("java.lang.Throwable")
SPARK = JavaClass("org.apache.spark.SparkException", JavaClass("java.lang.Exception", THROWABLE))
KAFKA = JavaClass("org.apache.kafka.common.KafkaException", JavaClass("java.lang.RuntimeException", THROWABLE))
RETRIABLE = JavaClass("org.apache.kafka.common.errors.RetriableException",
                      JavaClass("org.apache.kafka.common.errors.ApiException", KAFKA))


class Py4JJavaError(Exception):
    """Like py4j's: the Java exception is on ``java_exception``; the text says only "An error
    occurred while calling …"."""

    def __init__(self, java_exception: JavaThrowable):
        super().__init__("An error occurred while calling o123.awaitTermination.")
        self.java_exception = java_exception


class StreamingQueryException(Exception):
    """Like pyspark's CapturedException: the Java exception is on ``_origin``."""

    def __init__(self, origin: JavaThrowable):
        super().__init__("[STREAM_FAILED] Query terminated with exception")
        self._origin = origin


@pytest.mark.parametrize(("cause", "transient"), [
    (JavaClass("org.apache.kafka.common.errors.SomeFutureRetriableException", RETRIABLE), True),  # by its superclass
    (JavaClass("java.net.ConnectException", JavaClass("java.net.SocketException")), True),
    (JavaClass("org.apache.kafka.common.errors.TimeoutException", RETRIABLE), True),
    (JavaClass("java.util.concurrent.TimeoutException"), True),
    (JavaClass("org.apache.kafka.common.errors.SaslAuthenticationException",
               JavaClass("org.apache.kafka.common.errors.AuthenticationException")), False),
    (JavaClass("org.apache.kafka.common.errors.TopicAuthorizationException",
               JavaClass("org.apache.kafka.common.errors.AuthorizationException")), False),
    (JavaClass("java.lang.IllegalArgumentException"), False),
])
def test_jvm_errors_are_classified_by_the_java_classes_of_their_cause_chain(cause: JavaClass, transient: bool) -> None:
    chain = JavaThrowable(SPARK, JavaThrowable(SPARK, JavaThrowable(cause)))
    assert is_transient(Py4JJavaError(chain)) is transient
    assert is_transient(StreamingQueryException(chain)) is transient


@pytest.mark.parametrize(("text", "transient"), [
    ("Caused by: java.net.ConnectException: Connection refused", True),
    ("Caused by: org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node assignment", True),
    ("grpc._channel._InactiveRpcError: <_InactiveRpcError of RPC that terminated with:\n"
     "\tstatus = StatusCode.UNAVAILABLE\n\tdetails = \"failed to connect to all addresses\">", True),
    ("grpc._channel._InactiveRpcError: <_InactiveRpcError of RPC that terminated with:\n"
     "\tstatus = StatusCode.PERMISSION_DENIED\n\tdetails = \"Connection refused by policy\">", False),
    ("org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized to access topics: [t]", False),
    ("cimpl.KafkaException: KafkaError{code=TOPIC_AUTHORIZATION_FAILED,val=29,str=\"Timed out\"}", False),
    ("the service said: Connection refused", False),  # words without a type or code decide nothing
    # Spark's one untyped failure, in the forms it reaches the driver: a JVM line, or bare
    ("org.apache.spark.SparkException: Python worker failed to connect back.", True),
    ("Python worker failed to connect back.", True),
    ("[STREAM_FAILED] Query [id = 1] terminated with exception: Python worker failed to connect back.", True),
    # a record Kafka refuses is refused again: permanent, even beside a transient sign
    ("cimpl.KafkaException: KafkaError{code=INVALID_TIMESTAMP,val=32,str=\"Broker: Invalid timestamp\"}", False),
    ("KafkaError{code=MSG_SIZE_TOO_LARGE,val=10} after KafkaError{code=_TRANSPORT,val=-195}", False),
    ("Caused by: org.apache.kafka.common.errors.RecordTooLargeException: The message is 2000000 bytes; "
     "java.net.ConnectException: Connection refused", False),
    ("org.apache.kafka.common.errors.InvalidTimestampException: Timestamp 4102444800000 of message with offset 0 "
     "is out of range; java.net.ConnectException: Connection refused", False),
    ("org.apache.kafka.common.errors.RecordBatchTooLargeException: too large; TimeoutError: slow", False),
    ("org.apache.kafka.common.errors.InvalidRecordException: Compacted topic cannot accept message without "
     "key; java.net.ConnectException: Connection refused", False),
    # the produce stage's stop line, as it crosses the JVM
    ("pubsub_connect.pipelines.context.ConnectorError: record message_id 7 cannot be produced to t: "
     "InvalidTimestampException: Kafka refused the record (INVALID_TIMESTAMP): its timestamp ...; "
     "TimeoutError: waiting", False),
])
def test_type_and_code_names_quoted_in_an_errors_text_decide(text: str, transient: bool) -> None:
    assert is_transient(text) is transient
    assert is_transient(RuntimeError(text)) is transient


@pytest.mark.parametrize("code", ["INVALID_TIMESTAMP", "MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_RECORD"])
def test_a_record_kafka_refuses_outweighs_a_transient_sign(code: str) -> None:
    """A batch that failed on a refused record and also lost its connection is not restarted:
    the record would be refused again, in a restart loop."""
    assert not is_transient(f"KafkaError{{code={code},val=1}}; then KafkaError{{code=_TRANSPORT,val=-195}}")
    assert not is_transient(KafkaException(KafkaError(getattr(KafkaError, code), retriable=True)))


def test_error_line_shows_our_innermost_message() -> None:
    text = ("org.apache.spark.sql.streaming.StreamingQueryException: [FOREACH_BATCH_USER_FUNCTION_ERROR]\n"
            "pubsub_connect.pipelines.context.ConnectorError: publish of batch 3 failed: PublishError: 1 of 1 "
            "message(s) not published")
    assert error_line(text) == "publish of batch 3 failed: PublishError: 1 of 1 message(s) not published"
