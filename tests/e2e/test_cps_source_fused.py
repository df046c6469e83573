"""Cloud Pub/Sub source with ``pipeline.mode=fused``, end to end: Google's Pub/Sub emulator → one
loop that lands each pulled window in bronze while it converts and produces it → a real Apache
Kafka broker, read back with a ``read_committed`` consumer.

The records must be exactly the staged mode's (the same data model); what differs is what is
written (bronze and dead letters, no outbox), how a redelivery is kept out of Kafka (the journal
of produced ids, not an outbox look-up) and how a connector moves between the modes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e.harness import context, run_once, source_config
from e2e.test_cps_source import DATA_MODEL_KEYS, DATA_MODEL_MESSAGES, assert_data_model_examples
from integration.kafka_helpers import consume_all, create_topic
from integration.pubsub_helpers import create_subscription, create_topic_and_subscription, publish, pull_distinct
from pubsub_connect.io.tables import TableRef
from pubsub_connect.pipelines import cps_pull, cps_source, fused_source
from pubsub_connect.pipelines.context import ConnectorError
from pubsub_connect.pipelines.runner.supervisor import run_stages
from pubsub_connect.pipelines.runtime import stages_for

pytestmark = pytest.mark.usefixtures("pubsub_emulator_host")

FUSED = {"pipeline.mode": "fused"}
JSON = "org.apache.kafka.connect.json.JsonConverter"


def seqs_in_kafka(bootstrap: str, topic: str) -> list[int]:
    return sorted(int(dict(r.headers)["seq"]) for r in consume_all(bootstrap, topic))


def bronze_ids(ctx, name: str) -> list[str]:
    return sorted(r.message_id for r in ctx.store.read(TableRef("bronze", name)).select("message_id").collect())


@pytest.mark.compat
def test_one_loop_produces_the_staged_modes_records(spark, kafka_bootstrap: str, tmp_path: Path,
                                                    unique_name: str) -> None:
    """The staged test's data model examples in one fused run: the same keys, values, timestamps
    and round-robin partitions; progress from the fused loop alone; bronze, no outbox."""
    create_topic(kafka_bootstrap, unique_name, partitions=3)
    _, subscription = create_topic_and_subscription(unique_name)
    ids = [publish(unique_name, [m])[0] for m in DATA_MODEL_MESSAGES]  # one at a time: publish order is list order
    connector = source_config(unique_name, subscription, unique_name, **FUSED, **DATA_MODEL_KEYS)
    lines: list[str] = []
    ctx = run_once(spark, kafka_bootstrap, tmp_path, connector, lines)

    assert_data_model_examples(kafka_bootstrap, unique_name)
    assert bronze_ids(ctx, unique_name) == sorted(ids)
    assert not ctx.store.exists(TableRef("outbox", unique_name))
    own = [line.split(" rate=")[0] for line in lines if line.startswith(f"[{unique_name}.") and "] batch=" in line]
    assert own and all(line.startswith(f"[{unique_name}.fused] batch=") for line in own), lines
    assert sum(int(line.rsplit("records=", 1)[1].split()[0]) for line in own) == 6, lines


def test_tolerance_none_produces_nothing_of_the_window_then_all_dead_letters(
        spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    """Under ``errors.tolerance=none`` the fused loop stops with the staged convert's line before
    anything of the window reaches Kafka (the window is not acked: the redelivery test shows what
    becomes of such messages); with ``all`` the same messages, from a second subscription, reach
    Kafka once and the bad ones ``dlq/<name>``."""
    create_topic(kafka_bootstrap, unique_name)
    topic, subscription = create_topic_and_subscription(unique_name)
    second = create_subscription(topic, f"{unique_name}-2")
    ids = [publish(unique_name, [m])[0] for m in [(b"one", {"a": "1"}, None), (b"bad-1", {"message": "clash"}, None),
                                                  (b"two", {"a": "2"}, None), (b"bad-2", {"message": "clash"}, None)]]
    strict = source_config(unique_name, subscription, unique_name, **FUSED, **{"value.converter": JSON})
    with pytest.raises(ConnectorError) as err:
        run_once(spark, kafka_bootstrap, tmp_path, strict)
    message = str(err.value)
    assert message.startswith(f"{unique_name} fused: record message_id {min(ids[1], ids[3])} cannot be converted: "
                              "DuplicateFieldError: "), message
    assert "errors.tolerance=none" in message and "\n" not in message
    assert consume_all(kafka_bootstrap, unique_name) == []
    assert context(spark, kafka_bootstrap, tmp_path).store.count(TableRef("dlq", unique_name)) == 0

    tolerant = source_config(unique_name, second, unique_name, **FUSED, **{"value.converter": JSON,
                                                                           "errors.tolerance": "all"})
    ctx = run_once(spark, kafka_bootstrap, tmp_path, tolerant)
    payloads = sorted(json.loads(r.value)["payload"]["a"] for r in consume_all(kafka_bootstrap, unique_name))
    assert payloads == ["1", "2"]
    dead = ctx.store.read(TableRef("dlq", unique_name)).select("stage", "message_id", "value").collect()
    assert sorted((r.stage, r.message_id, r.value) for r in dead) == sorted(
        [("convert", ids[1], b"bad-1"), ("convert", ids[3], b"bad-2")])


@pytest.mark.parametrize("crash_at", ["ack", "dead_letters"])
def test_a_redelivery_after_the_transaction_is_not_produced_again(
        spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch,
        crash_at: str) -> None:
    """The process dies after a window's Kafka transaction committed: before its ack, or before
    its dead letters were written. Pub/Sub delivers the messages again, and the restarted loop —
    knowing from the marker topic that the window committed — lands them in bronze again but
    produces none of them twice, and the message that cannot be converted reaches ``dlq/<name>``
    (in the second case it is converted again to find it)."""
    create_topic(kafka_bootstrap, unique_name)
    _, subscription = create_topic_and_subscription(unique_name, ack_deadline_seconds=10)
    total = 30
    ids = publish(unique_name, [(f"m{i}".encode(), {"seq": str(i)}, None) for i in range(total)]
                  + [(b"bad", {"message": "clash"}, None)])
    connector = source_config(unique_name, subscription, unique_name, **FUSED, **{
        "value.converter": JSON, "errors.tolerance": "all"})

    def seqs() -> list[int]:
        return sorted(int(json.loads(r.value)["payload"]["seq"]) for r in consume_all(kafka_bootstrap, unique_name))

    class Crash(RuntimeError):
        pass

    def crash(self, *_args) -> None:
        raise Crash("process died after the Kafka transaction")

    with monkeypatch.context() as patch:
        patch.setattr(cps_pull.Puller if crash_at == "ack" else fused_source.FusedPuller,
                      "_ack" if crash_at == "ack" else "_dead_letter", crash)
        with pytest.raises(ConnectorError, match="after the Kafka transaction"):
            run_once(spark, kafka_bootstrap, tmp_path, connector)
    assert seqs() == list(range(total))
    pull_distinct(subscription, set(ids), lambda m: m.message_id, timeout=cps_pull.LEASE_S + 60, hand_back=True)
    ctx = None
    for _ in range(5):
        ctx = run_once(spark, kafka_bootstrap, tmp_path, connector)
        if len(bronze_ids(ctx, unique_name)) >= 2 * len(ids):
            break
    assert seqs() == list(range(total))  # each message once
    assert bronze_ids(ctx, unique_name) == sorted(ids * 2)  # its delivery and its redelivery
    dead = ctx.store.read(TableRef("dlq", unique_name)).select("message_id", "value").collect()
    assert {(r.message_id, r.value) for r in dead} == {(ids[-1], b"bad")}


def test_switching_modes_keeps_every_message_once(spark, kafka_bootstrap: str, tmp_path: Path,
                                                  unique_name: str) -> None:
    """staged (pull only: bronze holds what convert and produce have not seen) → fused (they
    finish bronze first, then the loop takes over) → staged (the loop drains the subscription,
    convert starts at a version of bronze committed for it): each message in Kafka exactly once,
    with round-robin partitions that keep turning across the switches."""
    create_topic(kafka_bootstrap, unique_name, partitions=4)
    _, subscription = create_topic_and_subscription(unique_name)
    staged = source_config(unique_name, subscription, unique_name, **{
        "kafka.record.headers": "true", "kafka.partition.count": "4", "kafka.partition.scheme": "round_robin"})
    fused = source_config(unique_name, subscription, unique_name, **FUSED, **{
        "kafka.record.headers": "true", "kafka.partition.count": "4", "kafka.partition.scheme": "round_robin"})
    lines: list[str] = []

    def send(first: int, count: int) -> None:
        for i in range(first, first + count):  # one at a time: publish order is sequence order
            publish(unique_name, [(f"m{i}".encode(), {"seq": str(i)}, None)])

    send(0, 10)
    ctx = context(spark, kafka_bootstrap, tmp_path, lines)
    run_stages(ctx, staged, [stage for stage in stages_for(staged.kind) if stage.name == "pull"])
    assert consume_all(kafka_bootstrap, unique_name) == []
    send(10, 10)
    run_once(spark, kafka_bootstrap, tmp_path, fused, lines)
    assert seqs_in_kafka(kafka_bootstrap, unique_name) == list(range(20))
    send(20, 10)
    ctx = run_once(spark, kafka_bootstrap, tmp_path, staged, lines)
    send(30, 10)
    ctx = run_once(spark, kafka_bootstrap, tmp_path, staged, lines)

    records = consume_all(kafka_bootstrap, unique_name)
    assert sorted(int(dict(r.headers)["seq"]) for r in records) == list(range(40))
    by_seq = {int(dict(r.headers)["seq"]): r.partition for r in records}
    # the fused mode went on from the staged outbox's count; the staged convert, back, goes on
    # from its outbox's count again (what the fused mode produced is not in it)
    assert [by_seq[i] for i in range(30)] == [i % 4 for i in range(30)]
    assert [(by_seq[30 + i] - by_seq[30]) % 4 for i in range(10)] == [i % 4 for i in range(10)]
    assert len(bronze_ids(ctx, unique_name)) == 40
    assert f"[{unique_name}.fused] taking over from pipeline.mode=staged: convert and produce finish what bronze " \
           "holds first" in lines
    assert f"[{unique_name}.pull] taking over from pipeline.mode=fused: the fused query finishes what the " \
           "subscription holds first" in lines
    assert json.loads((tmp_path / "checkpoints" / unique_name / "mode.json").read_text()) == {"mode": "staged"}
    assert cps_source.FUSED_STAGES[0].takes_over == ("pull", "convert", "produce")
