"""The pull's no-progress verdict, on literal batches of message ids."""

from __future__ import annotations

from pubsub_connect.pipelines.redeliveries import BatchDeliveries, RedeliveryWatch

SUB = "projects/p/subscriptions/s"


def _ids(start: int, stop: int) -> list[str]:
    return [str(i) for i in range(start, stop)]


def test_counts_repeats_of_committed_ids_within_and_across_batches() -> None:
    watch = RedeliveryWatch(window=3)
    assert watch.committed(_ids(0, 10)) == BatchDeliveries(10, 0)
    assert watch.committed(["5", "6", "10", "10"]) == BatchDeliveries(4, 3)  # 5, 6 and the second 10


def test_no_verdict_until_the_window_is_full_nor_below_half_repeats() -> None:
    watch = RedeliveryWatch(window=3)
    watch.committed(_ids(0, 10))
    watch.committed(_ids(0, 10))  # all 10 repeated: 10 of 20, but only two batches so far
    assert watch.verdict(SUB) is None
    watch.committed(_ids(10, 21))  # 10 of 31 repeated
    assert watch.verdict(SUB) is None


def test_verdict_once_per_streak_and_again_after_a_healthy_window() -> None:
    watch = RedeliveryWatch(window=2)
    watch.committed(_ids(0, 10))
    watch.committed(_ids(0, 10))  # 10 of 20: exactly half
    assert watch.verdict(SUB) == (
        "not making progress: 10 of the last 20 messages pulled from projects/p/subscriptions/s were "
        "redeliveries of messages already committed to bronze (their leases expired before their batch was "
        "committed and acked); a batch's commit takes longer than the ack deadline allows: check the load, or "
        "lower cps.streamingPull.flowControlMessages / pipeline.max.records.per.batch")
    watch.committed(_ids(0, 10))
    assert watch.verdict(SUB) is None  # the same streak
    watch.committed(_ids(10, 20))
    watch.committed(_ids(20, 30))
    assert watch.verdict(SUB) is None  # healthy: the streak ended
    watch.committed(_ids(0, 10))
    watch.committed(_ids(10, 20))
    assert watch.verdict(SUB) is not None and watch.verdict(SUB) is None


def test_forgets_the_oldest_ids_beyond_what_it_remembers() -> None:
    watch = RedeliveryWatch(remembered=5, window=1)
    watch.committed(_ids(0, 8))  # remembers 3..7
    assert watch.committed(["3", "7", "0", "2"]) == BatchDeliveries(4, 2)  # 0 and 2 were forgotten
