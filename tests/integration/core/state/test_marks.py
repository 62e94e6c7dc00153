"""Reset marks, supersession, resolution of the active application and setting a generation, against moto."""

from __future__ import annotations

import time

import pytest

from airflow_kinesis_snowflake.core.model import InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.errors import MaintenanceError
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.core.state.marks import (
    clear_reset_mark,
    mark_superseded,
    resolve_application,
    set_generation,
    set_reset_mark,
)
from airflow_kinesis_snowflake.core.state.metadata import ResetMark, read_marks
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


def mark(owner: str, seconds: float = 600) -> ResetMark:
    now = time.time()
    return ResetMark(owner, "delete_table", now, now + seconds)


def test_resolution_follows_supersession_and_reports_live_marks(emulators: Emulators) -> None:
    client = emulators.boto3_client("dynamodb")
    missing = unique("never-created")
    assert resolve_application(client, missing).active == missing  # the ingest DAG creates it
    assert resolve_application(client, missing).metadata is None

    first, second = lease_table(emulators), lease_table(emulators)
    resolution = resolve_application(client, first.table_name)
    assert (resolution.active, resolution.superseded, resolution.reset) == (first.table_name, False, None)

    mark_superseded(client, first.table_name, by=second.table_name)
    resolution = resolve_application(client, first.table_name)
    assert (resolution.active, resolution.chain) == (second.table_name, (first.table_name, second.table_name))
    # The active table's metadata item, as read on the way: nothing needs to read it again.
    assert resolution.metadata == read_marks(client, second.table_name) == second.metadata()
    assert resolution.metadata is not None and resolution.metadata.table_name == second.table_name

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
