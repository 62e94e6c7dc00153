"""Throttling and iterator expiry injected at the emulator boundary: reads complete, nothing lost."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config

from airflow_kinesis_snowflake.core.model import InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import ShardRange
from airflow_kinesis_snowflake.core.sources.readers import MIN_SECONDS_BETWEEN_CALLS, read_shard_range
from tests.conftest import create_stream, unique
from tests.emulators import Emulators
from tests.emulators.servers import AWS_KEY, REGION

pytestmark = pytest.mark.integration

SHARD = "shardId-000000000000"


@pytest.fixture
def faults(emulators: Emulators) -> Iterator[Emulators]:
    yield emulators
    emulators.inject_kinesis_faults([])


def job_client(emulators: Emulators) -> Any:
    """A Kinesis client configured as the Spark job's: standard retries back off on throttling."""
    return boto3.client(
        "kinesis",
        region_name=REGION,
        endpoint_url=emulators.aws_endpoint,
        aws_access_key_id=AWS_KEY,
        aws_secret_access_key=AWS_KEY,
        config=Config(retries={"mode": "standard", "max_attempts": 10}),
    )


def stream_with(emulators: Emulators, count: int) -> str:
    stream = unique("faults")
    kinesis = create_stream(emulators, stream, 1)
    for v in range(count):
        kinesis.put_record(StreamName=stream, Data=json.dumps({"v": v}).encode(), PartitionKey="k")
    return stream


def read(client: Any, stream: str, **kwargs: Any) -> Any:
    return read_shard_range(
        client,
        stream,
        ShardRange(SHARD, None, StartPosition(InitialPosition.TRIM_HORIZON), 1000),
        cutoff=datetime.now(UTC) + timedelta(hours=1),
        max_records_per_call=4,
        **{"sleep": lambda _: None, **kwargs},
    )


def values(result: Any) -> list[int]:
    return [json.loads(r.data)["v"] for r in result.records]


def test_throttled_get_records_backs_off_and_completes(faults: Emulators) -> None:
    stream = stream_with(faults, 20)
    faults.inject_kinesis_faults(
        [{"operation": "GetRecords", "stream": stream, "error": "ProvisionedThroughputExceededException", "times": 3}]
    )
    result = read(job_client(faults), stream)
    assert values(result) == list(range(20))
    assert [f["error"] for f in faults.served_kinesis_faults()] == ["ProvisionedThroughputExceededException"] * 3


def test_limit_exceeded_on_get_shard_iterator_backs_off_and_completes(faults: Emulators) -> None:
    stream = stream_with(faults, 6)
    faults.inject_kinesis_faults(
        [{"operation": "GetShardIterator", "stream": stream, "error": "LimitExceededException", "times": 2}]
    )
    assert values(read(job_client(faults), stream)) == list(range(6))
    assert len(faults.served_kinesis_faults()) == 2


def test_expired_iterator_resumes_after_the_last_record_delivered(faults: Emulators) -> None:
    stream = stream_with(faults, 20)
    # The third GetRecords call finds its iterator expired, after 8 records were delivered.
    faults.inject_kinesis_faults(
        [{"operation": "GetRecords", "stream": stream, "error": "ExpiredIteratorException", "skip": 2, "times": 1}]
    )
    result = read(job_client(faults), stream)
    assert values(result) == list(range(20))
    assert result.iterator_renewals == 1
    assert len(faults.served_kinesis_faults()) == 1


def test_get_records_calls_are_paced_to_five_per_second_per_shard(faults: Emulators) -> None:
    stream = stream_with(faults, 20)
    waits: list[float] = []
    # A clock that never moves: every call after the first must wait the whole interval.
    result = read(job_client(faults), stream, sleep=waits.append, clock=lambda: 1000.0)
    assert values(result) == list(range(20))
    assert result.get_records_calls >= 5
    assert waits == [MIN_SECONDS_BETWEEN_CALLS] * (result.get_records_calls - 1)
