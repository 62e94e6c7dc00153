"""Migrating a KCL lease table against DynamoDB (moto server)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.errors import LeaseTableError
from airflow_kinesis_snowflake.core.state.leases import Lease, LeaseTable
from airflow_kinesis_snowflake.core.state.metadata import CREATED_BY, CREATED_BY_TAG, KEY_ATTRIBUTE
from airflow_kinesis_snowflake.core.state.migration import (
    MARKER_KEY,
    LegacyMigration,
    MigrationError,
    MigrationState,
    migrate_legacy_table,
    migration_state,
    migration_table_name,
    needs_migration,
)
from airflow_kinesis_snowflake.operators.migration import MigrateLegacyCheckpointsOperator
from tests.conftest import unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration

STREAM = "orders"
SEQ = "49590338271490256608559692538361571095921575989136588898"
PARENT, CHILD_A, CHILD_B, OTHER = (f"shardId-00000000000{i}" for i in range(4))
MAX_HASH = "340282366920938463463374607431768211455"
MID_HASH = "170141183460469231731687303715884105727"


def kcl_items() -> list[dict[str, Any]]:
    """A KCL 2.x/3.x lease table after a split: the parent is done, one child has progressed."""
    return [
        {
            "leaseKey": {"S": PARENT},
            "checkpoint": {"S": "SHARD_END"},
            "checkpointSubSequenceNumber": {"N": "0"},
            "leaseCounter": {"N": "812"},
            "ownerSwitchesSinceCheckpoint": {"N": "0"},
            "childShardIds": {"SS": [CHILD_A, CHILD_B]},
            "startingHashKey": {"S": "0"},
            "endingHashKey": {"S": MAX_HASH},
        },
        {
            "leaseKey": {"S": CHILD_A},
            "checkpoint": {"S": SEQ},
            "checkpointSubSequenceNumber": {"N": "7"},
            "leaseCounter": {"N": "95"},
            "leaseOwner": {"S": "worker-1"},
            "ownerSwitchesSinceCheckpoint": {"N": "2"},
            "parentShardId": {"SS": [PARENT]},
            "pendingCheckpoint": {"S": "49590338271490256608559692538361571095921575989136588999"},
            "pendingCheckpointSubSequenceNumber": {"N": "0"},
            "startingHashKey": {"S": "0"},
            "endingHashKey": {"S": MID_HASH},
            "throughputKBps": {"N": "12.5"},
        },
        {
            "leaseKey": {"S": CHILD_B},
            "checkpoint": {"S": "TRIM_HORIZON"},
            "checkpointSubSequenceNumber": {"N": "0"},
            "leaseCounter": {"N": "3"},
            "ownerSwitchesSinceCheckpoint": {"N": "0"},
            "parentShardId": {"SS": [PARENT]},
            "startingHashKey": {"S": "170141183460469231731687303715884105728"},
            "endingHashKey": {"S": MAX_HASH},
        },
        {
            "leaseKey": {"S": OTHER},
            "checkpoint": {"S": "LATEST"},
            "checkpointSubSequenceNumber": {"N": "0"},
            "leaseCounter": {"N": "1"},
            "ownerSwitchesSinceCheckpoint": {"N": "0"},
        },
    ]


def create_kcl_table(client: Any, name: str, items: list[dict[str, Any]]) -> None:
    """A lease table as KCL 3.x creates it: hash key leaseKey, GSI LeaseOwnerToLeaseKeyIndex."""
    client.create_table(
        TableName=name,
        AttributeDefinitions=[
            {"AttributeName": "leaseKey", "AttributeType": "S"},
            {"AttributeName": "leaseOwner", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
        GlobalSecondaryIndexes=[
            {
                "IndexName": "LeaseOwnerToLeaseKeyIndex",
                "KeySchema": [
                    {"AttributeName": "leaseOwner", "KeyType": "HASH"},
                    {"AttributeName": "leaseKey", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
    )
    client.get_waiter("table_exists").wait(TableName=name)
    for item in items:
        client.put_item(TableName=name, Item=item)


def kcl_app(emulators: Emulators, items: list[dict[str, Any]] | None = None) -> tuple[Any, str]:
    client = emulators.boto3_client("dynamodb")
    app = unique("kcl-app")
    create_kcl_table(client, app, kcl_items() if items is None else items)
    return client, app


def table_exists(client: Any, name: str) -> bool:
    # Every page: the session's server holds the tables of every test that ran before.
    pages = client.get_paginator("list_tables").paginate()
    return any(name in page["TableNames"] for page in pages)


def scan(client: Any, name: str) -> list[dict[str, Any]]:
    return list(client.scan(TableName=name, ConsistentRead=True)["Items"])


def assert_migrated(client: Any, app: str) -> dict[str, Lease]:
    """The new table holds the KCL progress, and the temporary table is gone."""
    assert not table_exists(client, migration_table_name(app))
    table = LeaseTable(client, app)
    metadata = table.metadata()
    assert metadata is not None and metadata.stream_name == STREAM and metadata.created_by == CREATED_BY
    description = client.describe_table(TableName=app)["Table"]
    assert description["KeySchema"] == [{"AttributeName": KEY_ATTRIBUTE, "KeyType": "HASH"}]
    tags = client.list_tags_of_resource(ResourceArn=description["TableArn"])["Tags"]
    assert {"Key": CREATED_BY_TAG, "Value": CREATED_BY} in tags
    leases = table.leases()
    assert sorted(leases) == [PARENT, CHILD_A, CHILD_B, OTHER]
    assert leases[PARENT].shard_ended and leases[PARENT].checkpoint is None
    checkpoint = leases[CHILD_A].checkpoint
    assert checkpoint == Checkpoint(SEQ, 7) and checkpoint.sequence_number == SEQ
    assert not leases[CHILD_A].shard_ended and leases[CHILD_A].lease_owner is None
    assert leases[CHILD_B].checkpoint is None
    assert leases[CHILD_B].start == StartPosition(InitialPosition.TRIM_HORIZON)
    assert leases[CHILD_A].parent_shard_ids == (PARENT,) and leases[CHILD_B].parent_shard_ids == (PARENT,)
    assert leases[OTHER].start.position is InitialPosition.AT_TIMESTAMP and leases[OTHER].start.timestamp
    # The new table is usable as it is: this provider's own create accepts it.
    assert table.create(stream_name=STREAM, application_name=app) is False
    return leases


def test_migrates_a_kcl_table_and_a_second_run_is_a_no_op(emulators: Emulators) -> None:
    client, app = kcl_app(emulators)
    assert needs_migration(client, app)
    assert migration_state(client, app) is MigrationState.LEGACY

    result = migrate_legacy_table(client, app, STREAM)

    assert result.migrated and result.state_before is MigrationState.LEGACY
    assert result.copied_items == 4
    leases = assert_migrated(client, app)
    # LATEST carries no time in KCL: it becomes the migration time that the summary reports.
    assert leases[OTHER].start == StartPosition(InitialPosition.AT_TIMESTAMP, result.migrated_at)
    assert {lease.shard_id: lease for lease in result.leases} == leases
    assert not needs_migration(client, app)

    again = migrate_legacy_table(client, app, STREAM)
    assert again.state_before is MigrationState.CURRENT and not again.migrated and again.leases == ()
    assert LeaseTable(client, app).leases() == leases


def test_dry_run_writes_nothing(emulators: Emulators) -> None:
    client, app = kcl_app(emulators)
    result = migrate_legacy_table(client, app, STREAM, dry_run=True)
    assert result.dry_run and not result.migrated
    assert {lease.shard_id: lease.checkpoint for lease in result.leases}[CHILD_A] == Checkpoint(SEQ, 7)
    assert not table_exists(client, migration_table_name(app))
    assert migration_state(client, app) is MigrationState.LEGACY
    assert len(scan(client, app)) == 4


def test_interrupted_after_the_copy(emulators: Emulators) -> None:
    client, app = kcl_app(emulators)
    migration = LegacyMigration(client, app, STREAM)
    assert migration.copy() == 4

    assert migration.state() is MigrationState.COPYING
    temp = migration_table_name(app)
    copied = {i["leaseKey"]["S"]: i for i in scan(client, temp)}
    assert sorted(copied) == sorted([PARENT, CHILD_A, CHILD_B, OTHER, MARKER_KEY])
    assert copied[CHILD_A]["checkpointSubSequenceNumber"] == {"N": "7"}  # verbatim
    tags = client.list_tags_of_resource(ResourceArn=client.describe_table(TableName=temp)["Table"]["TableArn"])
    assert {"Key": CREATED_BY_TAG, "Value": CREATED_BY} in tags["Tags"]
    assert len(scan(client, app)) == 4  # the original is untouched

    migrate_legacy_table(client, app, STREAM)
    assert_migrated(client, app)


def test_interrupted_after_deleting_the_original(emulators: Emulators) -> None:
    client, app = kcl_app(emulators)
    migration = LegacyMigration(client, app, STREAM)
    migration.copy()
    migration.delete_original()

    assert not table_exists(client, app)
    assert migration_state(client, app) is MigrationState.COPIED and needs_migration(client, app)
    # The verified copy is now the only place the checkpoints are; a second run puts them back.
    result = migrate_legacy_table(client, app, STREAM)
    assert result.state_before is MigrationState.COPIED
    assert_migrated(client, app)


@pytest.mark.parametrize("stop_after", ["create_table", "write_leases"])
def test_interrupted_while_writing_the_new_table(emulators: Emulators, stop_after: str) -> None:
    client, app = kcl_app(emulators)
    migration = LegacyMigration(client, app, STREAM)
    migration.copy()
    migration.delete_original()
    migration.create_table()
    if stop_after == "write_leases":
        migration.write_leases()
        assert len(LeaseTable(client, app).leases()) == 4
    assert migration_state(client, app) is MigrationState.WRITING

    migrate_legacy_table(client, app, STREAM)
    assert_migrated(client, app)


def test_the_copy_is_kept_until_every_lease_is_written(emulators: Emulators) -> None:
    client, app = kcl_app(emulators)
    migration = LegacyMigration(client, app, STREAM)
    migration.copy()
    migration.delete_original()
    migration.create_table()
    with pytest.raises(MigrationError, match="lacks the migrated leases"):
        migration.drop_copy()
    assert table_exists(client, migration_table_name(app))
    migration.write_leases()
    migration.drop_copy()
    assert_migrated(client, app)


def test_incomplete_copy_stops_before_the_original_is_deleted(emulators: Emulators) -> None:
    client, app = kcl_app(emulators)
    migration = LegacyMigration(client, app, STREAM)
    migration.copy()
    temp = migration_table_name(app)
    client.delete_item(TableName=temp, Key={"leaseKey": {"S": CHILD_A}})  # as if the copy lost an item

    with pytest.raises(MigrationError, match=r"3 of 4 items.*original was left untouched"):
        migration.delete_original()
    assert sorted(i["leaseKey"]["S"] for i in scan(client, app)) == sorted([PARENT, CHILD_A, CHILD_B, OTHER])

    # A full run copies again and completes with nothing lost.
    migrate_legacy_table(client, app, STREAM)
    assert_migrated(client, app)


def test_a_running_kcl_worker_stops_the_migration(emulators: Emulators) -> None:
    client, app = kcl_app(emulators)
    migration = LegacyMigration(client, app, STREAM)
    migration.copy()
    # A live worker renews its lease and checkpoints after the copy was made.
    client.update_item(
        TableName=app,
        Key={"leaseKey": {"S": CHILD_A}},
        UpdateExpression="SET leaseCounter = :c, #cp = :s",
        ExpressionAttributeNames={"#cp": "checkpoint"},
        ExpressionAttributeValues={
            ":c": {"N": "96"},
            ":s": {"S": "49590338271490256608559692538361571095921575989136589000"},
        },
    )
    with pytest.raises(MigrationError, match="does not match"):
        migration.delete_original()
    assert migration_state(client, app) is MigrationState.COPYING

    # Once the worker is stopped, a new run takes the newer checkpoint.
    migrate_legacy_table(client, app, STREAM)
    leases = LeaseTable(client, app).leases()
    assert leases[CHILD_A].checkpoint == Checkpoint("49590338271490256608559692538361571095921575989136589000", 7)


def test_an_item_added_to_the_original_after_the_copy_is_caught(emulators: Emulators) -> None:
    client, app = kcl_app(emulators)
    migration = LegacyMigration(client, app, STREAM)
    migration.copy()
    client.put_item(
        TableName=app,
        Item={"leaseKey": {"S": "shardId-000000000009"}, "checkpoint": {"S": "5"}, "leaseCounter": {"N": "1"}},
    )
    with pytest.raises(MigrationError, match="holds 5 items but 4 were copied"):
        migration.delete_original()
    assert len(scan(client, app)) == 5

    migrate_legacy_table(client, app, STREAM)
    assert LeaseTable(client, app).leases()["shardId-000000000009"].checkpoint == Checkpoint("5")


def test_an_unverified_copy_is_never_trusted_or_deleted(emulators: Emulators) -> None:
    client, app = kcl_app(emulators)
    migration = LegacyMigration(client, app, STREAM)
    migration.copy()
    temp = migration_table_name(app)
    # As if the original was deleted by hand while the copy was unverified.
    client.delete_item(TableName=temp, Key={"leaseKey": {"S": MARKER_KEY}})
    client.delete_table(TableName=app)

    with pytest.raises(MigrationError, match="no verified-copy marker"):
        migrate_legacy_table(client, app, STREAM)
    assert len(scan(client, temp)) == 4
    assert not table_exists(client, app)


def test_untranslatable_table_is_refused_before_anything_is_written(emulators: Emulators) -> None:
    items = [*kcl_items(), {"leaseKey": {"S": "shardId-000000000004"}, "checkpoint": {"S": "AT_TIMESTAMP"}}]
    client, app = kcl_app(emulators, items)
    with pytest.raises(MigrationError, match="AT_TIMESTAMP"):
        migrate_legacy_table(client, app, STREAM)
    assert not table_exists(client, migration_table_name(app))
    assert len(scan(client, app)) == 5

    at = datetime(2026, 1, 31, tzinfo=UTC)
    migrate_legacy_table(client, app, STREAM, at_timestamp=at)
    leases = LeaseTable(client, app).leases()
    assert leases["shardId-000000000004"].start == StartPosition(InitialPosition.AT_TIMESTAMP, at)


def test_multi_stream_table_of_another_stream_is_left_alone(emulators: Emulators) -> None:
    items = [
        {
            "leaseKey": {"S": "123456789012:payments:1700000000:shardId-000000000000"},
            "checkpoint": {"S": "5"},
            "leaseCounter": {"N": "1"},
            "streamName": {"S": "123456789012:payments:1700000000"},
            "shardId": {"S": "shardId-000000000000"},
        }
    ]
    client, app = kcl_app(emulators, items)
    with pytest.raises(MigrationError, match="not of 'orders'"):
        migrate_legacy_table(client, app, STREAM)
    assert migration_state(client, app) is MigrationState.LEGACY


def test_progress_written_during_the_migration_keeps_the_copy(emulators: Emulators) -> None:
    client, app = kcl_app(emulators)
    migration = LegacyMigration(client, app, STREAM)
    migration.copy()
    migration.delete_original()
    # An ingestion creates the table and a fresh lease for the checkpointed shard meanwhile.
    table = LeaseTable(client, app)
    table.create(stream_name=STREAM, application_name=app)
    table.sync_shards([Shard(CHILD_A)], StartPosition(InitialPosition.TRIM_HORIZON))

    with pytest.raises(MigrationError, match=rf"other progress for \['{CHILD_A}'\].*was kept"):
        migrate_legacy_table(client, app, STREAM)
    assert table_exists(client, migration_table_name(app))

    # The way out the error names: delete the new table and run again.
    client.delete_table(TableName=app)
    client.get_waiter("table_not_exists").wait(TableName=app)
    migrate_legacy_table(client, app, STREAM)
    assert_migrated(client, app)


def test_nothing_to_migrate(emulators: Emulators) -> None:
    client = emulators.boto3_client("dynamodb")
    app = unique("none")
    assert migration_state(client, app) is MigrationState.ABSENT and not needs_migration(client, app)
    assert not migrate_legacy_table(client, app, STREAM).migrated
    assert not table_exists(client, app)


def test_a_table_of_neither_schema_is_refused(emulators: Emulators) -> None:
    client = emulators.boto3_client("dynamodb")
    app = unique("foreign")
    client.create_table(
        TableName=app,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    with pytest.raises(MigrationError, match=r"keyed by \(id\)"):
        needs_migration(client, app)


def test_the_lease_table_refuses_an_unmigrated_kcl_table(emulators: Emulators) -> None:
    client, app = kcl_app(emulators)
    with pytest.raises(LeaseTableError, match="migrate it first"):
        LeaseTable(client, app).create(stream_name=STREAM, application_name=app)


def test_operator_migrates_then_has_nothing_to_do(aws_connections: Emulators) -> None:
    client, app = kcl_app(aws_connections)

    dry = MigrateLegacyCheckpointsOperator(
        task_id="migrate", application_name=app, stream_name=STREAM, dry_run=True
    ).execute(context={})
    assert dry["dry_run"] and not dry["migrated"] and dry["shard_count"] == 4
    assert migration_state(client, app) is MigrationState.LEGACY

    operator = MigrateLegacyCheckpointsOperator(task_id="migrate", application_name=app, stream_name=STREAM)
    summary = operator.execute(context={})
    assert summary["migrated"] and summary["state_before"] == "LEGACY"
    assert summary["shard_count"] == 4
    assert summary["checkpoints"][CHILD_A] == {"sequence_number": SEQ, "sub_sequence_number": 7}
    assert summary["shard_end"] == [PARENT]
    assert summary["start_positions"][CHILD_B] == {"position": "TRIM_HORIZON", "timestamp": None}
    assert_migrated(client, app)

    again = operator.execute(context={})
    assert not again["migrated"] and again["state_before"] == "CURRENT" and again["shard_count"] == 0


def test_operator_with_no_table_is_a_no_op(aws_connections: Emulators) -> None:
    app = unique("absent")
    summary = MigrateLegacyCheckpointsOperator(task_id="migrate", application_name=app, stream_name=STREAM).execute(
        context={}
    )
    assert summary["state_before"] == "ABSENT" and not summary["migrated"]
    assert not table_exists(aws_connections.boto3_client("dynamodb"), app)


def test_operator_passes_the_initial_timestamp(aws_connections: Emulators) -> None:
    items = [{"leaseKey": {"S": "shardId-000000000000"}, "checkpoint": {"S": "AT_TIMESTAMP"}}]
    client, app = kcl_app(aws_connections, items)
    summary = MigrateLegacyCheckpointsOperator(
        task_id="migrate", application_name=app, stream_name=STREAM, initial_timestamp="2026-01-31T00:00:00"
    ).execute(context={})
    assert summary["start_positions"]["shardId-000000000000"] == {
        "position": "AT_TIMESTAMP",
        "timestamp": "2026-01-31T00:00:00+00:00",
    }
    assert LeaseTable(client, app).leases()["shardId-000000000000"].start.timestamp == datetime(2026, 1, 31, tzinfo=UTC)
