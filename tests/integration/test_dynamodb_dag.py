"""A DynamoDB connector's sync DAG end to end: dag.test() in a real Airflow, moto and fakesnow."""

from __future__ import annotations

import json
import sqlite3
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.config import DynamoDBConnectorConfig, load_any_connector_config, sync_target_to_dict
from airflow_kinesis_snowflake.core.admin.dynamodb_cleanup import BACKUP_REASON
from airflow_kinesis_snowflake.core.sources.dynamodb.discovery import TableSelection, discover
from airflow_kinesis_snowflake.core.sources.dynamodb.types import item_to_json
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.dags import CLEANUP_DAG_ID
from airflow_kinesis_snowflake.operators.dynamodb_reset import ResetDynamoDBTablesOperator
from tests.conftest import query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.emulators.statsd import statsd_receiver
from tests.integration.core.sources.dynamodb.test_discovery import create
from tests.integration.test_ingest_dag import asset_events, write_connector

pytestmark = pytest.mark.integration


def mapped_instances(env: dict[str, str], dag_id: str, task_id: str) -> list[tuple[int, str | None, str]]:
    """(map index, its label, state) of each instance of a mapped task in the DAG's latest run."""
    db = sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db")
    try:
        rows = db.execute(
            "SELECT map_index, rendered_map_index, state FROM task_instance WHERE dag_id = ? AND task_id = ? AND "
            "run_id = (SELECT run_id FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1) ORDER BY map_index",
            (dag_id, task_id, dag_id),
        ).fetchall()
    finally:
        db.close()
    return [(int(r[0]), r[1], str(r[2])) for r in rows]


def loaded(emulators: Emulators, table: str) -> dict[str, Any]:
    """The items of a Snowflake table of the packed layout, by partition key."""
    items = [json.loads(r[0], parse_float=Decimal) for r in query(emulators, f"SELECT ITEM FROM ANALYTICS.RAW.{table}")]
    return {i["pk"]: i for i in items}


def scanned(dynamodb: Any, table: str) -> dict[str, Any]:
    """A full Scan of a DynamoDB table, as the packed layout writes each item, by partition key."""
    items = dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
    return {i["pk"]["S"]: json.loads(item_to_json(i), parse_float=Decimal) for i in items}


