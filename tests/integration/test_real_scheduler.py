"""The connectors' DAGs under a real scheduler: runs on the schedule, a reset triggered through the REST API,
and a DynamoDB connector added beside the Kinesis one while Airflow runs.

Airflow runs as it is deployed (api-server, scheduler, dag-processor, triggerer; LocalExecutor),
with the moto and fakesnow servers beside it (see the ``real_airflow`` fixture). Everything a user
does goes through the REST API with a token from the auth endpoint: unpause, trigger with conf,
read the runs, pause.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import yaml

from airflow_kinesis_snowflake.__main__ import main
from airflow_kinesis_snowflake.core.model import InitialPosition
from airflow_kinesis_snowflake.core.state.backups import CheckpointBackup
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.core.state.metadata import read_marks
from tests.conftest import put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_stack import AirflowStack, stuck_in_executor_shutdown
from tests.integration.core.sources.dynamodb.test_discovery import create
from tests.integration.test_dynamodb_dag import loaded, scanned
from tests.integration.test_ingest_dag import checkpoints, shard_tips

pytestmark = pytest.mark.integration

# States of a task handed to the executor: it runs to its end even once its DAG is paused.
ACTIVE_STATES = ("queued", "running")


def lease_items(emulators: Emulators, table: str) -> list[dict[str, Any]]:
    """Every item of a lease table, in key order."""
    items = emulators.boto3_client("dynamodb").scan(TableName=table, ConsistentRead=True)["Items"]
    return sorted(items, key=lambda item: str(item["lease_key"]))


def add_dynamodb_connector(stack: AirflowStack, dynamodb: Any) -> tuple[str, str]:
    """Add a DynamoDB connector to the running deployment, as a user does: its connector file beside the
    Kinesis one, and its DAG file written by ``dag-file``. The table (3 items) is synced in the Airflow
    task (``engine: worker``), packed. Returns the DynamoDB table and its Snowflake table's name."""
    table = unique("sched-customers")
    create(dynamodb, table)
    for n in range(3):
        dynamodb.put_item(TableName=table, Item={"pk": {"S": f"c{n}"}, "balance": {"N": f"{n}.50"}})
    connector = {
        "connector_id": "customers",
        "source": {
            "type": "dynamodb",
            "region": "us-east-1",
            "application_name": unique("sched-ddb-app"),
            "tables": [table],
            "layout": "packed",
            "engine": "worker",
            "iam_check": "off",
            "snapshot_total_segments": 2,
            "snapshot_read_units_per_second": 1000,
        },
        "destination": {"database": "ANALYTICS", "schema": "RAW"},
        "batch": {"schedule": None, "retries": 0},
    }
    path = stack.dags_folder / "connectors" / "customers.yaml"
    path.write_text(yaml.safe_dump(connector, sort_keys=False))
    assert main(["dag-file", str(path)]) == 0
    return table, table.replace("-", "_").upper()


