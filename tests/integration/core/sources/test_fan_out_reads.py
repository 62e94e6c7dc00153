"""Reading shard ranges through an enhanced fan-out consumer (SubscribeToShard on the moto server)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator
from botocore.exceptions import ClientError

from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import ShardRange
from airflow_kinesis_snowflake.core.sources.readers import (
    RESOURCE_IN_USE_RETRIES,
    kinesis_client,
    read_shard_range,
    read_shard_range_fan_out,
)
from airflow_kinesis_snowflake.core.sources.shards import list_shards
from tests.conftest import create_stream, unique
from tests.emulators import Emulators
from tests.emulators.servers import AWS_KEY, REGION

# The retry helper's logger: its lines, one per attempt (other loggers may write to the same capture).
RETRY_LOGGER = "airflow_kinesis_snowflake.core.retry"

pytestmark = pytest.mark.integration

SHARD = "shardId-000000000000"
TRIM = StartPosition(InitialPosition.TRIM_HORIZON)
FAR_FUTURE = datetime.now(UTC) + timedelta(days=1)


@pytest.fixture
def faults(emulators: Emulators) -> Iterator[Emulators]:
    yield emulators
    emulators.inject_kinesis_faults([])


def job_client(emulators: Emulators) -> Any:
    """The Spark job's Kinesis client (its own timestamp parser applies to events too)."""
    return kinesis_client(
        region_name=REGION,
        endpoint_url=emulators.aws_endpoint,
        aws_access_key_id=AWS_KEY,
        aws_secret_access_key=AWS_KEY,
    )


def stream_with_consumer(emulators: Emulators, shards: int = 1) -> tuple[Any, str, str]:
    """A new stream, its Kinesis client and the ARN of a fan-out consumer registered on it."""
    stream = unique("efo")
    kinesis = create_stream(emulators, stream, shards)
    arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    consumer = kinesis.register_stream_consumer(StreamARN=arn, ConsumerName=unique("app"))["Consumer"]
    return kinesis, stream, consumer["ConsumerARN"]


def rng(
    start: Checkpoint | None = None,
    max_records: int = 1000,
    shard_id: str = SHARD,
    start_position: StartPosition = TRIM,
    max_bytes: int | None = None,
) -> ShardRange:
    return ShardRange(shard_id, start, start_position, max_records, max_bytes=max_bytes)


def read(emulators: Emulators, consumer_arn: str, shard_range: ShardRange, **kwargs: Any) -> Any:
    return read_shard_range_fan_out(
        job_client(emulators),
        consumer_arn,
        shard_range,
        **{"cutoff": FAR_FUTURE, "sleep": lambda _: None, **kwargs},
    )


def put(kinesis: Any, stream: str, values: range, key: str = "k") -> None:
    for v in values:
        kinesis.put_record(StreamName=stream, Data=json.dumps({"v": v}).encode(), PartitionKey=key)


def values(result: Any) -> list[int]:
    return [json.loads(r.data)["v"] for r in result.records]


def test_cap_then_resume_from_checkpoint_reads_each_record_once(emulators: Emulators) -> None:
    kinesis, stream, consumer = stream_with_consumer(emulators)
    put(kinesis, stream, range(25))
    first = read(emulators, consumer, rng(max_records=10))
    assert values(first) == list(range(10))
    assert first.subscriptions == 1 and first.get_records_calls == 0
    second = read(emulators, consumer, rng(start=first.last))
    assert values(second) == list(range(10, 25))
    assert not second.shard_end  # an open shard is never finished
    assert second.millis_behind_latest == 0
    third = read(emulators, consumer, rng(start=second.last))
    assert third.records == [] and third.last == second.last


def test_the_byte_cap_stops_after_the_record_that_reaches_it_and_chunks_hand_on_every_record(
    emulators: Emulators,
) -> None:
    kinesis, stream, consumer = stream_with_consumer(emulators)
    put(kinesis, stream, range(10))  # 8 bytes each
    chunks: list[list[int]] = []
    first = read(
        emulators,
        consumer,
        rng(max_bytes=25),
        on_chunk=lambda records: chunks.append([json.loads(r.data)["v"] for r in records]),
        chunk_bytes=1,
    )
    assert chunks == [[0, 1, 2, 3]] and first.records == []
    assert (first.records_read, first.bytes_read) == (4, 32)
    assert values(read(emulators, consumer, rng(start=first.last))) == list(range(4, 10))


def test_records_after_the_cutoff_wait_for_the_next_batch(emulators: Emulators) -> None:
    kinesis, stream, consumer = stream_with_consumer(emulators)
    put(kinesis, stream, range(5))
    cutoff = datetime.now(UTC)
    put(kinesis, stream, range(5, 8))
    first = read(emulators, consumer, rng(), cutoff=cutoff)
    assert values(first) == list(range(5))
    assert values(read(emulators, consumer, rng(start=first.last))) == [5, 6, 7]


