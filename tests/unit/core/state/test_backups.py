"""Checkpoint backups: the document, whose progress it is, and which tables are a connector's, without AWS."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.state.backups import (
    BACKUP_FORMAT,
    CheckpointBackup,
    RestoreTarget,
    check_backup_owner,
    lease_from_dict,
    lease_to_dict,
    restore_target,
)
from airflow_kinesis_snowflake.core.state.chain import Chain, walk_chain
from airflow_kinesis_snowflake.core.state.errors import MaintenanceError
from airflow_kinesis_snowflake.core.state.leases import STATE_SHARD_END, Lease
from airflow_kinesis_snowflake.core.state.metadata import TableMarks

SEQ = "49590338271490256608559692538361571095921575989136588898"
TRIM = StartPosition(InitialPosition.TRIM_HORIZON)
AT = StartPosition(InitialPosition.AT_TIMESTAMP, datetime(2026, 1, 31, 12, tzinfo=UTC))
LEASES = (
    Lease("shardId-000000000000", 7, TRIM, state=STATE_SHARD_END, child_shard_ids=("shardId-000000000002",)),
    Lease(
        "shardId-000000000002",
        3,
        AT,
        parent_shard_ids=("shardId-000000000000",),
        lease_owner="reset/x",
        lease_expires_at=5.0,
        checkpoint=Checkpoint(SEQ, 4),
        checkpointed_at=1_700_000_000.5,
        hash_key_range=("0", "170141183460469231731687303715884105727"),
    ),
    Lease("shardId-000000000003", 0, TRIM),
)


def backup() -> CheckpointBackup:
    return CheckpointBackup(
        application_name="orders-app",
        stream_name="orders",
        generation_id="g1",
        created_at=datetime(2026, 2, 1, 8, 30, 5, 123456, tzinfo=UTC),
        reason="reset-new_application_name",
        leases=LEASES,
        connector_id="orders",
        superseded_by=None,
        destination="ANALYTICS.RAW.ORDERS",
        stream_arn="arn:aws:kinesis:us-east-1:123456789012:stream/orders",
    )


def test_a_backup_survives_json_with_every_lease_field_that_matters() -> None:
    text = backup().to_json()
    again = CheckpointBackup.from_json(text)
    assert again.application_name == "orders-app"
    assert again.generation_id == "g1"
    assert again.created_at == backup().created_at
    by_shard = {lease.shard_id: lease for lease in again.leases}
    done, child, fresh = (by_shard[lease.shard_id] for lease in LEASES)
    assert done.state == STATE_SHARD_END and done.child_shard_ids == ("shardId-000000000002",)
    assert child.checkpoint == Checkpoint(SEQ, 4)
    assert child.start == AT
    assert child.parent_shard_ids == ("shardId-000000000000",)
    assert child.hash_key_range == LEASES[1].hash_key_range
    assert child.checkpointed_at == 1_700_000_000.5
    # Who held a lease when it was backed up is not kept: a restored lease starts free.
    assert (child.lease_owner, child.lease_counter) == (None, 0)
    assert fresh.checkpoint is None and fresh.start == TRIM
    document = json.loads(text)
    assert document["format"] == BACKUP_FORMAT
    assert document["leases"][1]["checkpoint"] == {"sequence_number": SEQ, "sub_sequence_number": 4}


def test_backup_checkpoints_and_file_name() -> None:
    assert backup().checkpoints() == {
        "shardId-000000000000": None,
        "shardId-000000000002": {"sequence_number": SEQ, "sub_sequence_number": 4},
        "shardId-000000000003": None,
    }
    assert backup().file_name == "orders-app/20260201T083005123456Z-reset-new_application_name.json"


def test_lease_dict_round_trip() -> None:
    for lease in LEASES:
        restored = lease_from_dict(lease_to_dict(lease))
        assert (restored.shard_id, restored.checkpoint, restored.state, restored.start) == (
            lease.shard_id,
            lease.checkpoint,
            lease.state,
            lease.start,
        )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "something-else"}, "not a checkpoint backup"),
        ({"version": 3}, "version 3 is not one of 1, 2"),
        ({"leases": [{"shard_id": "s"}]}, "incomplete or malformed"),
        ({"created_at": "yesterday"}, "incomplete or malformed"),
    ],
)
def test_a_malformed_backup_is_refused_with_the_reason(change: dict[str, object], message: str) -> None:
    document = backup().to_dict() | change
    with pytest.raises(MaintenanceError, match=message):
        CheckpointBackup.from_dict(document)


def test_a_backup_records_whose_progress_it_is() -> None:
    document = json.loads(backup().to_json())
    assert {k: document[k] for k in ("version", "connector_id", "application_name", "stream_name", "destination")} == {
        "version": 2,
        "connector_id": "orders",
        "application_name": "orders-app",
        "stream_name": "orders",
        "destination": "ANALYTICS.RAW.ORDERS",
    }
    again = CheckpointBackup.from_json(backup().to_json())
    assert (again.connector_id, again.destination, again.stream_arn, again.version) == (
        "orders",
        "ANALYTICS.RAW.ORDERS",
        "arn:aws:kinesis:us-east-1:123456789012:stream/orders",
        2,
    )


def test_a_version_1_backup_is_read_with_its_owner_unknown() -> None:
    document = backup().to_dict() | {"version": 1, "connector_id": None}
    del document["destination"], document["stream_arn"]
    old = CheckpointBackup.from_dict(document)
    assert (old.version, old.connector_id, old.destination, old.application_name) == (1, None, None, "orders-app")


ORDERS_TARGET = RestoreTarget(
    connector_id="orders", stream_name="orders", applications=("orders-app",), destination="ANALYTICS.RAW.ORDERS"
)


def test_a_backup_of_this_connector_is_accepted() -> None:
    check_backup_owner(backup(), ORDERS_TARGET)
    # Destinations are unquoted identifiers: case does not matter.
    check_backup_owner(backup(), replace(ORDERS_TARGET, destination="analytics.raw.orders"))
    # Of a table clean-up removed since (not on the chain any more): its connector says whose it is.
    check_backup_owner(replace(backup(), application_name="orders-v0"), ORDERS_TARGET)


@pytest.mark.parametrize(
    ("change", "target", "says"),
    [
        (
            {"connector_id": "clicks"},
            {},
            "connector 'clicks' in the backup, 'orders' for the connector",
        ),
        (
            {"destination": "ANALYTICS.RAW.CLICKS"},
            {},
            "destination ANALYTICS.RAW.CLICKS in the backup, ANALYTICS.RAW.ORDERS for the connector",
        ),
        ({"stream_name": "clicks"}, {}, "stream 'clicks' in the backup, 'orders' for the connector"),
        (
            {},
            {"table_connector_id": "clicks"},
            "lease table 'orders-app' now belongs to connector 'clicks', not 'orders'",
        ),
    ],
    ids=["connector", "destination", "stream", "table-owner"],
)
def test_a_backup_of_another_connector_is_refused_naming_both(
    change: dict[str, object], target: dict[str, object], says: str
) -> None:
    with pytest.raises(MaintenanceError, match="is not one of connector orders") as refused:
        check_backup_owner(replace(backup(), **change), replace(ORDERS_TARGET, **target))  # type: ignore[arg-type]
    assert says in str(refused.value)
    assert "Nothing was changed" in str(refused.value)


def test_a_backup_that_does_not_say_whose_it_is_needs_a_table_of_this_connector() -> None:
    # A clean-up backup of another connector's table, written before backups recorded their owner.
    unknown = replace(backup(), application_name="clicks-app", connector_id=None, destination=None, version=1)
    with pytest.raises(MaintenanceError) as refused:
        check_backup_owner(unknown, ORDERS_TARGET)
    message = str(refused.value)
    assert "does not record its connector (version 1" in message
    assert "'clicks-app' is not one of connector orders's lease tables (orders-app)" in message
    assert '"connector_id": "orders", "destination": "ANALYTICS.RAW.ORDERS"' in message
    # The same backup of this connector's own table is restored as before.
    check_backup_owner(replace(unknown, application_name="orders-app"), ORDERS_TARGET)


def test_a_backup_that_is_not_json_is_refused() -> None:
    with pytest.raises(MaintenanceError, match="not JSON"):
        CheckpointBackup.from_json("{nope")


ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"


def test_a_backup_of_a_stream_deleted_and_created_again_is_refused() -> None:
    recreated = replace(ORDERS_TARGET, stream_arn="arn:aws:kinesis:us-east-1:123456789012:stream/orders-2")
    with pytest.raises(MaintenanceError, match="the stream was deleted and created again") as refused:
        check_backup_owner(replace(backup(), stream_arn=ARN), recreated)
    assert f"stream ARN {ARN} in the backup" in str(refused.value)
    # The same stream, or a side that does not know the ARN: accepted.
    check_backup_owner(replace(backup(), stream_arn=ARN), replace(ORDERS_TARGET, stream_arn=ARN))
    check_backup_owner(replace(backup(), stream_arn=None), recreated)
    check_backup_owner(replace(backup(), stream_arn=ARN), replace(ORDERS_TARGET, stream_arn=None))


def test_a_backup_naming_this_connector_must_still_be_of_one_of_its_tables() -> None:
    # Its table exists, is not on the chain and does not name this connector: restoring would take it over.
    elsewhere = replace(backup(), application_name="clicks-app")
    with pytest.raises(MaintenanceError, match="restoring would take it over") as refused:
        check_backup_owner(elsewhere, replace(ORDERS_TARGET, table_exists=True))
    assert "is not on connector orders's chain (orders-app)" in str(refused.value)
    # A table clean-up removed since: restoring it creates it again, taking nothing over.
    check_backup_owner(elsewhere, replace(ORDERS_TARGET, table_exists=False))


def table_marks(name: str, **kwargs: object) -> TableMarks:
    return replace(TableMarks(name, name, "orders", "g1", ""), **kwargs)  # type: ignore[arg-type]


def chain_of(*names: str, missing_last: bool = False) -> Chain[TableMarks]:
    tables = {
        n: table_marks(n, superseded_by=following) for n, following in zip(names, [*names[1:], None], strict=True)
    }
    if missing_last:
        del tables[names[-1]]
    return walk_chain(names[0], tables.get, lambda m: m.superseded_by)


@pytest.mark.parametrize(
    ("backup_table", "applications", "exists"),
    [
        (None, ("orders-app", "orders-v2"), False),
        (table_marks("orders-v0", superseded_by="orders-v2"), ("orders-app", "orders-v2", "orders-v0"), True),
        (table_marks("orders-old", connector_id="orders"), ("orders-app", "orders-v2", "orders-old"), True),
        (table_marks("clicks-app", connector_id="clicks"), ("orders-app", "orders-v2"), True),
        (table_marks("clicks-app"), ("orders-app", "orders-v2"), True),
    ],
    ids=["gone", "points-into-the-chain", "names-this-connector", "names-another", "names-none"],
)
def test_which_tables_are_this_connectors(
    backup_table: TableMarks | None, applications: tuple[str, ...], exists: bool
) -> None:
    target = restore_target(
        connector_id="orders",
        stream_name="orders",
        chain=chain_of("orders-app", "orders-v2"),
        backup_table=backup_table,
        stream_arn=ARN,
    )
    assert (target.applications, target.table_exists, target.stream_arn) == (applications, exists, ARN)
    # A missing last hop is still this connector's: a restore is how it comes back.
    assert restore_target(
        connector_id="orders", stream_name="orders", chain=chain_of("orders-app", "orders-v2", missing_last=True),
        backup_table=None,
    ).applications == ("orders-app", "orders-v2")  # fmt: skip


def test_a_stream_created_again_under_the_same_name_and_arn_is_another_stream() -> None:
    # Kinesis gives a stream deleted and created again the same ARN: its creation time tells them apart.
    old = replace(backup(), stream_arn=ARN, stream_created_at="2025-01-01T00:00:00+00:00")
    now = replace(ORDERS_TARGET, stream_arn=ARN, stream_created_at="2026-03-01T12:00:00+00:00")
    with pytest.raises(MaintenanceError, match="the stream was deleted and created again") as refused:
        check_backup_owner(old, now)
    assert "stream created at 2025-01-01T00:00:00+00:00 in the backup" in str(refused.value)
    # Recorded as epoch seconds or ISO text, the same moment is the same stream.
    check_backup_owner(
        replace(old, stream_created_at="1735689600"), replace(now, stream_created_at=old.stream_created_at)
    )
    check_backup_owner(old, replace(now, stream_created_at=None))
