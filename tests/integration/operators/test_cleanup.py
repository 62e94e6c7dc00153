"""CleanupOrphanedTablesOperator against moto: every rule, and what it must never touch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.compat import AirflowException, AirflowSkipException
from airflow_kinesis_snowflake.core.load.snowflake_sink import SinkObjects, support_objects_ddl
from airflow_kinesis_snowflake.core.model import Checkpoint, Destination, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.sources.shards import list_shards
from airflow_kinesis_snowflake.core.state.backups import CheckpointBackup
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.core.state.marks import mark_superseded, resolve_application, set_reset_mark
from airflow_kinesis_snowflake.core.state.metadata import KEY_ATTRIBUTE, METADATA_KEY, ResetMark
from airflow_kinesis_snowflake.core.state.migration import LegacyMigration, MigrationState
from airflow_kinesis_snowflake.operators.cleanup import CleanupOrphanedTablesOperator
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from tests.conftest import create_stream, put_json, query
from tests.emulators import Emulators

pytestmark = pytest.mark.integration

TRIM = StartPosition(InitialPosition.TRIM_HORIZON)
OLD = datetime.now(UTC) - timedelta(days=30)
# Where the connectors of these tables load; its schema holds their ledger.
DESTINATION = Destination("ANALYTICS", "RAW", "CLEANUP_EVENTS")


@dataclass
class World:
    prefix: str
    stream: str
    dynamodb: Any
    kinesis: Any
    connectors: list[dict[str, str]]
    emulators: Emulators | None = None

    def name(self, short: str) -> str:
        return f"{self.prefix}{short}"

    def exists(self, short: str) -> bool:
        return LeaseTable(self.dynamodb, self.name(short)).exists()

    def consumers(self) -> set[str]:
        arn = self.kinesis.describe_stream_summary(StreamName=self.stream)["StreamDescriptionSummary"]["StreamARN"]
        return {c["ConsumerName"] for c in self.kinesis.list_stream_consumers(StreamARN=arn)["Consumers"]}


def identify(world: World, name: str, **attributes: dict[str, str]) -> None:
    """Set attributes of a lease table's metadata item, as the ingestion records who uses the table."""
    world.dynamodb.update_item(
        TableName=name,
        Key={KEY_ATTRIBUTE: {"S": METADATA_KEY}},
        UpdateExpression="SET " + ", ".join(f"#{k} = :{k}" for k in attributes),
        ExpressionAttributeNames={f"#{k}": k for k in attributes},
        ExpressionAttributeValues={f":{k}": v for k, v in attributes.items()},
    )


def ledger_commit(
    world: World, application: str, destination: Destination = DESTINATION, *, at: datetime | None = None
) -> None:
    """A row of the exactly-once ledger, as a batch of ``application`` leaves it, committed now or ``at``."""
    assert world.emulators is not None
    updated = f"'{at.isoformat()}'::TIMESTAMP_TZ" if at else "CURRENT_TIMESTAMP()"
    query(
        world.emulators,
        f"INSERT INTO {SinkObjects.for_destination(destination).ledger} (APPLICATION_NAME, GENERATION_ID, SHARD_ID, "
        f"SEQUENCE_NUMBER, SUB_SEQUENCE_NUMBER, BATCH_ID, UPDATED_AT) VALUES ('{application}', 'g', "
        f"'shardId-000000000000', '1', 0, 'b', {updated})",
    )