def test_a_batch_ending_inside_a_kpl_aggregate_resumes_at_the_next_sub_record(emulators: Emulators) -> None:
    kinesis, stream, consumer = stream_with_consumer(emulators)
    aggregator = RecordAggregator()
    for v in range(6):
        assert aggregator.add_user_record(f"pk-{v}", json.dumps({"v": v}).encode()) is None
    pk, ehk, data = aggregator.clear_and_get().get_contents()
    kinesis.put_record(StreamName=stream, Data=data, PartitionKey=pk, **({"ExplicitHashKey": ehk} if ehk else {}))
    put(kinesis, stream, range(6, 8))

    first = read(emulators, consumer, rng(max_records=4))
    assert values(first) == [0, 1, 2, 3]
    assert [r.sub_sequence_number for r in first.records] == [0, 1, 2, 3]
    assert first.last is not None and first.last.sub_sequence_number == 3
    second = read(emulators, consumer, rng(start=first.last))
    assert values(second) == [4, 5, 6, 7]
    assert [r.partition_key for r in second.records[:2]] == ["pk-4", "pk-5"]


def test_a_range_reads_the_same_records_as_with_get_records(emulators: Emulators) -> None:
    kinesis, stream, consumer = stream_with_consumer(emulators)
    put(kinesis, stream, range(30))
    fan_out = read(emulators, consumer, rng(max_records=20))
    polled = read_shard_range(
        job_client(emulators), stream, rng(max_records=20), cutoff=FAR_FUTURE, max_records_per_call=7
    )
    assert fan_out.records == polled.records and fan_out.last == polled.last
    assert all(r.approximate_arrival.tzinfo is UTC for r in fan_out.records)


def test_an_ended_subscription_is_renewed_from_its_continuation(faults: Emulators) -> None:
    kinesis, stream, consumer = stream_with_consumer(faults)
    put(kinesis, stream, range(20))
    # Each subscription ends after two events of at most three records.
    faults.inject_kinesis_faults(
        [{"operation": "SubscribeToShard", "stream": stream, "events_per_subscription": 2, "records_per_event": 3}]
    )
    result = read(faults, consumer, rng())
    assert values(result) == list(range(20))
    assert result.subscriptions >= 4
    assert result.last == Checkpoint("20")


def test_a_broken_subscription_is_renewed_from_its_continuation(faults: Emulators) -> None:
    kinesis, stream, consumer = stream_with_consumer(faults)
    put(kinesis, stream, range(10))
    # Twice, the connection breaks after the first event of three records.
    drop = {"operation": "SubscribeToShard", "stream": stream, "drop_after_events": 1, "times": 2}
    faults.inject_kinesis_faults([{"operation": "SubscribeToShard", "stream": stream, "records_per_event": 3}, drop])
    result = read(faults, consumer, rng())
    assert values(result) == list(range(10))
    assert result.subscriptions == 3
    assert faults.served_kinesis_faults() == [drop, drop]


def test_a_subscription_that_keeps_breaking_without_progress_fails_the_read(faults: Emulators) -> None:
    kinesis, stream, consumer = stream_with_consumer(faults)
    put(kinesis, stream, range(3))
    faults.inject_kinesis_faults(
        [{"operation": "SubscribeToShard", "stream": stream, "drop_after_events": 0, "times": 1000}]
    )
    with pytest.raises(RuntimeError, match="ended or broke without delivering anything new"):
        read(faults, consumer, rng())


def test_a_shard_held_by_another_subscription_is_retried(faults: Emulators, caplog: pytest.LogCaptureFixture) -> None:
    kinesis, stream, consumer = stream_with_consumer(faults)
    put(kinesis, stream, range(6))
    faults.inject_kinesis_faults(
        [{"operation": "SubscribeToShard", "stream": stream, "error": "ResourceInUseException", "times": 2}]
    )
    waits: list[float] = []
    with caplog.at_level(logging.WARNING, logger="airflow_kinesis_snowflake.core.retry"):
        result = read(faults, consumer, rng(), sleep=waits.append)
    assert values(result) == list(range(6))
    assert [f["error"] for f in faults.served_kinesis_faults()] == ["ResourceInUseException"] * 2
    assert len(waits) == 2 and waits[1] > waits[0]
    # Exponential backoff from 1 s with jitter: each wait in [b/2, b] of b = 1, 2.
    assert 0.5 <= waits[0] <= 1.0 <= waits[1] <= 2.0
    lines = [r.getMessage() for r in caplog.records if r.name == RETRY_LOGGER]
    assert len(lines) == 2
    for n, (line, wait) in enumerate(zip(lines, waits, strict=True), start=1):
        assert line.startswith(f"SubscribeToShard on shard {SHARD} through {consumer} failed ")
        assert f"(attempt {n} of {RESOURCE_IN_USE_RETRIES + 1})" in line and "ResourceInUseException" in line
        assert line.endswith(f"; retrying in {wait:.2f} s")


