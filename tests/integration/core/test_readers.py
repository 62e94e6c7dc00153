"""Reading shard ranges from Kinesis (moto server): caps, cut-off, resume, KPL aggregates."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator

from airflow_kinesis_snowflake.core.leases import StartPosition
from airflow_kinesis_snowflake.core.planning import ShardRange
from airflow_kinesis_snowflake.core.positions import Checkpoint, InitialPosition
from airflow_kinesis_snowflake.core.readers import read_shard_range
from tests.conftest import create_stream, unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration

SHARD = "shardId-000000000000"
FAR_FUTURE = datetime.now(UTC) + timedelta(days=1)


def rng(start: Checkpoint | None = None, max_records: int = 1000, ending: str | None = None) -> ShardRange:
    return ShardRange(SHARD, start, StartPosition(InitialPosition.TRIM_HORIZON), max_records, ending)


def read(kinesis: Any, stream: str, shard_range: ShardRange, cutoff: datetime = FAR_FUTURE, per_call: int = 7) -> Any:
    return read_shard_range(
        kinesis, stream, shard_range, cutoff=cutoff, max_records_per_call=per_call, sleep=lambda _: None
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
