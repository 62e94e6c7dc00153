"""Reading DynamoDB Streams from the moto server, as AWS serves them (tests/emulators/dynamodb_streams.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.sources.dynamodb.model import EventName
from airflow_kinesis_snowflake.core.sources.dynamodb.streams import (
    StreamGap,
    StreamViewTypeError,
    list_stream_shards,
    read_stream_shard,
)
from tests.conftest import unique
from tests.emulators import Emulators
from tests.emulators.dynamodb_streams import expire_item, roll_shard, trim

# The retry helper's logger: its lines, one per attempt (other loggers may write to the same capture).
RETRY_LOGGER = "airflow_kinesis_snowflake.core.retry"

pytestmark = pytest.mark.integration

LATER = datetime.now(UTC) + timedelta(days=1)


def client(emulators: Emulators, service: str, **config: Any) -> Any:
    return emulators.boto3_client(service, **config)


@dataclass
class Table:
    name: str
    stream_arn: str
    dynamodb: Any
    streams: Any

    def put(self, pk: str, **attributes: str) -> None:
        item = {"pk": {"S": pk}, **{k: {"S": v} for k, v in attributes.items()}}
        self.dynamodb.put_item(TableName=self.name, Item=item)

    def delete(self, pk: str) -> None:
        self.dynamodb.delete_item(TableName=self.name, Key={"pk": {"S": pk}})

    def only_shard(self) -> str:
        (shard,) = list_stream_shards(self.streams, self.stream_arn)
        return shard.shard_id

    def read(self, shard_id: str, **kwargs: Any) -> Any:
        options: dict[str, Any] = {"table": self.name, "snapshot": 0, "cutoff": LATER, "max_records": 1000}
        return read_stream_shard(self.streams, self.stream_arn, shard_id, **{**options, **kwargs})


def new_table(emulators: Emulators, view: str = "NEW_AND_OLD_IMAGES") -> Table:
    name = unique("ddb-streams")
    dynamodb = client(emulators, "dynamodb")
    created = dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": view},
    )
    # No retries in botocore: each fault reaches the reader, which must survive it on its own.
    streams = client(emulators, "dynamodbstreams", retries={"total_max_attempts": 1})
    return Table(name, created["TableDescription"]["LatestStreamArn"], dynamodb, streams)


@pytest.fixture
def faults(emulators: Emulators) -> Iterator[Emulators]:
    yield emulators
    emulators.inject_kinesis_faults([])


@dataclass
class TwoSeconds:
    """A table whose stream holds records created in two different seconds."""

    table: Table
    early_time: datetime
    late_time: datetime


@pytest.fixture(scope="module")
def two_seconds(emulators: Emulators) -> TwoSeconds:
    table = new_table(emulators)
    table.put("a", v="1")
    table.put("b", v="1")
    # Creation times are whole seconds, as on AWS: the later records go into the next one.
    time.sleep(1.05 - datetime.now(UTC).microsecond / 1e6)
    table.put("a", v="2")
    table.put("c", v="1")
    changes = table.read(table.only_shard()).changes
    early, late = changes[0].approximate_creation_time, changes[-1].approximate_creation_time
    assert early is not None and late is not None and early < late
    return TwoSeconds(table, early, late)


def test_each_event_becomes_its_change_with_the_new_image(emulators: Emulators) -> None:
    table = new_table(emulators)
    table.put("a", v="1")
    table.put("a", v="2")
    table.delete("a")

    read = table.read(table.only_shard())

    assert [c.event_name for c in read.changes] == [EventName.INSERT, EventName.MODIFY, EventName.REMOVE]
    assert [c.image for c in read.changes] == [
        {"pk": {"S": "a"}, "v": {"S": "1"}},
        {"pk": {"S": "a"}, "v": {"S": "2"}},
        None,
    ]
    assert all(c.keys == {"pk": {"S": "a"}} for c in read.changes)
    assert [c.version for c in read.changes] == sorted({c.version for c in read.changes})
    assert read.last_sequence_number == str(read.changes[-1].version.sequence)
    assert not any(c.ttl_expiry for c in read.changes)


def test_a_range_stops_at_the_cap_and_the_next_resumes_after_its_checkpoint(emulators: Emulators) -> None:
    table = new_table(emulators)
    for pk in "abcde":
        table.put(pk)
    shard = table.only_shard()

    first = table.read(shard, max_records=2)
    rest = table.read(shard, after=first.last_sequence_number)

    assert [c.keys["pk"]["S"] for c in first.changes] == ["a", "b"]
    assert [c.keys["pk"]["S"] for c in rest.changes] == ["c", "d", "e"]
    assert not first.shard_end and not rest.shard_end  # the shard is open


def test_records_created_after_the_cutoff_are_left_for_the_next_batch(two_seconds: TwoSeconds) -> None:
    table = two_seconds.table
    shard = table.only_shard()

    batch = table.read(shard, cutoff=two_seconds.early_time)
    after = table.read(shard, after=batch.last_sequence_number, cutoff=two_seconds.late_time)

    assert [(c.keys["pk"]["S"], c.event_name) for c in batch.changes] == [("a", "INSERT"), ("b", "INSERT")]
    assert [(c.keys["pk"]["S"], c.event_name) for c in after.changes] == [("a", "MODIFY"), ("c", "INSERT")]


def test_a_start_at_a_time_skips_the_records_created_before_it(two_seconds: TwoSeconds) -> None:
    table = two_seconds.table

    read = table.read(table.only_shard(), not_before=two_seconds.late_time)

    assert [c.keys["pk"]["S"] for c in read.changes] == ["a", "c"]
    assert read.records_skipped == 2 and read.records_read == 2


def test_a_closed_shard_is_read_to_its_end_and_its_child_after_it(emulators: Emulators) -> None:
    table = new_table(emulators)
    table.put("a", v="1")
    table.put("b", v="1")
    closed, child = roll_shard(emulators.aws_endpoint, table.name)
    table.put("a", v="2")
    roll_shard(emulators.aws_endpoint, table.name)

    shards = list_stream_shards(table.streams, table.stream_arn, page_size=1)
    parent_read = table.read(closed)
    child_read = table.read(child)

    assert [s.shard_id for s in shards][:2] == [closed, child]
    assert len(shards) == 3 and shards[2].parent_shard_ids == (child,)
    assert shards[0].is_closed and shards[1].is_closed and not shards[2].is_closed
    assert shards[1].parent_shard_ids == (closed,)
    assert parent_read.shard_end and [c.keys["pk"]["S"] for c in parent_read.changes] == ["a", "b"]
    assert child_read.shard_end and [c.image for c in child_read.changes] == [{"pk": {"S": "a"}, "v": {"S": "2"}}]
    assert child_read.changes[0].version > parent_read.changes[-1].version


def test_a_closed_shard_read_to_its_cap_at_its_last_record_is_at_its_end(emulators: Emulators) -> None:
    table = new_table(emulators)
    table.put("a")
    closed, _ = roll_shard(emulators.aws_endpoint, table.name)

    assert table.read(closed, max_records=1).shard_end


def test_an_expired_iterator_is_renewed_after_the_last_record_read(faults: Emulators) -> None:
    table = new_table(faults)
    for pk in "abcde":
        table.put(pk)
    faults.inject_kinesis_faults(
        [
            {
                "operation": "DynamoDBStreams.GetRecords",
                "table": table.name,
                "error": "ExpiredIteratorException",
                "skip": 1,
            }
        ]
    )

    read = table.read(table.only_shard(), records_per_call=2)

    assert [c.keys["pk"]["S"] for c in read.changes] == list("abcde")
    assert read.iterator_renewals == 1
    assert len(faults.served_kinesis_faults()) == 1


def test_throttling_is_retried_after_growing_pauses(faults: Emulators, caplog: pytest.LogCaptureFixture) -> None:
    table = new_table(faults)
    for pk in "abc":
        table.put(pk)
    faults.inject_kinesis_faults(
        [
            {
                "operation": "DynamoDBStreams.GetRecords",
                "table": table.name,
                "error": "LimitExceededException",
                "times": 3,
            }
        ]
    )
    pauses: list[float] = []

    with caplog.at_level(logging.WARNING, logger="airflow_kinesis_snowflake.core.retry"):
        read = table.read(table.only_shard(), sleep=pauses.append)

    assert [c.keys["pk"]["S"] for c in read.changes] == list("abc")
    assert read.throttled == 3
    assert len(pauses) == 3 and pauses == sorted(pauses) and pauses[0] < pauses[-1]
    # Exponential backoff from 0.5 s with jitter: each pause in [b/2, b] of b = 0.5, 1, 2.
    assert 0.25 <= pauses[0] <= 0.5 <= pauses[1] <= 1.0 <= pauses[2] <= 2.0
    lines = [r.getMessage() for r in caplog.records if r.name == RETRY_LOGGER]
    assert len(lines) == 3
    for n, (line, pause) in enumerate(zip(lines, pauses, strict=True), start=1):
        assert line.startswith(f"GetRecords on shard {table.only_shard()} of the stream of table {table.name} failed ")
        assert f"(attempt {n} of 9)" in line and "LimitExceededException" in line
        assert line.endswith(f"; retrying in {pause:.2f} s")


def test_a_checkpoint_behind_the_trim_horizon_is_a_stream_gap(emulators: Emulators) -> None:
    table = new_table(emulators)
    for pk in "abcd":
        table.put(pk)
    shard = table.only_shard()
    sequences = [str(c.version.sequence) for c in table.read(shard).changes]
    trim(emulators.aws_endpoint, table.name, shard_id=shard, sequence_number=sequences[2])

    with pytest.raises(StreamGap) as raised:
        table.read(shard, after=sequences[0])
    from_start = table.read(shard)
    from_kept = table.read(shard, after=sequences[1])

    assert (raised.value.table, raised.value.shard_id, raised.value.checkpoint) == (table.name, shard, sequences[0])
    assert "TrimmedDataAccessException" in str(raised.value)
    assert [c.keys["pk"]["S"] for c in from_start.changes] == ["c", "d"]
    assert [c.keys["pk"]["S"] for c in from_kept.changes] == ["c", "d"]


def test_a_read_from_the_first_record_finds_a_trimmed_start_that_trim_horizon_passes_over(emulators: Emulators) -> None:
    table = new_table(emulators)
    for pk in "abcd":
        table.put(pk)
    (shard,) = list_stream_shards(table.streams, table.stream_arn)
    whole = table.read(shard.shard_id, first_record=shard.starting_sequence_number)
    sequences = [str(c.version.sequence) for c in whole.changes]
    trim(emulators.aws_endpoint, table.name, shard_id=shard.shard_id, sequence_number=sequences[2])

    with pytest.raises(StreamGap) as raised:
        table.read(shard.shard_id, first_record=shard.starting_sequence_number)
    from_horizon = table.read(shard.shard_id)

    assert [c.keys["pk"]["S"] for c in whole.changes] == list("abcd")
    assert raised.value.checkpoint is None and "from its start" in str(raised.value)
    assert "TrimmedDataAccessException" in str(raised.value)
    assert [c.keys["pk"]["S"] for c in from_horizon.changes] == ["c", "d"]  # a and b, silently gone


def test_records_trimmed_by_age_are_a_gap_for_a_checkpoint_among_them(emulators: Emulators) -> None:
    table = new_table(emulators)
    table.put("a")
    shard = table.only_shard()
    first = table.read(shard)
    table.put("b")
    trim(emulators.aws_endpoint, table.name, before=datetime.now(UTC) + timedelta(seconds=5))

    with pytest.raises(StreamGap):
        table.read(shard, after=first.last_sequence_number)


def test_a_removal_by_time_to_live_is_flagged(emulators: Emulators) -> None:
    table = new_table(emulators)
    table.put("expiring")
    table.put("deleted")
    assert expire_item(emulators.aws_endpoint, table.name, {"pk": {"S": "expiring"}})
    table.delete("deleted")

    removals = [c for c in table.read(table.only_shard()).changes if c.is_removal]

    assert [(c.keys["pk"]["S"], c.ttl_expiry) for c in removals] == [("expiring", True), ("deleted", False)]


def test_a_stream_without_new_images_is_refused_with_the_fix(emulators: Emulators) -> None:
    table = new_table(emulators, view="KEYS_ONLY")
    table.put("a")

    with pytest.raises(StreamViewTypeError, match=r"KEYS_ONLY.*NEW_IMAGE or NEW_AND_OLD_IMAGES"):
        table.read(table.only_shard())
