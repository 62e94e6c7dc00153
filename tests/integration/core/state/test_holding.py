"""Holding every lease of a table, against moto."""

from __future__ import annotations

import time

import pytest

from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import eligible_leases
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.errors import MaintenanceError
from airflow_kinesis_snowflake.core.state.holding import hold_leases
from airflow_kinesis_snowflake.core.state.leases import Lease, LeaseTable
from tests.conftest import unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration

TRIM = StartPosition(InitialPosition.TRIM_HORIZON)
SHARDS = [Shard(f"shardId-00000000000{i}") for i in range(3)]


def lease_table(emulators: Emulators, shards: list[Shard] = SHARDS) -> LeaseTable:
    name = unique("maint")
    table = LeaseTable(emulators.boto3_client("dynamodb"), name)
    table.create(stream_name="orders", application_name=name)
    table.sync_shards(shards, TRIM)
    return table


def progress(table: LeaseTable, shard_id: str, sequence: str) -> Lease:
    """What an ingest batch leaves behind: a checkpoint, and the lease given back."""
    lease = table.take(table.leases()[shard_id], "batch", 60)
    assert lease is not None
    lease = table.checkpoint(lease, Checkpoint(sequence))
    table.release(lease)
    return table.leases()[shard_id]


def test_hold_takes_every_lease_and_waits_for_a_running_batch(emulators: Emulators) -> None:
    table = lease_table(emulators)
    progress(table, "shardId-000000000001", "42")
    running = table.take(table.leases()["shardId-000000000002"], "batch/running", 1.5)
    assert running is not None
    held = hold_leases(table, "reset/x", hold_seconds=300, timeout_seconds=30, poll_seconds=0.5)
    assert set(held) == {s.shard_id for s in SHARDS}
    stored = table.leases()
    assert {lease.lease_owner for lease in stored.values()} == {"reset/x"}
    assert stored["shardId-000000000001"].checkpoint == Checkpoint("42")
    # A batch planned now finds nothing it may take.
    planned_at = time.time()
    assert eligible_leases(table.leases(), planned_at) == []


def test_hold_gives_up_naming_the_holder(emulators: Emulators) -> None:
    table = lease_table(emulators)
    assert table.take(table.leases()["shardId-000000000000"], "batch/slow", 600) is not None
    with pytest.raises(MaintenanceError, match=r"shardId-000000000000 by batch/slow"):
        hold_leases(table, "reset/x", hold_seconds=300, timeout_seconds=0.5, poll_seconds=0.2)
    assert table.leases()["shardId-000000000000"].lease_owner == "batch/slow"