def test_the_schedule_ingests_every_record_once_and_the_reset_runs_when_triggered_through_the_api(
    real_airflow: AirflowStack,
    emulators: Emulators,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stack, connector = real_airflow, real_airflow.connector
    stream, app = connector["source"]["stream_name"], connector["source"]["application_name"]
    fqn = "ANALYTICS.RAW." + connector["destination"]["table"]
    provision, ingest, reset = (f"kinesis_snowflake_orders_{kind}" for kind in ("provision", "ingest", "reset"))
    kinesis, dynamodb = emulators.boto3_client("kinesis"), emulators.boto3_client("dynamodb")
    # A second connector, of the other source, added to the running deployment's DAGs folder.
    source_table, destination = add_dynamodb_connector(stack, dynamodb)
    ddb_provision, ddb_sync = "dynamodb_snowflake_customers_provision", "dynamodb_snowflake_customers_sync"

    def ids() -> Counter[int]:
        return Counter(int(row[0]) for row in query(emulators, f"SELECT ID FROM {fqn}"))

    def ingest_runs() -> list[dict[str, Any]]:
        return stack.runs(ingest)

    with stack.diagnosed():
        stack.wait_for_dags([provision, ingest, reset, ddb_provision, ddb_sync])
        # New DAGs are paused (dags_are_paused_at_creation): a run triggered now would stay queued.
        assert all(stack.api("GET", f"dags/{dag_id}")["is_paused"] for dag_id in (provision, ingest, reset))

        # Provisioning (the table the ingest loads into), triggered while paused: the run is queued,
        # and starts once the DAG is unpaused.
        provisioning = stack.trigger(provision)
        assert stack.run(provision, provisioning)["state"] == "queued"
        stack.set_paused(provision, False)
        stack.assert_succeeded(provision, provisioning)
        assert ids() == Counter()

        # The schedule (every minute) runs the ingest DAG once it is unpaused, the first run for the
        # last complete minute (see the fixture); records arrive before the first run and between
        # runs. Runs go on until every record is in the table and two runs have succeeded; then the
        # DAG is paused. A task already running ends; a run in flight whose next task had not started
        # stays running, that task unscheduled while the DAG is paused.
        put_json(kinesis, stream, [{"id": i, "name": f"n{i}"} for i in range(40)])
        stack.set_paused(ingest, False)

        # Meanwhile, the DynamoDB connector beside it, triggered through the REST API: its provisioning,
        # then a sync (the snapshot), then a sync of an update and a delete through the stream. After
        # each sync the Snowflake table equals a full Scan.
        for dag_id in (ddb_provision, ddb_sync):
            stack.set_paused(dag_id, False)
        stack.assert_succeeded(ddb_provision, stack.trigger(ddb_provision))
        stack.assert_succeeded(ddb_sync, stack.trigger(ddb_sync))
        assert len(loaded(emulators, destination)) == 3
        assert loaded(emulators, destination) == scanned(dynamodb, source_table)
        dynamodb.put_item(TableName=source_table, Item={"pk": {"S": "c1"}, "balance": {"S": "closed"}})
        dynamodb.delete_item(TableName=source_table, Key={"pk": {"S": "c2"}})
        stack.assert_succeeded(ddb_sync, stack.trigger(ddb_sync))
        assert loaded(emulators, destination) == scanned(dynamodb, source_table)
        assert set(loaded(emulators, destination)) == {"c0", "c1"}
        stack.wait(lambda: ids() == Counter(range(40)), 420, lambda: f"rows {sorted(ids())}, runs {ingest_runs()}")
        put_json(kinesis, stream, [{"id": i, "name": f"n{i}"} for i in range(40, 70)])

        def loaded_by_two_runs() -> bool:
            succeeded = [r for r in ingest_runs() if r["state"] == "success"]
            return len(succeeded) >= 2 and set(ids()) == set(range(70))

        stack.wait(loaded_by_two_runs, 420, lambda: f"rows {sorted(ids())}, runs {ingest_runs()}", 5)
        stack.set_paused(ingest, True)
        stack.wait(
            lambda: not stack.task_instances(ingest, state=list(ACTIVE_STATES)),
            300,
            lambda: f"tasks still active: {stack.task_instances(ingest, state=list(ACTIVE_STATES))}",
        )

        ended = [r for r in ingest_runs() if r["state"] not in ("queued", "running")]
        assert len(ended) >= 2
        assert {(r["run_type"], r["state"]) for r in ended} == {("scheduled", "success")}, ended
        assert ids() == Counter(range(70))  # each record exactly once
        assert checkpoints(emulators, app) == shard_tips(kinesis, stream)

        # The reset DAG, triggered through the REST API with conf, once unpaused.
        stack.set_paused(reset, False)
        leases_before, rows_before = lease_items(emulators, app), query(emulators, f"SELECT * FROM {fqn} ORDER BY ID")
        generations_sql = (
            "SELECT APPLICATION_NAME, GENERATION_ID, REASON FROM ANALYTICS.RAW.KINESIS_INGEST_GENERATIONS "
            f"WHERE CONFIGURED_APPLICATION_NAME = '{app}'"
        )
        generations_before = query(emulators, generations_sql)
        generation = read_marks(dynamodb, app).generation_id  # type: ignore[union-attr]
        conf: dict[str, Any] = {"mode": "delete_table", "initial_position": "TRIM_HORIZON"}

        # A conf the reset's form refuses is refused by the API, and no run is created.
        refused = stack.request("POST", f"dags/{reset}/dagRuns", {"logical_date": None, "conf": {"mode": "wipe"}})
        assert refused.status_code == 400 and "wipe" in refused.text, refused.text
        assert stack.runs(reset) == []

        # A dry run (the default) reports the plan and changes nothing: not DynamoDB, not Snowflake.
        dry_run = stack.trigger(reset, conf)
        stack.assert_succeeded(reset, dry_run)
        assert "records already loaded will be read and loaded again" in stack.task_logs(reset, dry_run)
        assert lease_items(emulators, app) == leases_before
        assert query(emulators, f"SELECT * FROM {fqn} ORDER BY ID") == rows_before
        assert sorted(query(emulators, generations_sql)) == sorted(generations_before)

        # For real: the lease table is deleted and created again with a new generation, every shard
        # at TRIM_HORIZON without a checkpoint; the checkpoints it held are in the backup.
        stack.assert_succeeded(reset, stack.trigger(reset, {**conf, "dry_run": False, "confirm": app}))
        new_generation = read_marks(dynamodb, app).generation_id  # type: ignore[union-attr]
        assert new_generation not in (None, generation)
        leases = LeaseTable(dynamodb, app).leases()
        assert set(leases) == set(shard_tips(kinesis, stream))
        assert {(lease.start.position, lease.checkpoint) for lease in leases.values()} == {
            (InitialPosition.TRIM_HORIZON, None)
        }
        (backup,) = (stack.home / "kinesis_snowflake_backups" / app).glob("*-reset-delete_table.json")
        saved = CheckpointBackup.from_json(backup.read_text()).checkpoints()
        assert {shard: c["sequence_number"] for shard, c in saved.items() if c} == shard_tips(kinesis, stream)
        # Snowflake: the table as it was; the new generation recorded next to the ledger.
        assert query(emulators, f"SELECT * FROM {fqn} ORDER BY ID") == rows_before
        generations = set(query(emulators, generations_sql))
        assert generations >= set(generations_before)
        assert new_generation in {row[1] for row in generations - set(generations_before)}

    # `status` on the deployment's DAGs folder, which holds connectors of both sources: each is read.
    for name, value in emulators.airflow_env().items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()  # what came before: dag-file's report
    assert main(["status", str(stack.dags_folder), "--json"]) == 0
    statuses = {s["connector_id"]: s for s in json.loads(capsys.readouterr().out)}
    assert statuses["orders"]["error"] is None and statuses["customers"]["error"] is None
    (synced,) = statuses["customers"]["tables"]
    assert (synced["table"], synced["snapshot"]["completed"], synced["snapshot"]["items"]) == (source_table, True, 3)

    # Shut down: SIGTERM is enough for whatever the tasks started, and nothing the stack started is
    # left once its grace period is over. Airflow's scheduler may outlive it, waiting in
    # LocalExecutor.end() for an idle worker (see stuck_in_executor_shutdown); stop() prints where.
    not_ended = stack.stop()
    assert [p for p in not_ended if not stuck_in_executor_shutdown(p)] == [], not_ended
    assert stack.leftovers() == []
    assert all(p.process.returncode is not None for p in stack.processes)
