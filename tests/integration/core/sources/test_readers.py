"""Reading shard ranges from Kinesis (moto server): caps, cut-off, resume, KPL aggregates."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator

from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import ShardRange
from airflow_kinesis_snowflake.core.sources.readers import arrival_timestamp, kinesis_client, read_shard_range
from tests.conftest import create_stream, unique
from tests.emulators import Emulators
from tests.emulators.servers import AWS_KEY, REGION

pytestmark = pytest.mark.integration

SHARD = "shardId-000000000000"
FAR_FUTURE = datetime.now(UTC) + timedelta(days=1)


def rng(
    start: Checkpoint | None = None, max_records: int = 1000, ending: str | None = None, max_bytes: int | None = None
) -> ShardRange:
    return ShardRange(SHARD, start, StartPosition(InitialPosition.TRIM_HORIZON), max_records, ending, max_bytes)


def read(
    kinesis: Any, stream: str, shard_range: ShardRange, cutoff: datetime = FAR_FUTURE, per_call: int = 7, **kwargs: Any
) -> Any:
    return read_shard_range(
        kinesis, stream, shard_range, cutoff=cutoff, max_records_per_call=per_call, sleep=lambda _: None, **kwargs
    )


def put(kinesis: Any, stream: str, values: range) -> None:
    for v in values:
        kinesis.put_record(StreamName=stream, Data=json.dumps({"v": v}).encode(), PartitionKey="k")


def values(result: Any) -> list[int]:
    return [json.loads(r.data)["v"] for r in result.records]


def test_cap_then_resume_from_checkpoint_reads_each_record_once(emulators: Emulators) -> None:
    stream = unique("s")
    kinesis = create_stream(emulators, stream, 1)
    put(kinesis, stream, range(25))
    first = read(kinesis, stream, rng(max_records=10))
    assert values(first) == list(range(10))
    assert first.get_records_calls >= 2  # Limit 7 per call
    second = read(kinesis, stream, rng(start=first.last))
    assert values(second) == list(range(10, 25))
    assert not second.shard_end  # an open shard is never finished
    third = read(kinesis, stream, rng(start=second.last))
    assert third.records == [] and third.last == second.last


def test_records_after_the_cutoff_wait_for_the_next_batch(emulators: Emulators) -> None:
    stream = unique("s")
    kinesis = create_stream(emulators, stream, 1)
    put(kinesis, stream, range(5))
    cutoff = datetime.now(UTC)
    put(kinesis, stream, range(5, 8))
    first = read(kinesis, stream, rng(), cutoff=cutoff)
    assert values(first) == list(range(5))
    assert values(read(kinesis, stream, rng(start=first.last))) == [5, 6, 7]


def test_a_batch_ending_inside_a_kpl_aggregate_resumes_at_the_next_sub_record(emulators: Emulators) -> None:
    stream = unique("s")
    kinesis = create_stream(emulators, stream, 1)
    aggregator = RecordAggregator()
    for v in range(6):
        assert aggregator.add_user_record(f"pk-{v}", json.dumps({"v": v}).encode()) is None
    pk, ehk, data = aggregator.clear_and_get().get_contents()
    kinesis.put_record(StreamName=stream, Data=data, PartitionKey=pk, **({"ExplicitHashKey": ehk} if ehk else {}))
    put(kinesis, stream, range(6, 8))

    first = read(kinesis, stream, rng(max_records=4))
    assert values(first) == [0, 1, 2, 3]
    assert [r.sub_sequence_number for r in first.records] == [0, 1, 2, 3]
    assert first.last is not None and first.last.sub_sequence_number == 3
    second = read(kinesis, stream, rng(start=first.last))
    assert values(second) == [4, 5, 6, 7]
    assert [r.partition_key for r in second.records[:2]] == ["pk-4", "pk-5"]


# Each payload {"v": 0} .. {"v": 9} is 8 bytes.


@pytest.mark.parametrize(("max_bytes", "first_values"), [(24, [0, 1, 2]), (25, [0, 1, 2, 3]), (1, [0])])
def test_the_byte_cap_stops_after_the_record_that_reaches_it_and_the_next_batch_resumes_after_it(
    emulators: Emulators, max_bytes: int, first_values: list[int]
) -> None:
    stream = unique("s")
    kinesis = create_stream(emulators, stream, 1)
    put(kinesis, stream, range(10))
    first = read(kinesis, stream, rng(max_bytes=max_bytes))
    assert values(first) == first_values
    assert (first.records_read, first.bytes_read) == (len(first_values), 8 * len(first_values))
    rest = read(kinesis, stream, rng(start=first.last))
    assert values(rest) == list(range(len(first_values), 10))


def test_a_record_larger_than_the_byte_cap_is_read_alone(emulators: Emulators) -> None:
    stream = unique("s")
    kinesis = create_stream(emulators, stream, 1)
    kinesis.put_record(StreamName=stream, Data=json.dumps({"v": -1, "pad": "x" * 100}).encode(), PartitionKey="k")
    put(kinesis, stream, range(3))
    first = read(kinesis, stream, rng(max_bytes=50))
    assert values(first) == [-1] and first.bytes_read > 100
    assert values(read(kinesis, stream, rng(start=first.last, max_bytes=50))) == [0, 1, 2]


def test_the_byte_cap_ends_a_batch_inside_a_kpl_aggregate_and_the_next_resumes_at_the_next_sub_record(
    emulators: Emulators,
) -> None:
    stream = unique("s")
    kinesis = create_stream(emulators, stream, 1)
    aggregator = RecordAggregator()
    for v in range(6):
        assert aggregator.add_user_record(f"pk-{v}", json.dumps({"v": v}).encode()) is None
    pk, ehk, data = aggregator.clear_and_get().get_contents()
    kinesis.put_record(StreamName=stream, Data=data, PartitionKey=pk, **({"ExplicitHashKey": ehk} if ehk else {}))
    put(kinesis, stream, range(6, 8))

    first = read(kinesis, stream, rng(max_bytes=24))
    assert values(first) == [0, 1, 2]
    assert first.last is not None and first.last.sub_sequence_number == 2
    second = read(kinesis, stream, rng(start=first.last, max_bytes=24))
    assert values(second) == [3, 4, 5]
    assert values(read(kinesis, stream, rng(start=second.last))) == [6, 7]


def test_no_page_is_fetched_ahead_when_the_page_reaches_the_byte_cap(emulators: Emulators) -> None:
    stream = unique("s")
    kinesis = create_stream(emulators, stream, 1)
    put(kinesis, stream, range(10))
    capped = read(kinesis, stream, rng(max_bytes=40), per_call=5)
    assert values(capped) == list(range(5)) and capped.get_records_calls == 1
    below = read(kinesis, stream, rng(max_bytes=41), per_call=5)
    assert values(below) == list(range(6)) and below.get_records_calls == 2


def test_records_handed_on_in_chunks_are_the_records_of_the_range_in_order(emulators: Emulators) -> None:
    stream = unique("s")
    kinesis = create_stream(emulators, stream, 1)
    put(kinesis, stream, range(20))
    chunks: list[list[int]] = []

    def take(records: list[Any]) -> None:
        chunks.append([json.loads(r.data)["v"] for r in records])

    # A chunk ends at the end of the page that brought it to 12 bytes; the cap ends the last one.
    # Payloads: 10 of 8 bytes, then 9 bytes each ({"v": 10}): 134 bytes after 16 records, 143 after 17.
    result = read(kinesis, stream, rng(max_bytes=136), per_call=5, on_chunk=take, chunk_bytes=12)
    assert chunks == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14], [15, 16]]
    assert result.records == [] and (result.records_read, result.bytes_read) == (17, 143)
    unchunked = read(kinesis, stream, rng(max_bytes=136), per_call=5)
    assert result.last == unchunked.last and values(unchunked) == list(range(17))


def test_a_closed_shard_read_to_its_end_reports_shard_end(emulators: Emulators) -> None:
    stream = unique("s")
    kinesis = create_stream(emulators, stream, 1)
    put(kinesis, stream, range(4))
    kinesis.split_shard(StreamName=stream, ShardToSplit=SHARD, NewStartingHashKey=str(2**127))
    parent = next(s for s in kinesis.list_shards(StreamName=stream)["Shards"] if s["ShardId"] == SHARD)
    ending = parent["SequenceNumberRange"]["EndingSequenceNumber"]
    result = read(kinesis, stream, rng(ending=ending))
    assert values(result) == [0, 1, 2, 3]
    assert result.shard_end


def test_the_read_reports_how_far_it_is_behind_the_tip(emulators: Emulators) -> None:
    stream = unique("s")
    kinesis = create_stream(emulators, stream, 1)
    put(kinesis, stream, range(5))
    time.sleep(0.3)
    put(kinesis, stream, range(5, 10))
    behind = read(kinesis, stream, rng(max_records=5), per_call=5)
    assert values(behind) == list(range(5))
    assert behind.millis_behind_latest is not None and behind.millis_behind_latest >= 300
    caught_up = read(kinesis, stream, rng(start=behind.last))
    assert values(caught_up) == list(range(5, 10))
    assert caught_up.millis_behind_latest == 0


def test_no_page_is_fetched_ahead_when_the_page_reaches_the_cap_or_the_cutoff(emulators: Emulators) -> None:
    stream = unique("s")
    kinesis = create_stream(emulators, stream, 1)
    put(kinesis, stream, range(5))
    cutoff = datetime.now(UTC)
    put(kinesis, stream, range(5, 20))
    at_cutoff = read(kinesis, stream, rng(max_records=10), per_call=7, cutoff=cutoff)
    assert values(at_cutoff) == list(range(5)) and at_cutoff.get_records_calls == 1  # cut-off in the first page
    capped = read(kinesis, stream, rng(max_records=10), per_call=5, cutoff=FAR_FUTURE)
    assert values(capped) == list(range(10)) and capped.get_records_calls == 2
    rest = read(kinesis, stream, rng(start=capped.last), per_call=4, cutoff=FAR_FUTURE)
    assert values(rest) == list(range(10, 20))


def test_the_cheap_timestamp_client_reads_the_same_records_at_the_same_instants(emulators: Emulators) -> None:
    stream = unique("s")
    kinesis = create_stream(emulators, stream, 1)
    put(kinesis, stream, range(12))
    cheap = kinesis_client(
        region_name=REGION,
        endpoint_url=emulators.aws_endpoint,
        aws_access_key_id=AWS_KEY,
        aws_secret_access_key=AWS_KEY,
    )
    usual, fast = read(kinesis, stream, rng()), read(cheap, stream, rng())
    assert values(fast) == values(usual) == list(range(12))
    assert [r.approximate_arrival for r in fast.records] == [r.approximate_arrival for r in usual.records]
    assert all(r.approximate_arrival.tzinfo is UTC for r in fast.records)
    assert fast.last == usual.last


@pytest.mark.parametrize("value", [0, 1769860800, 1769860800.123456, 1769860800.5, -1.5, 253402300799.999])
def test_arrival_timestamp_is_botocores_instant(value: float) -> None:
    from botocore.utils import parse_timestamp

    parsed = arrival_timestamp(value)
    assert parsed == parse_timestamp(value) and parsed.tzinfo is UTC


def test_arrival_timestamp_leaves_text_to_botocore() -> None:
    assert arrival_timestamp("2026-01-31T12:00:00Z") == datetime(2026, 1, 31, 12, tzinfo=UTC)
