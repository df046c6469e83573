"""Which produce errors refuse a record for good (``io.kafka.record_rejects``), and the compact
form a transaction marker lists a batch's refused records in."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from pubsub_connect.io.kafka.record_rejects import (
    RECORD_REJECTS,
    decode_rejects,
    encode_rejects,
    is_record_reject,
    reject_reason,
)


@pytest.mark.parametrize(("error", "refused"), [
    # what librdkafka reports for a record the broker or the producer refuses (measured)
    (KafkaError(KafkaError.INVALID_TIMESTAMP), True),
    (KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), True),
    (KafkaError(KafkaError.RECORD_LIST_TOO_LARGE), True),
    (KafkaError(KafkaError.INVALID_RECORD), True),
    # the cluster, the transaction, fencing: the batch fails and its stage restarts
    (KafkaError(KafkaError._TRANSPORT), False),
    (KafkaError(KafkaError._MSG_TIMED_OUT, retriable=True), False),
    (KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, retriable=True), False),
    (KafkaError(KafkaError._PURGE_QUEUE), False),
    (KafkaError(KafkaError._STATE), False),
    (KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER), False),
    (KafkaError(KafkaError._FENCED, fatal=True), False),
    (KafkaError(KafkaError.PRODUCER_FENCED), False),
    # a record-level code librdkafka flags retriable or fatal is not taken for one
    (KafkaError(KafkaError.INVALID_TIMESTAMP, retriable=True), False),
    (KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, fatal=True), False),
    (None, False),
])
def test_only_record_level_codes_that_are_neither_retriable_nor_fatal_refuse_a_record(
        error: KafkaError | None, refused: bool) -> None:
    assert is_record_reject(error) is refused


def test_every_code_names_its_java_exception_and_a_reason() -> None:
    assert {code: kind.java_class for code, kind in RECORD_REJECTS.items()} == {
        "INVALID_TIMESTAMP": "InvalidTimestampException", "MSG_SIZE_TOO_LARGE": "RecordTooLargeException",
        "RECORD_LIST_TOO_LARGE": "RecordBatchTooLargeException", "INVALID_RECORD": "InvalidRecordException"}
    assert reject_reason("INVALID_TIMESTAMP") == (
        "Kafka refused the record (INVALID_TIMESTAMP): the record's timestamp is further from the broker's clock "
        "than the topic accepts (message.timestamp.after.max.ms, message.timestamp.before.max.ms)")


def test_the_marker_lists_refused_records_as_runs_per_code() -> None:
    rejected = {0: "INVALID_TIMESTAMP", 1: "INVALID_TIMESTAMP", 2: "INVALID_TIMESTAMP", 5: "INVALID_TIMESTAMP",
                3: "MSG_SIZE_TOO_LARGE", 4: "MSG_SIZE_TOO_LARGE", 9: "MSG_SIZE_TOO_LARGE"}
    encoded = encode_rejects(rejected)
    assert encoded == {"INVALID_TIMESTAMP": [[0, 2], [5, 5]], "MSG_SIZE_TOO_LARGE": [[3, 4], [9, 9]]}
    assert decode_rejects(encoded) == rejected
    assert encode_rejects({}) == {} and decode_rejects(None) == {} and decode_rejects({}) == {}


def test_a_batch_of_refused_records_costs_the_marker_a_few_bytes() -> None:
    import json

    everything = dict.fromkeys(range(100_000), "MSG_SIZE_TOO_LARGE")
    assert json.dumps(encode_rejects(everything)) == '{"MSG_SIZE_TOO_LARGE": [[0, 99999]]}'
    assert decode_rejects(json.loads(json.dumps(encode_rejects(everything)))) == everything
