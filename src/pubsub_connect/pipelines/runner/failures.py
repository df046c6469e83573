"""Which stage failures a restart can fix (the one line shown for a failure is
:func:`pubsub_connect.model.error_text.error_line`).

Why by type: a failure is transient when a service was unreachable or slow (gRPC UNAVAILABLE,
a Kafka broker down, a refused connection, a timeout) and permanent when the data, the
configuration, a resource or a permission is wrong. Both are told apart by what the clients
say they are: exception types (their whole class hierarchy), librdkafka error codes, gRPC status
codes, errno values and, for errors from the JVM, the Java exception classes of the cause chain.

Why type *names* are also read from error text: an error raised inside ``foreachBatch`` crosses
the JVM (Python worker → JVM → ``StreamingQueryException``) and reaches the driver as text, so its
type survives only as the ``module.Type: message`` lines of the traceback it carries; likewise
our own errors quote the error they wrap (``PublishError: …; first: RetryError: …``). Those
names and the upper-case librdkafka and gRPC code names (``code=_TRANSPORT``,
``StatusCode.UNAVAILABLE``) are looked up in the tables below; the rest of the message is never
read, except for the one Spark failure that has no type of its own
(:data:`TRANSIENT_SPARK_FAILURES`). Permanent signs win over transient ones (a bad record that
also timed out is still a bad record); with no sign at all (``ConnectorError`` alone,
``ValueError``…) the failure is permanent.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator

#: Exception type names (any class of the exception's hierarchy, or named in its text) meaning a
#: service was unreachable or slow: Python's connection/timeout errors (botocore's own
#: ``ConnectionError`` included), ``google.api_core.exceptions`` for a gRPC/HTTP service that was
#: unavailable, overloaded or retried until its deadline, our Kafka reachability check, and the
#: Java client and network exceptions a Spark Kafka source or sink fails with.
TRANSIENT_TYPES = frozenset({
    # Python
    "ConnectionError", "TimeoutError", "KafkaUnreachableError",
    # ours: no URL of a Schema Registry converter's schema.registry.url answered (io.schema_registry)
    "SchemaRegistryUnreachableError",
    # ours: a staged stage waiting for its connector's hand-over from the fused mode (pipelines.modes)
    "HandOverPendingError",
    # google.api_core.exceptions
    "ServiceUnavailable", "DeadlineExceeded", "Aborted", "InternalServerError", "TooManyRequests",
    "GatewayTimeout", "RetryError",
    # Java: java.net, java.util.concurrent and org.apache.kafka.common.errors.RetriableException kin
    "ConnectException", "SocketTimeoutException", "SocketException", "TimeoutException",
    "RetriableException", "NetworkException", "DisconnectException", "LeaderNotAvailableException",
    "NotLeaderOrFollowerException", "NotLeaderForPartitionException", "BrokerNotAvailableException",
    "CoordinatorNotAvailableException", "NotEnoughReplicasException",
})

#: Exception type names a restart cannot fix: bad records, bad configuration, missing resources,
#: refused credentials or permissions, lost Kafka data.
PERMANENT_TYPES = frozenset({
    # ours (model, config, io); SchemaRegistryError: the registry refused the connector (401, 403, …)
    "DataError", "ConfigError", "KafkaOptionsError", "KafkaDataLossError", "KafkaLoginError", "SchemaRegistryError",
    # Python (KafkaLoginError is one; PermissionError is an OSError, which is otherwise looked at by errno)
    "PermissionError",
    # google.api_core.exceptions
    "NotFound", "PermissionDenied", "InvalidArgument", "Unauthenticated", "Forbidden",
    # Java: org.apache.kafka.common.errors
    "AuthenticationException", "SaslAuthenticationException", "SslAuthenticationException",
    "AuthorizationException", "TopicAuthorizationException", "GroupAuthorizationException",
    "ClusterAuthorizationException", "TransactionalIdAuthorizationException",
    # Java: a record Kafka refuses (how a refused record's dead letter names its reason, too)
    "InvalidTimestampException", "RecordTooLargeException", "RecordBatchTooLargeException",
    "InvalidRecordException",
})

#: librdkafka error codes (``KafkaError.name()``, ``KafkaError{code=…}`` in a text) of an unreachable or
#: leaderless cluster. ``_NOENT`` is how librdkafka reports "no leaders found" while listing
#: offsets with the brokers down. Codes librdkafka itself flags retriable count too.
TRANSIENT_KAFKA_CODES = frozenset({
    "_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "_NOENT", "LEADER_NOT_AVAILABLE",
    "NOT_LEADER_FOR_PARTITION", "NOT_LEADER_OR_FOLLOWER",
})

#: librdkafka error codes of refused credentials or permissions, and of a record Kafka refuses
#: for good (:data:`~pubsub_connect.io.kafka.record_rejects.RECORD_REJECTS`: sent again, it is
#: refused again).
PERMANENT_KAFKA_CODES = frozenset({
    "SASL_AUTHENTICATION_FAILED", "_AUTHENTICATION", "TOPIC_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
    "INVALID_TIMESTAMP", "MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_RECORD",
})

#: gRPC status codes (``grpc.StatusCode`` names).
TRANSIENT_GRPC_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})
PERMANENT_GRPC_CODES = frozenset({"NOT_FOUND", "PERMISSION_DENIED", "INVALID_ARGUMENT", "UNAUTHENTICATED"})

#: errno values of an ``OSError`` that is about the network, not the file system.
TRANSIENT_ERRNOS = frozenset({
    errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EHOSTUNREACH,
    errno.ENETUNREACH, errno.ENETDOWN, errno.EPIPE,
})

#: Spark failures that carry no type of their own, by their fixed message: Spark gives a new
#: Python worker a hard-coded 10 s to connect back, which an overloaded machine misses. The
#: message reaches the driver in several wrappers (a JVM ``SparkException`` line, or bare as
#: the message of the batch's failure), so it is looked for on its own.
TRANSIENT_SPARK_FAILURES = ("Python worker failed to connect back",)

TRANSIENT, PERMANENT = "transient", "permanent"

_TYPE_NAME = re.compile(r"(?<![\w.])((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)(?=: )")
_CODE = re.compile(r"(?<!\w)(_?[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*)\b")


def is_transient(failure: BaseException | str) -> bool:
    """Whether a stage failure is an unreachable service (restart the stage) rather than bad
    data or configuration (stop and say why). ``failure`` is the exception, or its text."""
    signs = set(failure_signs(failure))
    return PERMANENT not in signs and TRANSIENT in signs


def failure_signs(failure: BaseException | str) -> Iterator[str]:
    """``TRANSIENT`` / ``PERMANENT`` for every sign found in ``failure`` and its causes."""
    if isinstance(failure, str):
        yield from _text_signs(failure)
        return
    seen: set[int] = set()
    pending: list[BaseException | None] = [failure]
    while pending:
        exc = pending.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        yield from _type_signs(exc)
        yield from _text_signs(str(exc))
        yield from _java_signs(exc)
        pending.append(exc.__cause__)
        if not exc.__suppress_context__:  # ``raise … from None`` hid it, as a traceback does
            pending.append(exc.__context__)


def _kind_of_type(name: str) -> str | None:
    simple = name.rsplit(".", 1)[-1]
    if simple in PERMANENT_TYPES:
        return PERMANENT
    if simple in TRANSIENT_TYPES:
        return TRANSIENT
    return None


def _kind_of_code(code: str) -> str | None:
    if code in PERMANENT_KAFKA_CODES or code in PERMANENT_GRPC_CODES:
        return PERMANENT
    if code in TRANSIENT_KAFKA_CODES or code in TRANSIENT_GRPC_CODES:
        return TRANSIENT
    return None


def _type_signs(exc: BaseException) -> Iterator[str]:
    """Signs of a live Python exception: its class hierarchy, a network errno, the librdkafka
    error of a ``KafkaException`` and the status code of a ``grpc.RpcError``."""
    for cls in type(exc).__mro__:
        kind = _kind_of_type(cls.__name__)
        if kind:
            yield kind
    if isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS:
        yield TRANSIENT
    kafka_error = exc.args[0] if exc.args else None
    if callable(getattr(kafka_error, "retriable", None)) and callable(getattr(kafka_error, "name", None)):
        kind = _kind_of_code(str(kafka_error.name()))
        if kind:
            yield kind
        elif kafka_error.retriable():
            yield TRANSIENT
    if any(cls.__name__ == "RpcError" and cls.__module__.startswith("grpc") for cls in type(exc).__mro__):
        try:
            kind = _kind_of_code(str(getattr(exc.code(), "name", "")))  # type: ignore[attr-defined]
        except Exception:  # an RpcError without a status (not a call's): its text may still say
            kind = None
        if kind:
            yield kind


def _text_signs(text: str) -> Iterator[str]:
    """Signs in an error's text: the exception type names it quotes (``pkg.Type: message``),
    librdkafka ``code=…`` and gRPC status codes, and the untyped Spark failures."""
    for name in _TYPE_NAME.findall(text):
        kind = _kind_of_type(name)
        if kind:
            yield kind
    for code in _CODE.findall(text):
        kind = _kind_of_code(code)
        if kind:
            yield kind
    if any(failure in text for failure in TRANSIENT_SPARK_FAILURES):
        yield TRANSIENT


def _java_signs(exc: BaseException) -> Iterator[str]:
    """Signs of an error from the JVM: the Java classes (and their superclasses, e.g. Kafka's
    ``RetriableException``) of the cause chain of py4j's ``Py4JJavaError.java_exception`` or
    pyspark's ``CapturedException._origin``. Without a JVM (Spark Connect) the text is all
    there is."""
    throwable = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    depth = 0
    try:
        while throwable is not None and depth < 20:
            cls = throwable.getClass()
            while cls is not None:
                kind = _kind_of_type(str(cls.getName()))
                if kind:
                    yield kind
                cls = cls.getSuperclass()
            throwable = throwable.getCause()
            depth += 1
    except Exception:  # a gone JVM: the error's text still holds the class names
        return
