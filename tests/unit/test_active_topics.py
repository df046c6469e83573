"""Connect's topic tracking (KIP-558) from micro-batch progress, in the shapes Spark reports it
(offsets as JSON text, a first batch without a start): which topics a batch shows a connector
used, what a worker keeps across a restart, and the endpoints' 403s when the worker turns it off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pubsub_connect.config import loader as cfg
from pubsub_connect.connect.active_topics import ActiveTopics
from pubsub_connect.connect.herder import HerderError
from pubsub_connect.io.tables import checkpoint_location
from pubsub_connect.pipelines.runner.progress import ProgressPrinter, kafka_offsets, kafka_topics_read
from unit.test_connect_herder import Stages, make_herder, sink


def kafka_progress(rows: int, start: dict[str, Any] | None, end: dict[str, Any], batch: int = 1) -> dict[str, Any]:
    return {"batchId": batch, "numInputRows": rows, "sources": [
        {"description": "KafkaV2[SubscribePattern[t.*]]", "startOffset": json.dumps(start),
         "endOffset": json.dumps(end)}]}


def test_topics_read_are_those_whose_offsets_moved() -> None:
    no_initial = lambda: None  # noqa: E731
    moved = kafka_progress(5, {"a": {"0": 3, "1": 2}, "b": {"0": 7}}, {"a": {"0": 3, "1": 4}, "b": {"0": 7}})
    assert kafka_topics_read(moved, no_initial) == {"a"}
    # a partition or topic that appeared since the start began at its beginning
    assert kafka_topics_read(kafka_progress(2, {"a": {"0": 3}}, {"a": {"0": 3, "1": 1}, "c": {"0": 1}}),
                             no_initial) == {"a", "c"}
    # the first batch: Spark reports no start ("null"); the start is the checkpoint's initial offsets
    first = kafka_progress(3, None, {"a": {"0": 9}, "b": {"0": 4}}, batch=0)
    assert kafka_topics_read(first, lambda: {"a": {"0": 9}, "b": {"0": 1}}) == {"b"}
    assert kafka_topics_read(first, no_initial) == {"a", "b"}
    # no records, no topic (an empty trigger), and a Delta source's offsets are not Kafka's
    assert kafka_topics_read(kafka_progress(0, {"a": {"0": 1}}, {"a": {"0": 2}}), no_initial) == set()
    delta = {"batchId": 2, "numInputRows": 4, "sources": [{"description": "DeltaSource[file:/x]",
             "startOffset": '{"sourceVersion":1,"reservoirId":"r","reservoirVersion":3,"index":-1}',
             "endOffset": '{"sourceVersion":1,"reservoirId":"r","reservoirVersion":4,"index":-1}'}]}
    assert kafka_topics_read(delta, no_initial) == set()
    assert kafka_offsets("null") is None and kafka_offsets({"a": {"0": "7"}}) == {"a": {"0": 7}}


def test_observe_records_what_each_kind_of_connector_used(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    tracked = ActiveTopics(root)
    sink_config = cfg.validate_connector({**sink("s"), "topics": "a,b"}, "s")
    initial = Path(checkpoint_location(root, "s", "ingest")) / "sources" / "0" / "0"
    initial.parent.mkdir(parents=True)
    initial.write_text('\x00v1\n{"a":{"0":0},"b":{"0":5}}')  # as Spark's Kafka source writes it
    tracked.observe(sink_config, "ingest", kafka_progress(2, None, {"a": {"0": 2}, "b": {"0": 5}}, batch=0))
    assert tracked.topics("s") == ["a"]
    tracked.observe(sink_config, "convert", {"batchId": 0, "numInputRows": 2, "sources": []})
    tracked.observe(sink_config, "ingest",
                    kafka_progress(1, {"a": {"0": 2}, "b": {"0": 5}}, {"a": {"0": 2}, "b": {"0": 6}}))
    assert tracked.topics("s") == ["a", "b"]

    source = cfg.validate_connector({"name": "src", "connector.class": "CloudPubSubSourceConnector",
                                     "kafka.topic": "out", "cps.project": "p", "cps.subscription": "sub"}, "src")
    tracked.observe(source, "pull", {"batchId": 0, "numInputRows": 3, "sources": []})
    tracked.observe(source, "produce", {"batchId": 0, "numInputRows": 0, "sources": []})
    assert tracked.topics("src") == []
    tracked.observe(source, "produce", {"batchId": 1, "numInputRows": 3, "sources": []})
    assert tracked.topics("src") == ["out"]

    # a restarted worker knows them; a reset forgets them until used again
    again = ActiveTopics(root)
    assert again.topics("s") == ["a", "b"] and again.topics("src") == ["out"]
    again.reset("s")
    assert again.topics("s") == [] and ActiveTopics(root).topics("s") == []
    again.observe(sink_config, "ingest", kafka_progress(1, {"a": {"0": 2}}, {"a": {"0": 3}}))
    assert ActiveTopics(root).topics("s") == ["a"]


class Spark41Progress(dict):
    """What PySpark 4.1's progress object holds for a Kafka source's first batch: offsets as
    Python's text of a dict and a missing start as "None"; its ``json`` is the JVM's report."""

    def __init__(self, end: dict[str, Any]):
        super().__init__(batchId=0, numInputRows=3, sources=[
            {"description": "KafkaV2[Subscribe[a]]", "startOffset": "None", "endOffset": str(end)}])
        self.json = json.dumps({"batchId": 0, "numInputRows": 3, "sources": [
            {"description": "KafkaV2[Subscribe[a]]", "startOffset": None, "endOffset": end}]})


class OneQuery:
    name = "s.ingest"

    def __init__(self, progress: list[dict[str, Any]]):
        self.recentProgress = progress


def test_the_printer_observes_progress_as_spark_reports_it_in_json() -> None:
    observed: list[tuple[str, set[str]]] = []
    printer = ProgressPrinter(lambda line: None, lambda stage, progress: observed.append(
        (stage, kafka_topics_read(progress, lambda: None))), lambda name: name.removeprefix("s."))
    printer.poll([OneQuery([Spark41Progress({"a": {"0": 3}})])])
    # a stage that is not a Spark query reports a plain dict
    printer.poll([OneQuery([kafka_progress(1, {"a": {"0": 3}}, {"a": {"0": 3}, "b": {"0": 1}})])])
    assert observed == [("ingest", {"a"}), ("ingest", {"b"})]


def test_a_batch_with_data_after_an_idle_report_of_the_same_id_is_printed_and_observed() -> None:
    """Spark reports an idle trigger under the id of the batch still to come: that batch, when it
    runs with data, reports the same id, and must not be taken for the idle report."""
    lines: list[str] = []
    observed: list[int] = []
    printer = ProgressPrinter(lines.append, lambda stage, progress: observed.append(progress["numInputRows"]))
    idle = {"batchId": 0, "numInputRows": 0, "timestamp": "2026-12-07T02:18:04.319Z", "sources": []}
    ran = {"batchId": 0, "numInputRows": 4, "timestamp": "2026-12-07T02:18:12.300Z", "sources": []}
    printer.poll([OneQuery([idle])])
    printer.poll([OneQuery([idle, ran])])
    printer.poll([OneQuery([idle, ran])])
    assert (lines, observed) == (["[s.ingest] batch=0 records=4 rate=0/s"], [0, 4])


@pytest.mark.parametrize(("settings", "get", "reset"), [
    ({"topic.tracking.enable": "false"}, "Topic tracking is disabled.", "Topic tracking is disabled."),
    ({"topic.tracking.allow.reset": "false"}, None, "Topic tracking reset is disabled."),
])
def test_turned_off_by_the_worker(tmp_path: Path, settings: dict[str, str], get: str | None, reset: str) -> None:
    worker = cfg.validate_worker({"storage.root": str(tmp_path / "root"), **settings})
    herder = make_herder(worker, Stages())
    if get is None:
        assert herder.topics("a") == {"a": {"topics": []}}
    else:
        with pytest.raises(HerderError) as refused:
            herder.topics("a")
        assert (refused.value.status, str(refused.value)) == (403, get)
    with pytest.raises(HerderError) as refused:
        herder.reset_topics("a")
    assert (refused.value.status, str(refused.value)) == (403, reset)
