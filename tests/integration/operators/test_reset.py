"""ResetConnectorStateOperator and RestoreCheckpointsOperator against moto, called directly."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.compat import AirflowException, AirflowSkipException, TaskDeferred
from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.sources.shards import list_shards
from airflow_kinesis_snowflake.core.state.backups import CheckpointBackup, snapshot
from airflow_kinesis_snowflake.core.state.dynamodb import delete_table, table_tags
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.core.state.marks import mark_superseded, resolve_application, set_reset_mark
from airflow_kinesis_snowflake.core.state.metadata import (
    APPLICATION_TAG,
    CREATED_BY,
    CREATED_BY_TAG,
    KEY_ATTRIBUTE,
    METADATA_KEY,
    ResetMark,
    TableIdentity,
    read_marks,
)
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from airflow_kinesis_snowflake.operators.reset import ResetConnectorStateOperator
from airflow_kinesis_snowflake.operators.restore import RestoreCheckpointsOperator
from airflow_kinesis_snowflake.triggers.lease_table import LeasesReleasedTrigger
from tests.conftest import create_stream, create_table, unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration

TRIM = StartPosition(InitialPosition.TRIM_HORIZON)
# Where reset and restore record the generation they create or bring back (the generations table).
DESTINATION: dict[str, Any] = {"database": "ANALYTICS", "schema": "RAW", "table": "ORDERS"}
DELIVERED = 3  # records per shard the simulated batches delivered


@dataclass
class Connector:
    emulators: Emulators
    stream: str
    app: str
    kinesis: Any
    dynamodb: Any

    def table(self, name: str | None = None) -> LeaseTable:
        return LeaseTable(self.dynamodb, name or self.app)

    def checkpoints(self, name: str | None = None) -> dict[str, str | None]:
        return {k: v.checkpoint.sequence_number if v.checkpoint else None for k, v in self.table(name).leases().items()}

    def advance(self, name: str, records: int) -> None:
        """What ingest batches leave behind: each shard checkpointed at its ``records``-th record."""
        table = self.table(name)
        for shard_id, lease in table.leases().items():
            it = self.kinesis.get_shard_iterator(
                StreamName=self.stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            sequences = [r["SequenceNumber"] for r in self.kinesis.get_records(ShardIterator=it)["Records"]]
            taken = table.take(lease, "batch/test", 60)
            assert taken is not None
            table.release(table.checkpoint(taken, Checkpoint(sequences[records - 1])))

    def items(self, name: str | None = None) -> list[dict[str, Any]]:
        items = self.dynamodb.scan(TableName=name or self.app, ConsistentRead=True)["Items"]
        return sorted(items, key=lambda i: i["lease_key"]["S"])


@pytest.fixture
def connector(aws_connections: Emulators) -> Connector:
    """A stream with 2 shards, 8 records in each, and a lease table checkpointed 3 records in."""
    stream, app = unique("reset"), unique("reset-app")
    kinesis = create_stream(aws_connections, stream, 2)
    shard_ids = [s["ShardId"] for s in kinesis.list_shards(StreamName=stream)["Shards"]]
    for shard_id in shard_ids:
        # ExplicitHashKey puts records on a known shard.
        start = kinesis.list_shards(StreamName=stream)["Shards"][shard_ids.index(shard_id)]["HashKeyRange"]
        for i in range(8):
            kinesis.put_record(
                StreamName=stream,
                Data=json.dumps({"id": i}).encode(),
                PartitionKey="k",
                ExplicitHashKey=start["StartingHashKey"],
            )
    conn = aws_connections.snowflake_connect()
    try:
        conn.cursor().execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
        conn.cursor().execute("CREATE SCHEMA IF NOT EXISTS ANALYTICS.RAW")
    finally:
        conn.close()
    dynamodb = aws_connections.boto3_client("dynamodb")
    made = Connector(aws_connections, stream, app, kinesis, dynamodb)
    made.table().create(stream_name=stream, application_name=app)
    made.table().sync_shards(list_shards(kinesis, stream), TRIM)
    made.advance(app, DELIVERED)
    return made


def reset(connector: Connector, backups: Path | str, **kwargs: Any) -> dict[str, Any]:
    operator = ResetConnectorStateOperator(
        task_id="reset",
        connector_id="orders",
        application_name=connector.app,
        stream_name=connector.stream,
        region_name="us-east-1",
        backup_dir=str(backups),
        **DESTINATION,
        **kwargs,
    )
    result: dict[str, Any] = operator.execute(context={})
    return result


def restore(connector: Connector, backups: Path | str, backup: str, **kwargs: Any) -> dict[str, Any]:
    operator = RestoreCheckpointsOperator(
        task_id="restore",
        connector_id="orders",
        application_name=connector.app,
        stream_name=connector.stream,
        region_name="us-east-1",
        backup=backup,
        backup_dir=str(backups),
        **DESTINATION,
        **kwargs,
    )
    result: dict[str, Any] = operator.execute(context={})
    return result


def no_marks(connector: Connector, *names: str) -> bool:
    return all((m := read_marks(connector.dynamodb, n)) is None or m.reset is None for n in names)


def test_a_dry_run_reports_per_shard_and_changes_nothing(connector: Connector, tmp_path: Path) -> None:
    before = connector.items()
    result = reset(connector, tmp_path, new_application_name=connector.app + "-v2")
    assert result["dry_run"] is True
    assert result["application_name"] == connector.app
    assert result["backup_location"] is None
    assert result["backup"]["generation_id"] == read_marks(connector.dynamodb, connector.app).generation_id  # type: ignore[union-attr]
    assert {s["shard_id"]: s["read_again"] for s in result["shards"]} == {
        shard_id: {"records": DELIVERED, "at_least": False} for shard_id in connector.checkpoints()
    }
    assert result["estimate"]["read_again"] == 2 * DELIVERED
    assert connector.items() == before
    assert not connector.table(connector.app + "-v2").exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "truncate"}, "mode must be one of new_application_name, delete_table"),
        ({"mode": "new_application_name"}, "needs new_application_name"),
        ({"new_application_name": "ab"}, "3-245 characters"),
        ({"new_application_name": "has space"}, "valid DynamoDB table name"),
        ({"mode": "delete_table", "new_application_name": "x-app"}, "only used with mode new_application_name"),
        ({"new_application_name": "x-app", "initial_position": "EARLIEST"}, "TRIM_HORIZON, LATEST, AT_TIMESTAMP"),
        ({"new_application_name": "x-app", "initial_position": "AT_TIMESTAMP"}, "needs initial_timestamp"),
        (
            {"new_application_name": "x-app", "initial_position": "AT_TIMESTAMP", "initial_timestamp": "soon"},
            "not an ISO 8601 time",
        ),
        ({"new_application_name": "x-app", "initial_timestamp": "2026-01-01T00:00:00Z"}, "only used with"),
        ({"new_application_name": "x-app", "preview_only": "maybe"}, "preview_only must be true or false"),
    ],
)
def test_bad_parameters_are_refused_before_anything_happens(
    connector: Connector, tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    before = connector.items()
    with pytest.raises(AirflowException, match=message):
        reset(connector, tmp_path, **({"preview_only": False, "confirm": connector.app} | kwargs))
    assert connector.items() == before


def test_acting_needs_the_current_application_name(connector: Connector, tmp_path: Path) -> None:
    before = connector.items()
    with pytest.raises(AirflowException, match=rf"confirm must be the current application name '{connector.app}'"):
        reset(connector, tmp_path, mode="delete_table", preview_only="False", confirm="yes")
    assert connector.items() == before
    other = unique("taken")
    LeaseTable(connector.dynamodb, other).create(stream_name=connector.stream, application_name=other)
    with pytest.raises(AirflowException, match="already names a lease table"):
        reset(connector, tmp_path, new_application_name=other, preview_only=False, confirm=connector.app)
    assert connector.items() == before


def test_new_application_name_switches_ingestion_and_keeps_the_old_table(connector: Connector, tmp_path: Path) -> None:
    old_checkpoints = connector.checkpoints()
    old_generation = read_marks(connector.dynamodb, connector.app).generation_id  # type: ignore[union-attr]
    new = connector.app + "-v2"
    result = reset(
        connector,
        tmp_path,
        new_application_name=new,
        initial_position="LATEST",
        preview_only="False",
        confirm=connector.app,
    )
    # The new table: tagged, every shard free at the reset time (LATEST), nothing read yet.
    new_table = connector.table(new)
    description = new_table.describe()
    assert description is not None
    assert {CREATED_BY_TAG: CREATED_BY, APPLICATION_TAG: new}.items() <= table_tags(
        connector.dynamodb, description["TableArn"]
    ).items()
    leases = new_table.leases()
    assert set(leases) == set(old_checkpoints)
    assert {(lease.start.position, lease.checkpoint, lease.lease_owner) for lease in leases.values()} == {
        (InitialPosition.AT_TIMESTAMP, None, None)
    }
    assert result["new_generation_id"] == new_table.metadata().generation_id != old_generation  # type: ignore[union-attr]
    # The old table: same checkpoints, leases given back, marked as superseded; no marks left.
    assert connector.checkpoints() == old_checkpoints
    assert {lease.lease_owner for lease in connector.table().leases().values()} == {None}
    old_marks = read_marks(connector.dynamodb, connector.app)
    assert old_marks is not None and old_marks.superseded_by == new and old_marks.superseded_at
    resolution = resolve_application(connector.dynamodb, connector.app)
    assert (resolution.active, resolution.reset) == (new, None)
    assert no_marks(connector, connector.app, new)
    # The backup is the task's result, and the file holds the same document.
    location = result["backup_location"]
    assert location.startswith(str(tmp_path / connector.app))
    assert json.loads(Path(location).read_text()) == result["backup"]
    backup = CheckpointBackup.from_dict(result["backup"])
    assert (backup.generation_id, backup.connector_id) == (old_generation, "orders")
    assert {k: v["sequence_number"] for k, v in backup.checkpoints().items() if v} == old_checkpoints
    # LATEST skips what was not loaded yet: 8 records per shard, 3 delivered.
    assert result["estimate"] == {
        "read_again": 0,
        "read_again_at_least": False,
        "skipped": 10,
        "skipped_at_least": False,
    }

    # A second reset starts from the active name and repoints the configured table straight at the new one.
    newer = connector.app + "-v3"
    reset(connector, tmp_path, new_application_name=newer, preview_only=True)
    with pytest.raises(AirflowException, match=f"current application name '{new}'"):
        reset(connector, tmp_path, new_application_name=newer, preview_only=False, confirm=connector.app)
    reset(connector, tmp_path, new_application_name=newer, preview_only=False, confirm=new)
    assert read_marks(connector.dynamodb, connector.app).superseded_by == newer  # type: ignore[union-attr]
    assert read_marks(connector.dynamodb, new).superseded_by == newer  # type: ignore[union-attr]
    assert resolve_application(connector.dynamodb, connector.app).chain == (connector.app, newer)


def test_delete_table_recreates_it_empty_with_a_new_generation(connector: Connector, tmp_path: Path) -> None:
    old_generation = read_marks(connector.dynamodb, connector.app).generation_id  # type: ignore[union-attr]
    old_checkpoints = connector.checkpoints()
    result = reset(connector, tmp_path, mode="delete_table", preview_only=False, confirm=connector.app)
    marks = read_marks(connector.dynamodb, connector.app)
    assert marks is not None and marks.generation_id == result["new_generation_id"] != old_generation
    assert marks.reset is None and marks.superseded_by is None
    leases = connector.table().leases()
    assert set(leases) == set(old_checkpoints)
    assert {(lease.start, lease.checkpoint, lease.lease_owner) for lease in leases.values()} == {(TRIM, None, None)}
    description = connector.table().describe()
    assert description is not None
    assert table_tags(connector.dynamodb, description["TableArn"])[CREATED_BY_TAG] == CREATED_BY
    backup = json.loads(Path(result["backup_location"]).read_text())
    assert backup["generation_id"] == old_generation
    assert {lease["shard_id"]: lease["checkpoint"]["sequence_number"] for lease in backup["leases"]} == old_checkpoints
    assert result["estimate"]["read_again"] == 2 * DELIVERED


def test_a_running_batch_is_waited_for_and_a_stuck_one_stops_the_reset(connector: Connector, tmp_path: Path) -> None:
    table = connector.table()
    first, second = sorted(table.leases())
    assert table.take(table.leases()[first], "batch/quick", 1.0) is not None
    # Expires within the wait: the reset goes ahead.
    reset(
        connector,
        tmp_path,
        mode="delete_table",
        preview_only=False,
        confirm=connector.app,
        lease_wait_timeout_seconds=20,
    )
    assert {lease.lease_owner for lease in table.leases().values()} == {None}

    assert table.take(table.leases()[second], "batch/stuck", 600) is not None
    before = connector.items()
    with pytest.raises(AirflowException, match=f"{second} by batch/stuck"):
        reset(
            connector,
            tmp_path,
            mode="delete_table",
            preview_only=False,
            confirm=connector.app,
            lease_wait_timeout_seconds=1,
        )
    # Nothing deleted, the batch keeps its lease, and the mark is gone so ingestion goes on.
    assert table.leases()[second].lease_owner == "batch/stuck"
    assert table.metadata().generation_id == read_marks(connector.dynamodb, connector.app).generation_id  # type: ignore[union-attr]
    assert [i["lease_key"]["S"] for i in connector.items()] == [i["lease_key"]["S"] for i in before]
    assert no_marks(connector, connector.app)


def test_deferrable_waits_in_the_triggerer_for_running_batches_then_resets(
    connector: Connector, tmp_path: Path
) -> None:
    table = connector.table()
    first = sorted(table.leases())[0]
    running = table.take(table.leases()[first], "batch/running", 600)
    assert running is not None
    before = connector.items()
    operator = ResetConnectorStateOperator(
        task_id="reset",
        connector_id="orders",
        application_name=connector.app,
        stream_name=connector.stream,
        region_name="us-east-1",
        backup_dir=str(tmp_path),
        mode="delete_table",
        preview_only=False,
        confirm=connector.app,
        lease_wait_timeout_seconds=30,
        deferrable=True,
        waiter_delay=0.5,
        **DESTINATION,
    )
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(context={})
    trigger = deferred.value.trigger
    assert isinstance(trigger, LeasesReleasedTrigger)
    assert (trigger.table_name, trigger.timeout, deferred.value.method_name) == (connector.app, 30, "execute_complete")
    assert connector.items() == before  # nothing marked or changed while the batch runs
    # The trigger's timeout event fails the task with its message; nothing changed.
    timeout = {"status": "timeout", "table_name": connector.app, "holders": [[first, "batch/running"]], "message": "m"}
    with pytest.raises(AirflowException, match=r"^m$"):
        operator.execute_complete({}, timeout)
    assert connector.items() == before
    # Once the batch released its lease, the trigger's success event resets.
    table.release(running)
    result = operator.execute_complete({}, {"status": "success", "table_name": connector.app})
    assert result["mode"] == "delete_table"
    metadata = table.metadata()
    assert metadata is not None and metadata.generation_id != before_generation(before)
    # With no lease held, a deferrable reset does not defer: it resets at once.
    again = reset(connector, tmp_path, mode="delete_table", preview_only=False, confirm=connector.app, deferrable=True)
    assert again["mode"] == "delete_table" and again["dry_run"] is False


def before_generation(items: list[dict[str, Any]]) -> str:
    (metadata,) = [i for i in items if i["lease_key"]["S"] == METADATA_KEY]
    return str(metadata["generation_id"]["S"])


def test_ingest_skips_while_a_reset_mark_is_live(connector: Connector, tmp_path: Path) -> None:
    now = time.time()
    set_reset_mark(connector.dynamodb, connector.app, ResetMark("reset/elsewhere", "delete_table", now, now + 600))
    ingest = SparkKinesisIngestOperator(
        task_id="ingest",
        stream_name=connector.stream,
        application_name=connector.app,
        database="ANALYTICS",
        schema="RAW",
        table="NOWHERE",
        region_name="us-east-1",
    )
    with pytest.raises(AirflowSkipException, match=f"reset of {connector.app} in progress"):
        ingest.execute(context={})
    # A reset cannot start while another one's mark is live either.
    with pytest.raises(AirflowException, match="already working on"):
        reset(connector, tmp_path, mode="delete_table", preview_only=False, confirm=connector.app)


def test_ingest_names_a_broken_pointer_that_snowflake_cannot_repair(connector: Connector, tmp_path: Path) -> None:
    # A pointer written by hand to a table that does not exist, and nothing recorded in Snowflake:
    # there is no generation to rebuild (a reset's pointer is recorded, and rebuilt: tests/integration/
    # test_lost_lease_table.py).
    ghost = connector.app + "-ghost"
    mark_superseded(connector.dynamodb, connector.app, by=ghost)
    table = unique("NOWHERE").replace("-", "_").upper()
    create_table(connector.emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    ingest = SparkKinesisIngestOperator(
        task_id="ingest",
        stream_name=connector.stream,
        application_name=connector.app,
        database="ANALYTICS",
        schema="RAW",
        table=table,
        region_name="us-east-1",
    )
    with pytest.raises(AirflowException, match=f"superseded by '{ghost}', which does not exist"):
        ingest.execute(context={})


def test_restore_undoes_a_new_application_name(connector: Connector, tmp_path: Path) -> None:
    original = connector.checkpoints()
    generation = read_marks(connector.dynamodb, connector.app).generation_id  # type: ignore[union-attr]
    new = connector.app + "-v2"
    done = reset(connector, tmp_path, new_application_name=new, preview_only=False, confirm=connector.app)
    connector.advance(new, 6)
    progressed = connector.checkpoints(new)

    dry = restore(connector, tmp_path, done["backup_location"])
    assert dry["dry_run"] is True and dry["application_name"] == new
    assert resolve_application(connector.dynamodb, connector.app).active == new
    with pytest.raises(AirflowException, match=f"confirm must be the current application name '{new}'"):
        restore(connector, tmp_path, done["backup_location"], preview_only=False, confirm=connector.app)

    result = restore(connector, tmp_path, done["backup_location"], preview_only=False, confirm=new)
    assert resolve_application(connector.dynamodb, connector.app).active == connector.app
    assert connector.checkpoints() == original
    marks = read_marks(connector.dynamodb, connector.app)
    assert marks is not None and (marks.generation_id, marks.superseded_by) == (generation, None)
    assert read_marks(connector.dynamodb, new).superseded_by == connector.app  # type: ignore[union-attr]
    assert connector.checkpoints(new) == progressed  # the table undone is left as it was
    assert no_marks(connector, connector.app, new)
    # What was replaced is backed up too: restoring that backup undoes the undo.
    before = CheckpointBackup.from_json(Path(result["backup_location"]).read_text())
    assert (before.application_name, before.reason) == (new, "before-restore")
    restore(connector, tmp_path, result["backup_location"], preview_only=False, confirm=connector.app)
    assert resolve_application(connector.dynamodb, connector.app).active == new
    assert connector.checkpoints(new) == progressed


def test_restore_undoes_a_delete_table_and_brings_back_the_generation(connector: Connector, tmp_path: Path) -> None:
    original = connector.checkpoints()
    generation = read_marks(connector.dynamodb, connector.app).generation_id  # type: ignore[union-attr]
    done = reset(connector, tmp_path, mode="delete_table", preview_only=False, confirm=connector.app)
    connector.advance(connector.app, 1)
    restore(connector, tmp_path, done["backup_location"], preview_only=False, confirm=connector.app)
    assert connector.checkpoints() == original
    assert read_marks(connector.dynamodb, connector.app).generation_id == generation  # type: ignore[union-attr]


def test_restore_recreates_a_table_that_clean_up_removed(connector: Connector, tmp_path: Path) -> None:
    v2, v3 = connector.app + "-v2", connector.app + "-v3"
    reset(connector, tmp_path, new_application_name=v2, preview_only=False, confirm=connector.app)
    connector.advance(v2, 5)
    at_v2 = connector.checkpoints(v2)
    generation = read_marks(connector.dynamodb, v2).generation_id  # type: ignore[union-attr]
    done = reset(connector, tmp_path, new_application_name=v3, preview_only=False, confirm=v2)
    delete_table(connector.dynamodb, v2)  # as clean-up does once v2 is past its retention

    restore(connector, tmp_path, done["backup_location"], preview_only=False, confirm=v3)
    assert resolve_application(connector.dynamodb, connector.app).chain == (connector.app, v2)
    assert connector.checkpoints(v2) == at_v2
    assert read_marks(connector.dynamodb, v2).generation_id == generation  # type: ignore[union-attr]
    assert read_marks(connector.dynamodb, v3).superseded_by == v2  # type: ignore[union-attr]
    description = connector.table(v2).describe()
    assert description is not None
    assert table_tags(connector.dynamodb, description["TableArn"])[CREATED_BY_TAG] == CREATED_BY
    assert no_marks(connector, connector.app, v2, v3)


def test_restore_refuses_a_backup_of_another_stream_or_connector(connector: Connector, tmp_path: Path) -> None:
    done = reset(connector, tmp_path, mode="delete_table", preview_only=False, confirm=connector.app)
    document = json.loads(Path(done["backup_location"]).read_text())
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(document | {"stream_name": "clicks"}))
    with pytest.raises(AirflowException, match="stream 'clicks' in the backup"):
        restore(connector, tmp_path, str(elsewhere))
    elsewhere.write_text(json.dumps(document | {"connector_id": "payments"}))
    with pytest.raises(AirflowException, match="connector 'payments' in the backup, 'orders' for the connector"):
        restore(connector, tmp_path, str(elsewhere))
    elsewhere.write_text("{}")
    with pytest.raises(AirflowException, match="not a checkpoint backup"):
        restore(connector, tmp_path, str(elsewhere))
    with pytest.raises(AirflowException, match="cannot read the backup"):
        restore(connector, tmp_path, str(tmp_path / "missing.json"))


def test_restore_refuses_a_backup_of_a_stream_deleted_and_created_again(connector: Connector, tmp_path: Path) -> None:
    done = reset(connector, tmp_path, mode="delete_table", preview_only=False, confirm=connector.app)
    document = json.loads(Path(done["backup_location"]).read_text())
    summary = connector.kinesis.describe_stream_summary(StreamName=connector.stream)["StreamDescriptionSummary"]
    # Same name, same ARN (Kinesis reuses it), created a year before the stream there is now.
    earlier = summary["StreamCreationTimestamp"].replace(year=summary["StreamCreationTimestamp"].year - 1)
    before = tmp_path / "before-recreate.json"
    before.write_text(
        json.dumps(document | {"stream_arn": summary["StreamARN"], "stream_created_at": earlier.isoformat()})
    )
    items = connector.items()
    for dry_run in (True, False):
        with pytest.raises(AirflowException, match="the stream was deleted and created again since"):
            restore(connector, tmp_path, str(before), preview_only=dry_run, confirm=connector.app)
    assert connector.items() == items
    # The backup of the stream there is now is restored.
    same = tmp_path / "same-stream.json"
    created = summary["StreamCreationTimestamp"].isoformat()
    same.write_text(json.dumps(document | {"stream_arn": summary["StreamARN"], "stream_created_at": created}))
    restore(connector, tmp_path, str(same), preview_only=False, confirm=connector.app)


def test_restore_refuses_another_connectors_backup_before_any_write(connector: Connector, tmp_path: Path) -> None:
    # Connector "clicks" reads the same stream through its own lease table, from another DAG folder.
    clicks = unique("clicks-app")
    table = connector.table(clicks)
    table.create(stream_name=connector.stream, application_name=clicks)
    table.sync_shards(list_shards(connector.kinesis, connector.stream), TRIM)
    connector.advance(clicks, 6)
    # Its clean-up backup, from before backups recorded their owner (the table did not record it either).
    legacy = tmp_path / "clicks-legacy.json"
    document = snapshot(table, reason="cleanup").to_dict() | {"version": 1}
    legacy.write_text(json.dumps({k: v for k, v in document.items() if k not in ("destination", "stream_arn")}))
    theirs, mine = connector.items(clicks), connector.items()
    for dry_run in (True, False):
        with pytest.raises(AirflowException) as refused:
            restore(connector, tmp_path, str(legacy), preview_only=dry_run, confirm=connector.app)
        message = str(refused.value)
        assert f"'{clicks}' is not one of connector orders's lease tables ({connector.app})" in message
        assert "does not record its connector (version 1" in message
    assert (connector.items(clicks), connector.items()) == (theirs, mine)
    assert resolve_application(connector.dynamodb, connector.app).active == connector.app

    # Once its table records its owner, every backup of it says so, and the refusal names both sides.
    connector.dynamodb.update_item(
        TableName=clicks,
        Key={KEY_ATTRIBUTE: {"S": METADATA_KEY}},
        UpdateExpression="SET connector_id = :c, destination = :d",
        ExpressionAttributeValues={":c": {"S": "clicks"}, ":d": {"S": "ANALYTICS.RAW.CLICKS"}},
    )
    theirs = connector.items(clicks)
    recorded = tmp_path / "clicks.json"
    recorded.write_text(snapshot(table, reason="cleanup").to_json())
    with pytest.raises(AirflowException) as refused:
        restore(
            connector,
            tmp_path,
            str(recorded),
            destination="ANALYTICS.RAW.ORDERS",
            preview_only=False,
            confirm=connector.app,
        )
    message = str(refused.value)
    assert "connector 'clicks' in the backup, 'orders' for the connector" in message
    assert "destination ANALYTICS.RAW.CLICKS in the backup, ANALYTICS.RAW.ORDERS for the connector" in message
    assert (connector.items(clicks), connector.items()) == (theirs, mine)


def test_a_backup_naming_this_connector_does_not_take_over_another_table(connector: Connector, tmp_path: Path) -> None:
    # Another connector's table, which does not record its connector; a backup of it that says "orders".
    clicks = unique("clicks-app")
    table = connector.table(clicks)
    table.create(stream_name=connector.stream, application_name=clicks)
    table.sync_shards(list_shards(connector.kinesis, connector.stream), TRIM)
    connector.advance(clicks, 6)
    claimed = tmp_path / "claimed.json"
    claimed.write_text(json.dumps(snapshot(table, reason="cleanup").to_dict() | {"connector_id": "orders"}))
    theirs, mine = connector.items(clicks), connector.items()
    with pytest.raises(AirflowException, match="restoring would take it over"):
        restore(connector, tmp_path, str(claimed), preview_only=False, confirm=connector.app)
    assert (connector.items(clicks), connector.items()) == (theirs, mine)


def test_an_old_backup_of_the_connectors_own_table_is_still_restored(connector: Connector, tmp_path: Path) -> None:
    original = connector.checkpoints()
    done = reset(connector, tmp_path, mode="delete_table", preview_only=False, confirm=connector.app)
    document = json.loads(Path(done["backup_location"]).read_text()) | {"version": 1, "connector_id": None}
    old = tmp_path / "old.json"
    old.write_text(json.dumps({k: v for k, v in document.items() if k not in ("destination", "stream_arn")}))
    restore(
        connector, tmp_path, str(old), destination="ANALYTICS.RAW.ORDERS", preview_only=False, confirm=connector.app
    )
    assert connector.checkpoints() == original


def test_backups_go_to_any_object_storage_url(connector: Connector) -> None:
    url = f"memory://backups/{unique('run')}"
    done = reset(connector, url, mode="delete_table", preview_only=False, confirm=connector.app)
    assert done["backup_location"].startswith(url + "/" + connector.app + "/")
    restore(connector, url, done["backup_location"], preview_only=False, confirm=connector.app)
    assert read_marks(connector.dynamodb, connector.app).generation_id == done["generation_id"]  # type: ignore[union-attr]


def test_enhanced_fan_out_registers_the_new_names_consumer(connector: Connector, tmp_path: Path) -> None:
    new = connector.app + "-efo"
    reset(
        connector,
        tmp_path,
        new_application_name=new,
        consumer_type="ENHANCED_FAN_OUT",
        preview_only=False,
        confirm=connector.app,
    )
    arn = connector.kinesis.describe_stream_summary(StreamName=connector.stream)["StreamDescriptionSummary"][
        "StreamARN"
    ]
    consumers = connector.kinesis.list_stream_consumers(StreamARN=arn)["Consumers"]
    assert [(c["ConsumerName"], c["ConsumerStatus"]) for c in consumers] == [(new, "ACTIVE")]


def test_acting_needs_the_destination_where_the_reset_is_recorded(connector: Connector, tmp_path: Path) -> None:
    before = connector.items()
    operator = ResetConnectorStateOperator(
        task_id="reset",
        connector_id="orders",
        application_name=connector.app,
        stream_name=connector.stream,
        region_name="us-east-1",
        backup_dir=str(tmp_path),
        mode="delete_table",
        preview_only=False,
        confirm=connector.app,
    )
    with pytest.raises(AirflowException, match="database, schema and table are needed"):
        operator.execute(context={})
    assert connector.items() == before
    assert no_marks(connector, connector.app)


# -- another connector's table ------------------------------------------------------------------------


def test_a_reset_of_another_connectors_table_is_refused_before_anything_is_marked(
    connector: Connector, tmp_path: Path
) -> None:
    # The application name's progress belongs to a connector loading another table.
    connector.table().record_identity(TableIdentity("refunds", "ANALYTICS.RAW.REFUNDS"))
    before = connector.items()
    with pytest.raises(AirflowException, match=r"'refunds', which loads ANALYTICS.RAW.REFUNDS"):
        reset(connector, tmp_path, mode="delete_table", preview_only=False, confirm=connector.app)
    assert connector.items() == before
    assert connector.table().exists()