def test_a_shard_that_stays_held_fails_the_read_after_bounded_retries(
    faults: Emulators, caplog: pytest.LogCaptureFixture
) -> None:
    kinesis, stream, consumer = stream_with_consumer(faults)
    put(kinesis, stream, range(3))
    faults.inject_kinesis_faults(
        [{"operation": "SubscribeToShard", "stream": stream, "error": "ResourceInUseException", "times": 100}]
    )
    waits: list[float] = []
    with caplog.at_level(logging.WARNING, logger="airflow_kinesis_snowflake.core.retry"):
        with pytest.raises(ClientError, match="ResourceInUseException"):
            read(faults, consumer, rng(), sleep=waits.append)
    assert len(waits) == RESOURCE_IN_USE_RETRIES
    # However the waits are drawn, together they outlast the 5 s a new subscription holds the shard.
    assert sum(waits) > 5 and max(waits) <= 8.0
    lines = [r.getMessage() for r in caplog.records if r.name == RETRY_LOGGER]
    assert len(lines) == RESOURCE_IN_USE_RETRIES + 1
    assert lines[-1].endswith("; giving up")
    assert f"(attempt {RESOURCE_IN_USE_RETRIES + 1} of {RESOURCE_IN_USE_RETRIES + 1})" in lines[-1]


def test_a_resubscription_held_by_another_subscription_loses_nothing(faults: Emulators) -> None:
    kinesis, stream, consumer = stream_with_consumer(faults)
    put(kinesis, stream, range(12))
    faults.inject_kinesis_faults(
        [
            {"operation": "SubscribeToShard", "stream": stream, "events_per_subscription": 2, "records_per_event": 4},
            {"operation": "SubscribeToShard", "stream": stream, "error": "ResourceInUseException", "skip": 1},
        ]
    )
    result = read(faults, consumer, rng())
    assert values(result) == list(range(12))
    assert len(faults.served_kinesis_faults()) == 1


def test_a_closed_shard_read_to_its_end_reports_shard_end(emulators: Emulators) -> None:
    kinesis, stream, consumer = stream_with_consumer(emulators)
    put(kinesis, stream, range(4))
    kinesis.split_shard(StreamName=stream, ShardToSplit=SHARD, NewStartingHashKey=str(2**127))
    put(kinesis, stream, range(4, 20), key="after")
    parent = read(emulators, consumer, rng())
    assert values(parent) == [0, 1, 2, 3]
    assert parent.shard_end
    # Read again from its checkpoint, the parent has nothing more and is still at its end.
    again = read(emulators, consumer, rng(start=parent.last))
    assert again.records == [] and again.shard_end
    children = [s.shard_id for s in list_shards(kinesis, stream) if s.parent_shard_ids == (SHARD,)]
    assert len(children) == 2
    reads = [read(emulators, consumer, rng(shard_id=child)) for child in children]
    assert sorted(v for r in reads for v in values(r)) == list(range(4, 20))
    assert not any(r.shard_end for r in reads)


def test_a_capped_read_of_a_closed_shard_is_not_its_end(emulators: Emulators) -> None:
    kinesis, stream, consumer = stream_with_consumer(emulators)
    put(kinesis, stream, range(6))
    kinesis.split_shard(StreamName=stream, ShardToSplit=SHARD, NewStartingHashKey=str(2**127))
    first = read(emulators, consumer, rng(max_records=6))
    assert values(first) == list(range(6)) and not first.shard_end
    rest = read(emulators, consumer, rng(start=first.last))
    assert rest.records == [] and rest.shard_end


def test_at_timestamp_starts_with_the_first_record_at_or_after_it(emulators: Emulators) -> None:
    kinesis, stream, consumer = stream_with_consumer(emulators)
    put(kinesis, stream, range(3))
    time.sleep(0.05)
    start = datetime.now(UTC)
    time.sleep(0.05)
    put(kinesis, stream, range(3, 6))
    result = read(emulators, consumer, rng(start_position=StartPosition(InitialPosition.AT_TIMESTAMP, start)))
    assert values(result) == [3, 4, 5]


def test_an_empty_shard_reads_nothing_and_reports_it_is_caught_up(emulators: Emulators) -> None:
    _, _, consumer = stream_with_consumer(emulators)
    result = read(emulators, consumer, rng())
    assert result.records == [] and result.last is None and not result.shard_end
    assert result.millis_behind_latest == 0


def test_an_unknown_consumer_is_not_found(emulators: Emulators) -> None:
    _, _, consumer = stream_with_consumer(emulators)
    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        read(emulators, consumer + "-gone", rng())
