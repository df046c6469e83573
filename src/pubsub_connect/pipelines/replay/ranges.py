"""What a replay takes from bronze: offset ranges or a time range, in the form each connector's
bronze can be cut by.

Why per connector: a sink's bronze holds Kafka records (topic, partition, offset, the record's
timestamp); a Lite source's holds Lite messages (a Lite partition and offset, publish and event
times); a Cloud Pub/Sub source's holds messages that have no offsets at all, only their ids and
publish times. Every bronze table has ``ingest_time``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import CPS_SINK, CPS_SOURCE, LITE_SINK, LITE_SOURCE

#: The last offset of a range left open: to the end of bronze.
OPEN_END = 2**63 - 1


@dataclass(frozen=True)
class RangeForm:
    """How a connector's bronze is cut: ``offsets``, the form of an offset range (None: its
    bronze has no offsets), and the columns a time range may be on (the first by default)."""

    offsets: str | None
    time_columns: tuple[str, ...]

    def neither(self) -> str:
        """The error when neither offsets nor a time range is given."""
        if self.offsets:
            return f"replay: give --offsets {self.offsets}, or --since/--until"
        return f"replay: give --since/--until (on {' or '.join(self.time_columns)})"


SINK_FORM = RangeForm("topic:partition:first-last", ("timestamp", "ingest_time"))
FORMS = {
    CPS_SINK: SINK_FORM,
    LITE_SINK: SINK_FORM,
    CPS_SOURCE: RangeForm(None, ("publish_time", "ingest_time")),
    LITE_SOURCE: RangeForm("partition:first-last", ("publish_time", "event_time", "ingest_time")),
}


def range_form(kind: str) -> RangeForm:
    try:
        return FORMS[kind]
    except KeyError:
        raise ConfigError(f"replay publishes a connector's bronze again: a {kind} has none") from None


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``first``..``last`` (both included) of one partition: a Kafka topic's, or a Lite
    partition (``topic`` empty: a Lite source's bronze has no topic column)."""

    topic: str
    partition: int
    first: int
    last: int

    @classmethod
    def parse(cls, text: str, form: str = SINK_FORM.offsets or "") -> OffsetRange:
        """``form``: ``topic:partition:first-last`` or ``partition:first-last`` (``last`` may be
        left out: to the end of bronze)."""
        head, _, rest = text.rpartition(":")
        topic, _, partition = head.rpartition(":") if form.startswith("topic:") else ("", "", head)
        first, _, last = rest.partition("-")
        example = "orders:0:1000-1999" if form.startswith("topic:") else "0:1000-1999"
        try:
            return cls(topic, int(partition), int(first), int(last) if last else OPEN_END)
        except ValueError:
            raise ConfigError(f"--offsets {text!r}: give {form}, e.g. {example}") from None

    def condition(self) -> Column:
        chosen = (F.col("partition") == self.partition) & F.col("offset").between(self.first, self.last)
        return (F.col("topic") == self.topic) & chosen if self.topic else chosen

    def text(self) -> str:
        last = "" if self.last == OPEN_END else str(self.last)
        return f"{self.topic}:{self.partition}:{self.first}-{last}" if self.topic else \
            f"{self.partition}:{self.first}-{last}"


@dataclass(frozen=True)
class ReplayRange:
    """What to replay: offset ranges, or a time range ``[since, until)`` on ``time_column``."""

    offsets: tuple[OffsetRange, ...] = ()
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    time_column: str = "timestamp"

    def condition(self) -> Column:
        if self.offsets:
            chosen = self.offsets[0].condition()
            for more in self.offsets[1:]:
                chosen = chosen | more.condition()
            return chosen
        column = F.col(self.time_column)
        chosen = F.lit(True)
        if self.since is not None:
            chosen = chosen & (column >= F.lit(self.since))
        if self.until is not None:
            chosen = chosen & (column < F.lit(self.until))
        return chosen

    def text(self) -> str:
        """The range as the command line gives it: part of what names a replay."""
        if self.offsets:
            return "offsets " + " ".join(offset.text() for offset in self.offsets)
        since = self.since.isoformat() if self.since else ""
        until = self.until.isoformat() if self.until else ""
        return f"{self.time_column} [{since}, {until})"


def parse_time(text: str | None) -> dt.datetime | None:
    """An ISO-8601 instant (``2026-12-05T10:00:00Z``); without a zone, UTC."""
    if not text:
        return None
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"replay: {text!r} is not an ISO-8601 time (e.g. 2026-12-05T10:00:00Z)") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def replay_range(offsets: Sequence[str], since: str | None, until: str | None, time_column: str | None,
                 kind: str = CPS_SINK) -> ReplayRange:
    """The command line's range for a connector of ``kind``; ``time_column`` None: its default."""
    form = range_form(kind)
    if not offsets and not since and not until:
        raise ConfigError(form.neither())
    if offsets and (since or until):
        raise ConfigError("replay: give offsets or a time range, not both")
    if offsets and not form.offsets:
        raise ConfigError(f"replay: a {kind}'s bronze has no offsets: {form.neither().removeprefix('replay: ')}")
    column = time_column or form.time_columns[0]
    if column not in form.time_columns:
        raise ConfigError(f"replay: --time-column must be one of {', '.join(form.time_columns)}")
    return ReplayRange(tuple(OffsetRange.parse(text, form.offsets or "") for text in offsets), parse_time(since),
                       parse_time(until), column)