def lease_table(
    world: World, short: str, *, old: bool = True, destination: str | None = None, ledger: bool = True
) -> LeaseTable:
    """A lease table with one checkpointed shard; ``old`` dates every activity 30 days back.

    Its metadata item names its connector and destination, as ingest runs record them; the ledger of
    that destination holds the commit of its checkpoint (unless ``ledger`` is false), as old as it.
    """
    name = world.name(short)
    table = LeaseTable(world.dynamodb, name)
    table.create(stream_name=world.stream, application_name=name)
    identify(
        world,
        name,
        connector_id={"S": short},
        destination={"S": destination or f"{DESTINATION.database}.{DESTINATION.schema}.{DESTINATION.table}"},
    )
    table.sync_shards(list_shards(world.kinesis, world.stream), TRIM)
    lease = table.take(next(iter(table.leases().values())), "batch", 60)
    assert lease is not None
    table.heartbeat("batch", 60)
    table.release(table.checkpoint(lease, Checkpoint("1")))
    if ledger and destination is None:
        ledger_commit(world, name, at=OLD if old else None)
    if old:
        stamp = str(OLD.timestamp())
        for item in world.dynamodb.scan(TableName=name, ConsistentRead=True)["Items"]:
            kind = item["item_type"]["S"]
            update = {
                "METADATA": ("created_at", {"S": OLD.isoformat()}),
                "SHARD": ("checkpointed_at", {"N": stamp}),
                "WORKER": ("last_heartbeat", {"N": stamp}),
            }[kind]
            world.dynamodb.update_item(
                TableName=name,
                Key={"lease_key": item["lease_key"]},
                UpdateExpression="SET #a = :v",
                ExpressionAttributeNames={"#a": update[0]},
                ExpressionAttributeValues={":v": update[1]},
            )
    return table


def kcl_table(world: World, short: str) -> str:
    name = world.name(short)
    world.dynamodb.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    world.dynamodb.put_item(
        TableName=name,
        Item={"leaseKey": {"S": "shardId-000000000000"}, "checkpoint": {"S": "7"}, "leaseCounter": {"N": "4"}},
    )
    return name


def register(world: World, short: str) -> None:
    arn = world.kinesis.describe_stream_summary(StreamName=world.stream)["StreamDescriptionSummary"]["StreamARN"]
    world.kinesis.register_stream_consumer(StreamARN=arn, ConsumerName=world.name(short))


