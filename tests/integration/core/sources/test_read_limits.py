"""A shard's read limits (5 GetRecords calls and 2 MiB per second), enforced by the emulator as AWS does:
the reader reads a shard at its full rate without ever being throttled."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from airflow_kinesis_snowflake.core.admin.impact import Count, estimate_impact
from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import ShardRange
from airflow_kinesis_snowflake.core.sources.readers import read_shard_range
from airflow_kinesis_snowflake.core.sources.shards import list_shards
from airflow_kinesis_snowflake.core.state.leases import Lease
from tests.conftest import create_stream, unique
from tests.emulators import Emulators
from tests.emulators.servers import AWS_KEY, REGION

pytestmark = pytest.mark.integration

SHARD = "shardId-000000000000"
MIB = 1 << 20


@pytest.fixture
def limited(emulators: Emulators) -> Iterator[Emulators]:
    yield emulators
    emulators.inject_kinesis_faults([])


def client_without_retries(emulators: Emulators) -> Any:
    """A Kinesis client that gives up at the first throttle, so that none can hide behind a retry."""
    return boto3.client(
        "kinesis",
        region_name=REGION,
        endpoint_url=emulators.aws_endpoint,
        aws_access_key_id=AWS_KEY,
        aws_secret_access_key=AWS_KEY,
        config=Config(retries={"mode": "standard", "total_max_attempts": 1}),
    )


def limited_stream(emulators: Emulators, payloads: list[bytes]) -> str:
    stream = unique("limits")
    kinesis = create_stream(emulators, stream, 1)
    for payload in payloads:
        kinesis.put_record(StreamName=stream, Data=payload, PartitionKey="k")
    emulators.inject_kinesis_faults([{"operation": "GetRecords", "stream": stream, "read_limits": True}])
    return stream


def test_the_emulator_throttles_a_call_made_right_after_a_large_page(limited: Emulators) -> None:
    # 10 pages of just under 1 MiB: about 10 MiB that the shard pays back in about 5 seconds.
    stream = limited_stream(limited, [bytes([n]) * (MIB - 1000) for n in range(10)])
    kinesis = client_without_retries(limited)
    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=SHARD, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    page = kinesis.get_records(ShardIterator=iterator, Limit=10)
    assert len(page["Records"]) == 10
    with pytest.raises(ClientError) as raised:
        kinesis.get_records(ShardIterator=page["NextShardIterator"], Limit=10)
    assert raised.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert limited.served_kinesis_faults() == [
        {"operation": "GetRecords", "stream": stream, "shard": SHARD, "throttled": "bytes"}
    ]


def test_the_reader_reads_a_shard_at_its_full_rate_without_being_throttled(limited: Emulators) -> None:
    # 12 MiB in records of half a MiB, read 8 at a time: pages of 4 MiB, two seconds of the shard's budget each.
    payloads = [bytes([n]) * (MIB // 2 - 100) for n in range(24)]
    stream = limited_stream(limited, payloads)
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    result = read_shard_range(
        client_without_retries(limited),
        stream,
        ShardRange(SHARD, None, StartPosition(InitialPosition.TRIM_HORIZON), 1000),
        cutoff=datetime.now(UTC) + timedelta(hours=1),
        max_records_per_call=8,
        sleep=sleep,
    )

    assert [r.data for r in result.records] == payloads
    assert limited.served_kinesis_faults() == []
    assert result.get_records_calls >= 4  # three pages of records, and the one that finds the shard caught up
    # Paced by the bytes, not only by the calls: about 2 seconds after each 4 MiB page.
    assert sum(waits) > 2 * 0.2 * result.get_records_calls
    # ... and no more than the budget asks: the bytes of the pages before the last call, at 2 MiB/s.
    assert sum(waits) <= sum(map(len, payloads)) / (2 * MIB) + 0.2 * result.get_records_calls


def test_the_reset_estimate_reads_a_shard_within_its_limits(limited: Emulators) -> None:
    stream = unique("limits")
    kinesis = create_stream(limited, stream, 1)
    # 6 MiB in records of half a MiB, read 4 a call: pages of 2 MiB, a second of the shard's budget each.
    sequences = [
        kinesis.put_record(StreamName=stream, Data=bytes([n]) * (MIB // 2 - 100), PartitionKey="k")["SequenceNumber"]
        for n in range(12)
    ]
    limited.inject_kinesis_faults([{"operation": "GetRecords", "stream": stream, "read_limits": True}])
    client = client_without_retries(limited)
    # Every record delivered: a reset to TRIM_HORIZON reads all 12 again.
    leases = {SHARD: Lease(SHARD, 1, StartPosition(InitialPosition.TRIM_HORIZON), checkpoint=Checkpoint(sequences[-1]))}

    (impact,) = estimate_impact(
        client,
        stream,
        list_shards(client, stream),
        leases,
        StartPosition(InitialPosition.TRIM_HORIZON),
        max_records_per_call=4,
    )

    assert impact.read_again == Count(12)
    assert limited.served_kinesis_faults() == []
