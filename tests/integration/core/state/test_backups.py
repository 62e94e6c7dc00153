"""Snapshots and restores of a lease table's checkpoints, against moto."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.backups import CheckpointBackup, restore_leases, snapshot
from airflow_kinesis_snowflake.core.state.errors import MaintenanceError
from airflow_kinesis_snowflake.core.state.holding import hold_leases
from airflow_kinesis_snowflake.core.state.leases import STATE_SHARD_END, Lease, LeaseTable
from airflow_kinesis_snowflake.core.state.marks import (
    set_generation,
)
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


def test_restore_puts_back_exactly_the_backup(emulators: Emulators) -> None:
    client = emulators.boto3_client("dynamodb")
    table = lease_table(emulators)
    progress(table, "shardId-000000000000", "100")
    progress(table, "shardId-000000000001", "200")
    before = snapshot(table, reason="test", connector_id="c")
    # Progress moves on, a shard appears, another finishes.
    progress(table, "shardId-000000000000", "150")
    table.sync_shards([*SHARDS, Shard("shardId-000000000009")], TRIM)
    done = table.take(table.leases()["shardId-000000000002"], "batch", 60)
    assert done is not None
    table.release(table.checkpoint(done, Checkpoint("300"), shard_end=True))
    set_generation(client, table.table_name, "other-generation")

    held = hold_leases(table, "restore/x", hold_seconds=300, timeout_seconds=5)
    result = restore_leases(table, before, "restore/x")
    set_generation(client, table.table_name, before.generation_id)
    assert result.removed == ("shardId-000000000009",)
    assert set(result.written) == {s.shard_id for s in SHARDS}
    after = table.leases()
    assert {k: (v.checkpoint, v.state, v.lease_owner) for k, v in after.items()} == {
        "shardId-000000000000": (Checkpoint("100"), "ACTIVE", None),
        "shardId-000000000001": (Checkpoint("200"), "ACTIVE", None),
        "shardId-000000000002": (None, "ACTIVE", None),
    }
    # Counters moved past every copy a stale worker could hold, so its conditional writes fail.
    assert all(after[s].lease_counter > held[s].lease_counter for s in after)
    metadata = table.metadata()
    assert metadata is not None and metadata.generation_id == before.generation_id
    assert snapshot(table, reason="again").checkpoints() == before.checkpoints()


def test_restore_refuses_a_lease_a_worker_holds(emulators: Emulators) -> None:
    table = lease_table(emulators)
    backup = snapshot(table, reason="test")
    assert table.take(table.leases()["shardId-000000000001"], "batch/live", 600) is not None
    with pytest.raises(MaintenanceError, match="shardId-000000000001 by batch/live"):
        restore_leases(table, backup, "restore/x")


def test_restore_into_an_empty_table_writes_shard_end_and_lineage(emulators: Emulators) -> None:
    table = lease_table(emulators, shards=[])
    backup = CheckpointBackup(
        application_name=table.table_name,
        stream_name="orders",
        generation_id="g",
        created_at=datetime.now(UTC),
        reason="test",
        leases=(
            Lease("p", 0, TRIM, state=STATE_SHARD_END, child_shard_ids=("c",)),
            Lease("c", 0, TRIM, parent_shard_ids=("p",), checkpoint=Checkpoint("5", 2)),
        ),
    )
    restore_leases(table, backup, "restore/x")
    leases = table.leases()
    assert leases["p"].shard_ended and leases["p"].child_shard_ids == ("c",)
    assert leases["c"].parent_shard_ids == ("p",) and leases["c"].checkpoint == Checkpoint("5", 2)
