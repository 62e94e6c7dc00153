"""Initial positions apply only while a shard has no checkpoint (moto server)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.model import InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import plan_ranges
from airflow_kinesis_snowflake.core.sources.readers import read_shard_range
from airflow_kinesis_snowflake.core.sources.shards import list_shards
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from tests.conftest import create_stream, unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration


def put(kinesis: Any, stream: str, values: range) -> None:
    for v in values:
        kinesis.put_record(StreamName=stream, Data=json.dumps({"v": v}).encode(), PartitionKey="k")


def first_batch(emulators: Emulators, stream: str, table: LeaseTable, initial: StartPosition) -> tuple[Any, Any]:
    """What an application's batch reads: sync shards with ``initial``, plan, read."""
    kinesis = emulators.boto3_client("kinesis")
    leases = table.sync_shards(list_shards(kinesis, stream), initial)
    (shard_range,) = plan_ranges(leases.values(), max_records_per_shard=1000)
    result = read_shard_range(
        kinesis, stream, shard_range, cutoff=datetime.now(UTC) + timedelta(hours=1), max_records_per_call=100
    )
    return leases, result


def values(result: Any) -> list[int]:
    return [json.loads(r.data)["v"] for r in result.records]


def new_table(emulators: Emulators) -> LeaseTable:
    name = unique("pos")
    table = LeaseTable(emulators.boto3_client("dynamodb"), name)
    table.create(stream_name="s", application_name=name)
    return table


@pytest.fixture
def stream(emulators: Emulators) -> str:
    name = unique("pos")
    create_stream(emulators, name, 1)
    return name


def test_trim_horizon_reads_everything_retained(emulators: Emulators, stream: str) -> None:
    kinesis = emulators.boto3_client("kinesis")
    put(kinesis, stream, range(5))
    _, result = first_batch(emulators, stream, new_table(emulators), StartPosition(InitialPosition.TRIM_HORIZON))
    assert values(result) == [0, 1, 2, 3, 4]


def test_latest_reads_what_arrived_after_the_first_start(emulators: Emulators, stream: str) -> None:
    kinesis = emulators.boto3_client("kinesis")
    put(kinesis, stream, range(5))
    time.sleep(0.05)  # arrival times are compared with the moment the application first started
    table = new_table(emulators)
    latest = StartPosition.resolve(InitialPosition.LATEST, None, datetime.now(UTC))
    _, result = first_batch(emulators, stream, table, latest)
    assert values(result) == []
    put(kinesis, stream, range(5, 8))
    # The next batch still starts from the application's first start, not from "now".
    _, later = first_batch(
        emulators, stream, table, StartPosition.resolve(InitialPosition.LATEST, None, datetime.now(UTC))
    )
    assert values(later) == [5, 6, 7]


def test_at_timestamp_skips_records_before_it(emulators: Emulators, stream: str) -> None:
    kinesis = emulators.boto3_client("kinesis")
    put(kinesis, stream, range(3))
    time.sleep(0.05)
    start = datetime.now(UTC)
    time.sleep(0.05)
    put(kinesis, stream, range(3, 6))
    position = StartPosition.resolve(InitialPosition.AT_TIMESTAMP, start, datetime.now(UTC))
    _, result = first_batch(emulators, stream, new_table(emulators), position)
    assert values(result) == [3, 4, 5]


def test_changing_the_setting_later_does_not_move_an_existing_checkpoint(emulators: Emulators, stream: str) -> None:
    kinesis = emulators.boto3_client("kinesis")
    put(kinesis, stream, range(4))
    table = new_table(emulators)
    leases, result = first_batch(emulators, stream, table, StartPosition(InitialPosition.TRIM_HORIZON))
    (lease,) = leases.values()
    held = table.take(lease, "w", 60)
    assert held is not None
    table.checkpoint(held, result.last)
    put(kinesis, stream, range(4, 6))
    # The connector is now configured with LATEST: the checkpoint wins, nothing is skipped.
    latest = StartPosition.resolve(InitialPosition.LATEST, None, datetime.now(UTC))
    leases, later = first_batch(emulators, stream, table, latest)
    assert values(later) == [4, 5]
    assert next(iter(leases.values())).start == StartPosition(InitialPosition.TRIM_HORIZON)