def test_the_sync_dag_discovers_tagged_tables_and_maps_one_sync_per_table_and_a_reset_resnapshots_one(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    dynamodb = emulators.boto3_client("dynamodb")
    tag, prefix = unique("sync-to-snowflake"), unique("ddbdag")
    orders, events, keys_only = f"{prefix}-orders", f"{prefix}.events", f"{prefix}-keys"
    create(dynamodb, orders, tags={tag: ""})
    create(dynamodb, events, view_type="NEW_IMAGE", tags={tag: "yes"})
    create(dynamodb, keys_only, view_type="KEYS_ONLY", tags={tag: ""})
    for n in range(12):
        dynamodb.put_item(TableName=orders, Item={"pk": {"S": f"o{n}"}, "amount": {"N": f"{n}.25"}})
        dynamodb.put_item(TableName=events, Item={"pk": {"S": f"e{n}"}, "kind": {"SS": ["a", f"k{n}"]}})
    dynamodb.put_item(TableName=keys_only, Item={"pk": {"S": "never"}})
    with emulators.snowflake_connect() as conn:
        conn.cursor().execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
        conn.cursor().execute("CREATE SCHEMA IF NOT EXISTS ANALYTICS.RAW")
    connector = {
        "connector_id": prefix.replace("-", "_"),
        "source": {
            "type": "dynamodb",
            "region": "us-east-1",
            "application_name": f"{prefix}-app",
            "ingestion_tag_key": tag,
            "layout": "packed",
            # In the Airflow task: the Spark path of a batch is tested through spark-submit in
            # tests/integration/core/test_dynamodb_job.py, and the demo runs this DAG on Spark.
            "engine": "worker",
            "snapshot_total_segments": 2,
            "snapshot_read_units_per_second": 10000,  # on-demand tables: an absolute rate
        },
        "destination": {"database": "ANALYTICS", "schema": "RAW"},
        "batch": {"schedule": None, "retries": 0},
    }
    dag_file = write_connector(tmp_path / "dags", connector)
    dag_id = f"dynamodb_snowflake_{connector['connector_id']}_sync"
    # '.' and '-' become '_', upper-cased (destination_table_template "{table}").
    destination = {table: table.replace(".", "_").replace("-", "_").upper() for table in (orders, events)}

    # Run 1: discovery finds the two tables with new images, and each one's snapshot loads its items.
    with statsd_receiver() as statsd:
        env = {**dag_env, **statsd.airflow_env(tags=True)}
        proc = run_dag(dag_id, env, dag_file=dag_file, log_path=tmp_path / "run1.log")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    # Each committed batch reported the ingest's metrics (the same static names), tagged with the application,
    # the DynamoDB table and its Snowflake table ...
    metrics = [
        line for line in statsd.tagged("airflow.kinesis_snowflake.") if line[1]["application"] == f"{prefix}-app"
    ]
    figures: dict[str, list[tuple[float, str]]] = {}
    for name, _tags, value, kind in metrics:
        figures.setdefault(name.removeprefix("airflow.kinesis_snowflake.batch."), []).append((value, kind))
    assert set(figures) == {"records", "rows_loaded", "dead_letters", "shards"}  # DynamoDB: no bytes, no lag
    assert {(tags["source_type"], tags["source"], tags["table"]) for _, tags, _, _ in metrics} == {
        ("dynamodb", table, f"ANALYTICS.RAW.{destination[table]}") for table in (orders, events)
    }
    assert sum(value for value, kind in figures["rows_loaded"] if kind == "c") >= 24
    assert all(value == 0 for value, _ in figures["dead_letters"])
    # ... and added an event to its table's Asset, as the ingest task does.
    for table in (orders, events):
        uri = f"snowflake://fakesnow.us-west-1.aws/ANALYTICS/RAW/{destination[table]}"
        table_events = asset_events(dag_env, uri)
        assert table_events and {e["table_name"] for e in table_events} == {table}
        assert sum(e["rows_loaded"] for e in table_events) >= 12 and {e["dead_letters"] for e in table_events} == {0}
    # One task instance per table synced, in table-name order, each labelled with its table.
    one_per_table = [(0, orders, "success"), (1, events, "success")]
    assert mapped_instances(dag_env, dag_id, "sync_table") == one_per_table
    assert f"Not synced: {keys_only}: " in output and "KEYS_ONLY" in output
    for table in (orders, events):
        assert loaded(emulators, destination[table]) == scanned(dynamodb, table)
    assert len(loaded(emulators, destination[orders])) == 12

    # Run 2: an update and a delete, followed through the tables' streams.
    dynamodb.put_item(TableName=orders, Item={"pk": {"S": "o3"}, "amount": {"S": "now a string"}})
    dynamodb.delete_item(TableName=events, Key={"pk": {"S": "e5"}})
    proc = run_dag(dag_id, dag_env, dag_file=dag_file, log_path=tmp_path / "run2.log")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert mapped_instances(dag_env, dag_id, "sync_table") == one_per_table
    orders_rows, events_rows = loaded(emulators, destination[orders]), loaded(emulators, destination[events])
    assert orders_rows["o3"] == {"pk": "o3", "amount": "now a string"}
    assert "e5" not in events_rows and len(events_rows) == 11
    assert orders_rows == scanned(dynamodb, orders) and events_rows == scanned(dynamodb, events)

    # The reset DAG, after the Snowflake copy of `orders` drifted by hand: a row deleted, a value changed.
    app, reset_id = f"{prefix}-app", f"dynamodb_snowflake_{prefix.replace('-', '_')}_reset"
    drifted = destination[orders]
    query(emulators, f"DELETE FROM ANALYTICS.RAW.{drifted} WHERE ITEM:pk::VARCHAR = 'o1'")
    query(emulators, f"UPDATE ANALYTICS.RAW.{drifted} SET ITEM = PARSE_JSON('{{\"pk\": \"o2\"}}') "
          "WHERE ITEM:pk::VARCHAR = 'o2'")  # fmt: skip
    assert loaded(emulators, drifted) != scanned(dynamodb, orders)

    def generations(table: str) -> list[tuple[int, str]]:
        return sorted(
            (int(r[0]), str(r[1]))
            for r in query(
                emulators,
                "SELECT GENERATION, REASON FROM ANALYTICS.RAW.DYNAMODB_SYNC_GENERATIONS "
                f"WHERE APPLICATION_NAME = '{app}' AND TABLE_NAME = '{table}'",
            )
        )

    def followed_streams(table: str) -> set[str]:
        rows = query(
            emulators,
            "SELECT STREAM_ARN FROM ANALYTICS.RAW.DYNAMODB_SYNC_GENERATIONS "
            f"WHERE APPLICATION_NAME = '{app}' AND TABLE_NAME = '{table}'",
        )
        return {str(r[0]) for r in rows}

    before = {table: generations(table) for table in (orders, events)}
    assert [g for g, _ in before[orders]] == [0]
    # (a) A dry run (the default) says what would happen and records nothing.
    proc = run_dag(reset_id, dag_env, dag_file=dag_file, log_path=tmp_path / "reset-dry.log",
                   conf=json.dumps({"tables": [orders]}))  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert f"Dry run, nothing recorded: {orders}: generation 0 (snapshot completed" in output
    assert "-> generation 1" in output and "rows not seen by the new snapshot are removed" in output
    assert {table: generations(table) for table in (orders, events)} == before
    # (b) A wrong confirmation fails before any side effect (in the task, without a DAG run).
    targets = discover(dynamodb, None, TableSelection((orders, events)), region="us-east-1").targets
    config = load_any_connector_config(dag_file.parent / "connectors" / f"{connector['connector_id']}.yaml")
    assert isinstance(config, DynamoDBConnectorConfig)
    operator = ResetDynamoDBTablesOperator(
        task_id="reset_tables",
        targets=[sync_target_to_dict(t) for t in targets],
        sync_options=config.sync_options(),
        tables=[orders],
        preview_only=False,
        confirm="not-the-app",
        snowflake_conn_id="no_such_connection",  # never reached
    )
    with pytest.raises(AirflowException, match=f"confirm: 'not-the-app' .* confirm to '{app}'"):
        operator.execute({})
    assert {table: generations(table) for table in (orders, events)} == before
    # (c) A confirmed reset of `orders` records generation 1 for it, and only for it.
    proc = run_dag(reset_id, dag_env, dag_file=dag_file, log_path=tmp_path / "reset.log",
                   conf=json.dumps({"tables": [orders], "dry_run": False, "confirm": app}))  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    after = generations(orders)
    assert [g for g, _ in after] == [0, 1] and after[1][1].startswith(f"reset requested (reset/{reset_id}/")
    # Both generations follow the table's stream, as discovery found it.
    assert followed_streams(orders) == {dynamodb.describe_table(TableName=orders)["Table"]["LatestStreamArn"]}
    assert generations(events) == before[events]
    assert loaded(emulators, drifted) != scanned(dynamodb, orders)  # nothing truncated: still the drifted rows
    # (d) The next sync takes the new snapshot: the Snowflake table equals a full Scan again, item by item.
    dynamodb.put_item(TableName=orders, Item={"pk": {"S": "o4"}, "amount": {"N": "44"}})
    proc = run_dag(dag_id, dag_env, dag_file=dag_file, log_path=tmp_path / "run3.log")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert loaded(emulators, drifted) == scanned(dynamodb, orders)
    assert loaded(emulators, destination[events]) == scanned(dynamodb, events)

    # (e) The clean-up DAG: generation 0 of `orders` is superseded, and no batch reads its leases again.
    leases = LeaseTable(dynamodb, app)
    before_cleanup = set(leases.leases())
    superseded = {key for key in before_cleanup if key.startswith(f"{orders}/g0/")}
    assert superseded and any(key.startswith(f"{orders}/g1/") for key in before_cleanup)
    # A dry run (the default, as the daily run) lists them and deletes nothing.
    proc = run_dag(CLEANUP_DAG_ID, dag_env, dag_file=dag_file, log_path=tmp_path / "cleanup-dry.log")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    for key in sorted(superseded):
        assert f"DELETE dynamodb-source-lease {key} [superseded-generation]" in output
    assert f"keep dynamodb-source-lease {orders}/g1/segment-0-of-2 [current-generation]" in output
    assert f"keep dynamodb-source-lease {events}/g0/segment-0-of-2 [current-generation]" in output
    assert set(leases.leases()) == before_cleanup
    # Confirmed: every lease is backed up, then the superseded ones are deleted; the others stay.
    proc = run_dag(CLEANUP_DAG_ID, dag_env, dag_file=dag_file, log_path=tmp_path / "cleanup.log",
                   conf=json.dumps({"dry_run": False, "confirm": "DELETE"}))  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert set(leases.leases()) == before_cleanup - superseded
    (backup,) = (Path(dag_env["AIRFLOW_HOME"]) / "kinesis_snowflake_backups" / app).glob("*-" + BACKUP_REASON + ".json")
    assert {lease["shard_id"] for lease in json.loads(backup.read_text())["leases"]} == before_cleanup
    # (f) The syncs go on from the leases left: a change arrives, and the tables equal a Scan.
    dynamodb.put_item(TableName=orders, Item={"pk": {"S": "o5"}, "amount": {"N": "55"}})
    proc = run_dag(dag_id, dag_env, dag_file=dag_file, log_path=tmp_path / "run4.log")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert loaded(emulators, drifted) == scanned(dynamodb, orders) and "o5" in loaded(emulators, drifted)
    assert loaded(emulators, destination[events]) == scanned(dynamodb, events)
