"""The Lite sink's publisher (``io.pubsublite.publisher.PartitionPublisher``) against the local Lite server.

What the sink's guarantees rest on: every message given for a partition is appended in the
order given, across batches cut by count (1000) and by bytes (3 MiB), with many batches in
flight; an acknowledgement without an offset is a failure, never a success. The publisher runs
in a child process (the client trusts the server's certificate only process-wide).
"""

from __future__ import annotations

import uuid

from google.cloud.pubsublite_v1.types import publisher

from lite_server import LiteServer, run_python
from pubsub_connect.io.pubsublite.publisher import batch_offsets

PROJECT = "test-project"
ZONE = "us-central1-a"


def test_many_batches_in_flight_are_appended_in_the_order_given(lite: LiteServer) -> None:
    topic = f"projects/{PROJECT}/locations/{ZONE}/topics/t{uuid.uuid4().hex[:8]}"
    lite.create_topic(topic, 2)
    # 6,000 messages over 2 partitions; every 50th is 700 KB, so batches are also cut by bytes
    stats = run_python(f"""
import json, os
from google.cloud.pubsublite_v1.types import PubSubMessage
from pubsub_connect.io.pubsublite.connection import LiteConnection
from pubsub_connect.io.pubsublite.publisher import PartitionPublisher

conn = LiteConnection("{PROJECT}", "{ZONE}", os.environ["LITE_ENDPOINT"])
with PartitionPublisher(conn, "{topic}") as pub:
    for i in range(6000):
        body = b"%d|" % i + (b"x" * 700_000 if i % 50 == 0 else b"")
        pub.publish(i % 3 % 2, PubSubMessage.pb()(key=b"k%d" % (i % 3), data=body))
    stats = pub.wait()
print(json.dumps({{"messages": stats.messages, "per_partition": stats.per_partition}}))
""", cert_path=lite.cert_path, endpoint=lite.endpoint, timeout=300)

    expected = {p: [i for i in range(6000) if i % 3 % 2 == p] for p in (0, 1)}
    assert stats == {"messages": 6000, "per_partition": {"0": len(expected[0]), "1": len(expected[1])}}
    for partition in (0, 1):
        stored = lite.messages(topic, partition)
        assert [int(m.message.data.split(b"|", 1)[0]) for m in stored] == expected[partition]
        assert [m.cursor.offset for m in stored] == list(range(len(expected[partition])))


def test_offsets_are_read_from_cursor_ranges_and_gaps_are_minus_one() -> None:
    response = publisher.MessagePublishResponse(cursor_ranges=[
        publisher.MessagePublishResponse.CursorRange(start_cursor={"offset": 20}, start_index=3, end_index=5),
        publisher.MessagePublishResponse.CursorRange(start_cursor={"offset": 10}, start_index=0, end_index=2),
    ])
    assert batch_offsets(response, 6) == [10, 11, -1, 20, 21, -1]
    assert batch_offsets(publisher.MessagePublishResponse(), 2) == [-1, -1]