@pytest.fixture
def world(aws_connections: Emulators) -> World:
    prefix = f"cu{uuid.uuid4().hex[:6]}-"
    stream = f"{prefix}stream"
    kinesis = create_stream(aws_connections, stream, 1)
    put_json(kinesis, stream, [{"id": 1}])
    dynamodb = aws_connections.boto3_client("dynamodb")
    for ddl in support_objects_ddl(DESTINATION):
        if ddl.kind == "ledger":
            query(aws_connections, f"CREATE DATABASE IF NOT EXISTS {DESTINATION.database}")
            query(aws_connections, f"CREATE SCHEMA IF NOT EXISTS {DESTINATION.database}.{DESTINATION.schema}")
            query(aws_connections, ddl.sql)
    world = World(prefix, stream, dynamodb, kinesis, [], aws_connections)
    world.connectors = [
        {
            "connector_id": "a",
            "application_name": world.name("a"),
            "stream_name": stream,
            "consumer_type": "SHARED_THROUGHPUT",
        },
        {
            "connector_id": "d",
            "application_name": world.name("d0"),
            "stream_name": stream,
            "consumer_type": "SHARED_THROUGHPUT",
        },
        {
            "connector_id": "e",
            "application_name": world.name("e"),
            "stream_name": stream,
            "consumer_type": "ENHANCED_FAN_OUT",
        },
    ]
    lease_table(world, "a")  # active, however old
    lease_table(world, "d0")  # configured, points to d1
    lease_table(world, "dx")  # an earlier name of d, superseded long ago
    lease_table(world, "d1", old=False)
    mark_superseded(dynamodb, world.name("d0"), by=world.name("d1"), now=OLD.timestamp())
    mark_superseded(dynamodb, world.name("dx"), by=world.name("d1"), now=OLD.timestamp())
    lease_table(world, "e", old=False)
    lease_table(world, "orphan")
    lease_table(world, "sx")  # an earlier name of the orphan's connector, long gone
    mark_superseded(dynamodb, world.name("sx"), by=world.name("orphan"), now=OLD.timestamp())
    lease_table(world, "recent", old=False)
    live = lease_table(world, "live")
    assert live.take(next(iter(live.leases().values())), "batch/now", 600) is not None
    lease_table(world, "resetting")
    now = time.time()
    set_reset_mark(dynamodb, world.name("resetting"), ResetMark("reset/x", "delete_table", now, now + 600))
    # Someone else's table, as old as the others: never this provider's to remove.
    dynamodb.create_table(
        TableName=world.name("untagged"),
        AttributeDefinitions=[{"AttributeName": "lease_key", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "lease_key", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    # A finished migration whose copy was left behind, and one stopped with only the copy left.
    done = LegacyMigration(dynamodb, kcl_table(world, "kcl-done"), stream, clock=lambda: OLD)
    done.copy()
    done.delete_original()
    done.create_table()
    done.write_leases()
    assert done.state() is MigrationState.WRITING
    copied = LegacyMigration(dynamodb, kcl_table(world, "kcl-copied"), stream, clock=lambda: OLD)
    copied.copy()
    copied.delete_original()
    assert copied.state() is MigrationState.COPIED
    for consumer in ("a", "orphan", "e", "recent", "lambda-reader"):
        register(world, consumer)
    return world


def cleanup(world: World, tmp_path: Path, **kwargs: Any) -> dict[str, Any]:
    operator = CleanupOrphanedTablesOperator(
        task_id="cleanup",
        connectors=world.connectors,
        application_name_patterns=[f"{world.prefix}*"],
        backup_dir=str(tmp_path),
        region_name="us-east-1",
        **kwargs,
    )
    result: dict[str, Any] = operator.execute(context={})
    return result


def rules(result: dict[str, Any], world: World) -> dict[tuple[str, str], str]:
    return {
        (d["kind"], d["resource"].removeprefix(world.prefix)): d["rule"]
        for d in result["candidates"] + result["kept"]
        if d["resource"].startswith(world.prefix)
    }


EXPECTED = {
    ("lease-table", "a"): "active-application",
    ("lease-table", "d0"): "configured-application",
    ("lease-table", "d1"): "active-application",
    # An earlier name of d: clean-up cannot tell it from a connector file's pointer to d1 in another folder.
    ("lease-table", "dx"): "points-to-live-table",
    ("lease-table", "sx"): "superseded-lease-table",
    ("lease-table", "e"): "active-application",
    ("lease-table", "orphan"): "orphaned-lease-table",
    ("lease-table", "recent"): "within-retention",
    ("lease-table", "live"): "live-lease",
    ("lease-table", "resetting"): "reset-in-progress",
    ("lease-table", "untagged"): "untagged",
    ("lease-table", "kcl-done"): "within-retention",  # the migrated table is new
    ("migration-table", "kcl-done_migration"): "leftover-migration-table",
    ("migration-table", "kcl-copied_migration"): "migration-in-progress",
    ("fan-out-consumer", "a"): "connector-not-enhanced-fan-out",
    ("fan-out-consumer", "orphan"): "unused-fan-out-consumer",
    ("fan-out-consumer", "e"): "consumer-in-use",
    ("fan-out-consumer", "recent"): "within-retention",
    ("fan-out-consumer", "lambda-reader"): "unknown-consumer",
}
DELETED = {
    ("lease-table", "sx"),
    ("lease-table", "orphan"),
    ("migration-table", "kcl-done_migration"),
    ("fan-out-consumer", "a"),
    ("fan-out-consumer", "orphan"),
}


def test_a_dry_run_lists_every_candidate_with_its_rule_and_deletes_nothing(world: World, tmp_path: Path) -> None:
    result = cleanup(world, tmp_path)
    assert result["dry_run"] is True
    assert rules(result, world) == EXPECTED
    assert {(d["kind"], d["resource"].removeprefix(world.prefix)) for d in result["candidates"]} == DELETED
    assert result["deleted"] == []
    assert all(world.exists(short) for short in ("sx", "orphan", "kcl-done_migration"))
    assert world.consumers() == {world.name(c) for c in ("a", "orphan", "e", "recent", "lambda-reader")}
    assert list(tmp_path.iterdir()) == []


def test_deleting_needs_confirmation_then_removes_only_the_candidates_after_a_backup(
    world: World, tmp_path: Path
) -> None:
    with pytest.raises(AirflowException, match="confirm must be 'DELETE'"):
        cleanup(world, tmp_path, preview_only=False, confirm="yes")
    assert world.exists("orphan")

    result = cleanup(world, tmp_path, preview_only="false", confirm="DELETE")
    assert {(d["kind"], d["resource"].removeprefix(world.prefix)) for d in result["deleted"]} == DELETED
    for short in ("sx", "orphan", "kcl-done_migration"):
        assert not world.exists(short)
    kept = ("a", "d0", "d1", "dx", "e", "recent", "live", "resetting", "untagged", "kcl-done", "kcl-copied_migration")
    for short in kept:
        assert world.exists(short), short
    assert world.consumers() == {world.name(c) for c in ("e", "recent", "lambda-reader")}
    # Checkpoints first: each deleted lease table's backup restores what it held.
    orphan = CheckpointBackup.from_json(Path(result["backups"][world.name("orphan")]).read_text())
    assert (orphan.application_name, orphan.reason) == (world.name("orphan"), "cleanup")
    # Whose progress it is, as the table recorded it: a restore of another connector refuses it.
    assert (orphan.connector_id, orphan.destination, orphan.stream_name) == (
        "orphan",
        "ANALYTICS.RAW.CLEANUP_EVENTS",
        world.stream,
    )
    assert orphan.checkpoints() == {"shardId-000000000000": {"sequence_number": "1", "sub_sequence_number": 0}}
    copy = json.loads(Path(result["backups"][world.name("kcl-done_migration")]).read_text())
    assert copy["migration_of"] == world.name("kcl-done")
    assert "shardId-000000000000" in {item["leaseKey"]["S"] for item in copy["items"]}
    # The next run finds nothing more to delete among these.
    again = cleanup(world, tmp_path)
    assert {d["resource"] for d in again["candidates"]} == set()


def test_a_connector_switched_to_fan_out_keeps_its_consumer(world: World, tmp_path: Path) -> None:
    world.connectors[0] = world.connectors[0] | {"consumer_type": "ENHANCED_FAN_OUT"}
    assert rules(cleanup(world, tmp_path), world)[("fan-out-consumer", "a")] == "consumer-in-use"


def test_retention_and_patterns_come_from_the_trigger_form(world: World, tmp_path: Path) -> None:
    result = cleanup(world, tmp_path, retention_days="60")
    assert rules(result, world)[("lease-table", "orphan")] == "within-retention"
    narrowed = CleanupOrphanedTablesOperator(
        task_id="cleanup",
        connectors=world.connectors,
        # As the DAG renders its Param: JSON text.
        application_name_patterns=f'["{world.prefix}orph*"]',
        region_name="us-east-1",
    ).execute(context={})
    assert rules(narrowed, world)[("lease-table", "sx")] == "out-of-scope"
    # sx, out of scope and so kept, supersedes into the orphan: what a kept table leads to stays.
    assert rules(narrowed, world)[("lease-table", "orphan")] == "reached-from-kept-table"


def test_tables_in_use_by_connectors_this_clean_up_does_not_know_are_kept(world: World, tmp_path: Path) -> None:
    """No connector of this DAG folder names these tables; the tables and the ledger say they are in use."""
    lease_table(world, "elsewhere", old=False)  # checkpointed minutes ago by another folder's connector
    lease_table(world, "pointer")  # that connector's file names this one; a reset made "elsewhere" active
    mark_superseded(world.dynamodb, world.name("pointer"), by=world.name("elsewhere"), now=OLD.timestamp())
    lease_table(world, "loaded")  # its DynamoDB checkpoint writes failed, but its batches commit
    ledger_commit(world, world.name("loaded"))
    lease_table(world, "ran")
    identify(world, world.name("ran"), last_ingest_at={"N": str(time.time() - 3600)})
    lease_table(world, "no-ledger", destination="ANALYTICS.NO_SUCH_SCHEMA.EVENTS")
    lease_table(world, "other-deployment", ledger=False)  # loads into another account's ANALYTICS.RAW
    lease_table(world, "legacy")  # created before tables recorded their destination
    world.dynamodb.update_item(
        TableName=world.name("legacy"),
        Key={KEY_ATTRIBUTE: {"S": METADATA_KEY}},
        UpdateExpression="REMOVE destination, connector_id",
    )
    lease_table(world, "lost-stream")
    identify(
        world,
        world.name("lost-stream"),
        stream_arn={"S": f"arn:aws:kinesis:us-east-1:123456789012:stream/{world.prefix}gone"},
    )

    # Asked to keep nothing beyond its last use: the stream's own retention (24 hours) still applies.
    result = cleanup(world, tmp_path, retention_days=0, preview_only=False, confirm="DELETE")
    decided = rules(result, world)
    assert {short: decided[("lease-table", short)] for short in (
        "elsewhere", "pointer", "loaded", "ran", "no-ledger", "other-deployment", "legacy", "lost-stream", "orphan",
        "sx",
    )} == {
        "elsewhere": "within-retention",
        "pointer": "points-to-live-table",
        "loaded": "recent-load",
        "ran": "recent-ingest-run",
        "no-ledger": "ledger-unreadable",
        "other-deployment": "no-ledger-commit",
        "legacy": "no-destination",
        "lost-stream": "stream-unknown",
        "orphan": "orphaned-lease-table",
        "sx": "superseded-lease-table",
    }  # fmt: skip
    for short in ("elsewhere", "pointer", "loaded", "ran", "no-ledger", "other-deployment", "legacy", "lost-stream"):
        assert world.exists(short), short
    assert not world.exists("orphan") and not world.exists("sx")
    # Each kept table says why, in the log and the result.
    details = {d["resource"].removeprefix(world.prefix): d["detail"] for d in result["kept"]}
    assert f"the retention period of stream '{world.stream}'" in details["elsewhere"]
    assert "records no destination" in details["legacy"]
    assert "NO_SUCH_SCHEMA" in details["no-ledger"]
    assert "holds checkpoints, but the ledger of ANALYTICS.RAW.CLEANUP_EVENTS" in details["other-deployment"]
    assert "ResourceNotFoundException" in details["lost-stream"]


def test_a_pointer_to_a_missing_table_goes_only_once_that_application_stopped_loading(
    world: World, tmp_path: Path
) -> None:
    """Another folder's configured table pointing at a successor this run cannot see."""
    lease_table(world, "lone")  # its successor was deleted by hand; its connector still loads through a restore
    mark_superseded(world.dynamodb, world.name("lone"), by=world.name("lone-v2"), now=OLD.timestamp())
    ledger_commit(world, world.name("lone-v2"))
    lease_table(world, "dead")  # its successor is gone and loaded last a month ago
    mark_superseded(world.dynamodb, world.name("dead"), by=world.name("dead-v2"), now=OLD.timestamp())
    ledger_commit(world, world.name("dead-v2"), at=OLD)

    result = cleanup(world, tmp_path, preview_only=False, confirm="DELETE")
    decided = rules(result, world)
    assert (decided[("lease-table", "lone")], decided[("lease-table", "dead")]) == (
        "points-to-live-table",
        "superseded-lease-table",
    )
    assert ("lease-table", "lone-v2") not in decided  # a missing table gets no decision of its own
    assert world.exists("lone") and not world.exists("dead")
    detail = next(d["detail"] for d in result["kept"] if d["resource"] == world.name("lone"))
    assert f"lease table '{world.name('lone-v2')}' it leads to does not exist" in detail


MARKED_CLEANUP = """
import sys
from airflow_kinesis_snowflake.operators.cleanup import CleanupOrphanedTablesOperator
CleanupOrphanedTablesOperator(
    task_id="cleanup", connectors=[], application_name_patterns=[sys.argv[1]], backup_dir=sys.argv[2],
    region_name="us-east-1", preview_only=False, confirm="DELETE",
).execute(context={})
"""


def test_no_batch_starts_on_a_table_clean_up_is_about_to_delete(world: World, tmp_path: Path) -> None:
    """Clean-up marks the table and then takes its leases before deciding for the last time.

    Its process is killed right there (at its first lease write), so the window between the
    final decision and DeleteTable stays open: ingestion resolving the table sees the mark and
    skips, no worker can take a lease, and nothing was deleted or lost.
    """
    assert world.emulators is not None
    table = lease_table(world, "doomed")
    before = table.leases()
    proc = subprocess.Popen(
        [sys.executable, "-c", MARKED_CLEANUP, world.name("doomed"), str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )
    # Only the lease write of this table by a clean-up: the reset mark went before it.
    world.emulators.inject_kinesis_faults(
        [
            {
                "operation": "DynamoDB.UpdateItem",
                "contains_all": [world.name("doomed"), "lease_owner = :owner", "cleanup/"],
                "action": "kill",
                "pid": proc.pid,
            }
        ]
    )
    try:
        assert proc.wait(timeout=300) < 0  # killed
    finally:
        world.emulators.inject_kinesis_faults([])
    assert world.exists("doomed")
    resolution = resolve_application(world.dynamodb, world.name("doomed"))
    assert resolution.reset is not None and resolution.reset.owner.startswith("cleanup/")
    assert resolution.reset.mode == "cleanup"
    # What the ingest task does with it: skip, reading nothing.
    ingest = SparkKinesisIngestOperator(
        task_id="ingest",
        stream_name=world.stream,
        application_name=world.name("doomed"),
        database=DESTINATION.database,
        schema=DESTINATION.schema,
        table=DESTINATION.table,
        region_name="us-east-1",
    )
    with pytest.raises(AirflowSkipException, match=f"reset of {world.name('doomed')} in progress"):
        ingest.execute(context={})
    assert table.leases() == before
    assert list(tmp_path.iterdir()) == []  # never got as far as the backup


def test_a_table_a_batch_starts_on_after_the_plan_is_given_back_with_its_pointer_and_consumer(
    world: World, tmp_path: Path
) -> None:
    """A batch wins the race for the lease clean-up takes at its final check: nothing of it goes."""
    assert world.emulators is not None
    lease_table(world, "raced")
    lease_table(world, "raced-old")  # another folder's configured table, pointing to it
    mark_superseded(world.dynamodb, world.name("raced-old"), by=world.name("raced"), now=OLD.timestamp())
    register(world, "raced")
    planned = rules(cleanup(world, tmp_path), world)
    assert (planned[("lease-table", "raced")], planned[("fan-out-consumer", "raced")]) == (
        "orphaned-lease-table",
        "unused-fan-out-consumer",
    )
    # The lease write of clean-up's final check loses, as to a batch that took the lease first.
    world.emulators.inject_kinesis_faults(
        [
            {
                "operation": "DynamoDB.UpdateItem",
                "contains_all": [world.name("raced"), "lease_owner = :owner", "cleanup/"],
                "error": "ConditionalCheckFailedException",
            }
        ]
    )
    try:
        result = cleanup(world, tmp_path, preview_only=False, confirm="DELETE")
    finally:
        world.emulators.inject_kinesis_faults([])
    deleted = {d["resource"].removeprefix(world.prefix) for d in result["deleted"]}
    assert {"raced", "raced-old"} & deleted == set()
    assert world.exists("raced") and world.exists("raced-old")
    assert world.name("raced") in world.consumers()
    # Given back: no mark left, every lease free for the next batch.
    assert resolve_application(world.dynamodb, world.name("raced-old")).reset is None
    assert all(lease.lease_owner is None or not lease.lease_owner.startswith("cleanup/") for lease in
               LeaseTable(world.dynamodb, world.name("raced")).leases().values())  # fmt: skip
