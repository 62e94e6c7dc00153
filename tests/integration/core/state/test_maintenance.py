"""Reset marks, supersession, holding leases, restoring and the reset estimate against moto."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.admin.impact import Count, estimate_impact
from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import eligible_leases
from airflow_kinesis_snowflake.core.sources.shards import Shard, list_shards
from airflow_kinesis_snowflake.core.state.backups import CheckpointBackup, restore_leases, snapshot
from airflow_kinesis_snowflake.core.state.errors import MaintenanceError
from airflow_kinesis_snowflake.core.state.holding import hold_leases
from airflow_kinesis_snowflake.core.state.leases import STATE_SHARD_END, Lease, LeaseTable
from airflow_kinesis_snowflake.core.state.marks import (
    clear_reset_mark,
    mark_superseded,
    resolve_application,
    set_generation,
    set_reset_mark,
)
from airflow_kinesis_snowflake.core.state.metadata import ResetMark, read_marks
from tests.conftest import create_stream, put_json, unique
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


def mark(owner: str, seconds: float = 600) -> ResetMark:
    now = time.time()
    return ResetMark(owner, "delete_table", now, now + seconds)


def test_resolution_follows_supersession_and_reports_live_marks(emulators: Emulators) -> None:
    client = emulators.boto3_client("dynamodb")
    missing = unique("never-created")
    assert resolve_application(client, missing).active == missing  # the ingest DAG creates it

    first, second = lease_table(emulators), lease_table(emulators)
    resolution = resolve_application(client, first.table_name)
    assert (resolution.active, resolution.superseded, resolution.reset) == (first.table_name, False, None)

    mark_superseded(client, first.table_name, by=second.table_name)
    resolution = resolve_application(client, first.table_name)
    assert (resolution.active, resolution.chain) == (second.table_name, (first.table_name, second.table_name))

    set_reset_mark(client, second.table_name, mark("reset/a"))
    resolution = resolve_application(client, first.table_name)
    assert resolution.reset is not None and resolution.reset.owner == "reset/a"
    assert resolution.reset_table == second.table_name
    assert clear_reset_mark(client, second.table_name, "reset/a") is True
    assert resolve_application(client, first.table_name).reset is None


def test_a_pointer_to_a_missing_table_or_a_loop_is_an_error(emulators: Emulators) -> None:
    client = emulators.boto3_client("dynamodb")
    first, second = lease_table(emulators), lease_table(emulators)
    mark_superseded(client, first.table_name, by="gone-" + first.table_name)
    with pytest.raises(MaintenanceError, match="does not exist or has no metadata item; restore"):
        resolve_application(client, first.table_name)
    mark_superseded(client, first.table_name, by=second.table_name)
    mark_superseded(client, second.table_name, by=first.table_name)
    with pytest.raises(MaintenanceError, match="loop"):
        resolve_application(client, first.table_name)


def test_one_reset_at_a_time_until_its_mark_expires(emulators: Emulators) -> None:
    client = emulators.boto3_client("dynamodb")
    table = lease_table(emulators)
    set_reset_mark(client, table.table_name, mark("reset/a"))
    set_reset_mark(client, table.table_name, mark("reset/a"))  # the owner may renew it
    with pytest.raises(MaintenanceError, match=r"another reset or restore is working on .* by reset/a"):
        set_reset_mark(client, table.table_name, mark("reset/b"))
    assert clear_reset_mark(client, table.table_name, "reset/b") is False
    marks = read_marks(client, table.table_name)
    assert marks is not None and marks.reset is not None and marks.reset.owner == "reset/a"

    expired = lease_table(emulators)
    set_reset_mark(client, expired.table_name, mark("reset/dead", seconds=-1))
    assert resolve_application(client, expired.table_name).reset is None
    set_reset_mark(client, expired.table_name, mark("reset/b"))
    marks = read_marks(client, expired.table_name)
    assert marks is not None and marks.reset is not None and marks.reset.owner == "reset/b"
    with pytest.raises(MaintenanceError, match="no metadata item"):
        set_reset_mark(client, unique("absent-table"), mark("reset/c"))


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


def sequence_numbers(kinesis: Any, stream: str, shard_id: str) -> list[str]:
    it = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")
    return [r["SequenceNumber"] for r in kinesis.get_records(ShardIterator=it["ShardIterator"])["Records"]]


def test_estimate_counts_records_read_again_and_skipped(emulators: Emulators) -> None:
    stream = unique("estimate")
    kinesis = create_stream(emulators, stream, 1)
    put_json(kinesis, stream, [{"id": i} for i in range(8)])
    time.sleep(1.1)  # arrival times are what AT_TIMESTAMP compares
    between = datetime.now(UTC)
    time.sleep(0.1)
    put_json(kinesis, stream, [{"id": i} for i in range(8, 10)])
    shards = list_shards(kinesis, stream)
    (shard_id,) = [s.shard_id for s in shards]
    sequences = sequence_numbers(kinesis, stream, shard_id)
    assert len(sequences) == 10
    # Six records delivered (0..5); 6..9 not yet.
    leases = {shard_id: Lease(shard_id, 1, TRIM, checkpoint=Checkpoint(sequences[5]))}

    def estimate(start: StartPosition, **kwargs: Any) -> tuple[Count | None, Count | None]:
        (impact,) = estimate_impact(kinesis, stream, shards, leases, start, **kwargs)
        return impact.read_again, impact.skipped

    assert estimate(TRIM) == (Count(6), Count(0))
    assert estimate(StartPosition(InitialPosition.AT_TIMESTAMP, between)) == (Count(0), Count(2))
    assert estimate(StartPosition.resolve(InitialPosition.LATEST, None, datetime.now(UTC))) == (Count(0), Count(4))
    assert estimate(TRIM, max_records=3) == (Count(3, capped=True), Count(0))
    assert estimate(TRIM, max_records=0) == (None, None)

    # A finished shard is read again entirely; a shard with no lease starts at the new position anyway.
    finished = {shard_id: Lease(shard_id, 1, TRIM, state=STATE_SHARD_END)}
    (impact,) = estimate_impact(kinesis, stream, shards, finished, TRIM)
    assert (impact.read_again, impact.skipped) == (Count(10), Count(0))
    (impact,) = estimate_impact(kinesis, stream, shards, {}, TRIM)
    assert (impact.current_start, impact.read_again, impact.skipped) == (None, Count(0), Count(0))
    # A lease whose shard left the stream's retention is listed, not read.
    gone = estimate_impact(kinesis, stream, shards, {**leases, "shardId-old": Lease("shardId-old", 0, TRIM)}, TRIM)
    assert [(i.shard_id, i.in_stream, i.read_again) for i in gone][1] == ("shardId-old", False, None)


def test_a_generation_is_set_only_on_the_table_a_run_decided_on(emulators: Emulators) -> None:
    client = emulators.boto3_client("dynamodb")
    table = lease_table(emulators)
    current = table.metadata().generation_id  # type: ignore[union-attr]
    with pytest.raises(MaintenanceError, match="changed while its generation was being set"):
        set_generation(client, table.table_name, "g-adopted", expected="g-seen-earlier")
    set_reset_mark(client, table.table_name, ResetMark("restore/x", "restore", time.time(), time.time() + 60))
    with pytest.raises(MaintenanceError, match="a reset or restore may be working on it"):
        set_generation(client, table.table_name, "g-adopted", expected=current)
    set_generation(client, table.table_name, "g-restored", owner="restore/x")  # the mark's owner may
    assert table.metadata().generation_id == "g-restored"  # type: ignore[union-attr]
