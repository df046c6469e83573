"""How maintenance dates an outbox row, which has no time column: the ``(version, time)`` samples
each run keeps. A lookup answers the newest version sampled at or before a time; what is kept
stays a few hundred samples whatever the interval, and never dates a row earlier than it was."""

from __future__ import annotations

from pathlib import Path

from pubsub_connect.pipelines.maintenance import KEPT_SAMPLES, VersionSamples

HOUR = 3_600_000


def test_a_lookup_answers_the_newest_version_sampled_by_then(tmp_path: Path) -> None:
    samples = VersionSamples(tmp_path / "maintenance.json")
    for hour, version in enumerate((3, 10, 42)):
        samples.add("outbox", version, hour * HOUR, 24 * HOUR)
    assert samples.version_at("outbox", -1) is None
    assert [samples.version_at("outbox", at) for at in (0, HOUR - 1, HOUR, 5 * HOUR)] == [3, 3, 10, 42]
    samples.save()
    assert VersionSamples(tmp_path / "maintenance.json").samples == {"outbox": [[3, 0], [10, HOUR], [42, 2 * HOUR]]}


def test_kept_samples_stay_bounded_and_the_answer_only_gets_older(tmp_path: Path) -> None:
    samples = VersionSamples(tmp_path / "maintenance.json")
    retention = 24 * HOUR
    every = 500  # a run every half second, for three days
    dense = []
    for run in range(3 * 24 * HOUR // every // 1000):
        now = run * every * 1000
        samples.add("outbox", run, now, retention)
        dense.append((run, now))
        assert len(samples.samples["outbox"]) <= KEPT_SAMPLES + 2
    now = dense[-1][1]
    exact = max(version for version, at in dense if at <= now - retention)
    kept = samples.version_at("outbox", now - retention)
    assert kept is not None and exact - kept <= retention / KEPT_SAMPLES / (every * 1000) + 1 and kept <= exact
    # no retention: one sample; retention 0: the newest answers at once
    samples.add("bronze", 7, now, -1)
    samples.add("bronze", 8, now + 1, -1)
    assert samples.samples["bronze"] == [[8, now + 1]]
    samples.add("dlq", 5, now, 0)
    assert samples.version_at("dlq", now) == 5
