"""The DynamoDB source's positions and reads, as the engine's Source protocol sees them (no emulator)."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.engine.source import SourceUnit
from airflow_kinesis_snowflake.core.model import Checkpoint
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import SegmentCursor
from airflow_kinesis_snowflake.core.sources.dynamodb.source import (
    SNAPSHOT_SEGMENT,
    STREAM_SHARD,
    DynamoDBSource,
    SegmentPosition,
    StreamNotEnabledError,
)

SEGMENT = SourceUnit("segment-1-of-4", SNAPSHOT_SEGMENT)
SHARD = SourceUnit("shardId-00000001700000000000-0000abcd", STREAM_SHARD, ("shardId-0-parent",))
CUTOFF = datetime(2026, 1, 1, tzinfo=UTC)


def identity(value: Any) -> Any:
    return value


def no_client() -> Any:
    raise AssertionError("no call to AWS was expected")


class Table:
    """A DynamoDB client that answers DescribeTable only."""

    def __init__(self, description: dict[str, Any]) -> None:
        self.description = description

    def describe_table(self, TableName: str) -> dict[str, Any]:
        return {"Table": {"TableName": TableName, **self.description}}


def source(**kwargs: Any) -> DynamoDBSource:
    return DynamoDBSource("Orders", dynamodb=no_client, streams=no_client, **kwargs)


@pytest.mark.parametrize(
    "position",
    [
        SegmentPosition(SegmentCursor({"pk": {"S": "customer#7"}, "sk": {"N": "1.50"}})),
        SegmentPosition(SegmentCursor({"pk": {"B": b"\x00\xff binary"}})),
        SegmentPosition(None),
    ],
)
def test_a_segments_position_round_trips_through_the_snapshot_ledgers_mark(position: SegmentPosition) -> None:
    text = source().position_to_text(SEGMENT, position)
    assert source().position_from_text(SEGMENT, text) == position
    assert ('"done":true' in text) is position.done


def test_a_stream_shards_position_is_its_sequence_numbers_checkpoint() -> None:
    position = Checkpoint("49650000000000000000000000000000000001")
    text = source().position_to_text(SHARD, position)
    assert source().position_from_text(SHARD, text) == position


@pytest.mark.parametrize(
    "text",
    [
        '{"cursor": null, "done": false}',
        '{"cursor": "{\\"pk\\": {\\"S\\": \\"a\\"}}", "done": true}',
        '{"cursor": "x"}',
    ],
)
def test_a_segment_position_that_contradicts_itself_is_refused_naming_the_segment_and_table(text: str) -> None:
    with pytest.raises(ValueError, match=r"segment-1-of-4 of table Orders"):
        source().position_from_text(SEGMENT, text)


def test_a_done_segment_gives_nothing_without_starting_its_scan_over() -> None:
    done = SegmentPosition(None)
    got = source().read(SEGMENT, done, cutoff=CUTOFF, max_records=10)
    assert (list(got.records), got.start, got.end, got.unit_end) == ([], done, done, True)


def test_a_unit_is_read_from_a_position_of_its_own_kind() -> None:
    with pytest.raises(TypeError, match="snapshot-segment segment-1-of-4 is read from a SegmentPosition"):
        source().read(SEGMENT, Checkpoint("1"), cutoff=CUTOFF, max_records=10)
    with pytest.raises(ValueError, match="not a unit of a DynamoDB table"):
        source().read(SourceUnit("shardId-1", "shard"), None, cutoff=CUTOFF, max_records=10)


def test_the_units_are_the_generations_segments_then_the_streams_shards() -> None:
    shards = [
        {"ShardId": "shardId-1", "SequenceNumberRange": {"StartingSequenceNumber": "1", "EndingSequenceNumber": "9"}},
        {
            "ShardId": "shardId-2",
            "ParentShardId": "shardId-1",
            "SequenceNumberRange": {"StartingSequenceNumber": "2000"},
        },
    ]

    class Streams:
        def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
            assert kwargs["StreamArn"] == "arn:stream"
            return {"StreamDescription": {"Shards": shards}}

    units = DynamoDBSource(
        "Orders", dynamodb=no_client, streams=Streams, generation=2, total_segments=2, stream_arn="arn:stream"
    ).units()
    assert units == [
        SourceUnit("segment-0-of-2", SNAPSHOT_SEGMENT),
        SourceUnit("segment-1-of-2", SNAPSHOT_SEGMENT),
        SourceUnit("shardId-1", STREAM_SHARD, (), "9"),
        SourceUnit("shardId-2", STREAM_SHARD, ("shardId-1",)),
    ]
    assert units[2].closed and not units[3].closed


def test_a_table_without_a_stream_is_refused_saying_how_to_enable_one() -> None:
    disabled = Table({"LatestStreamArn": "arn:old", "StreamSpecification": {"StreamEnabled": False}})
    for table in (Table({}), disabled):
        with pytest.raises(StreamNotEnabledError, match="Orders has no stream: enable DynamoDB Streams"):
            DynamoDBSource("Orders", dynamodb=partial(identity, table), streams=no_client).followed_stream()
