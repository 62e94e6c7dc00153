"""The connector's DAGs under a real scheduler: runs on the schedule, and a reset triggered through the REST API.

Airflow runs as it is deployed (api-server, scheduler, dag-processor, triggerer; LocalExecutor),
with the moto and fakesnow servers beside it (see the ``real_airflow`` fixture). Everything a user
does goes through the REST API with a token from the auth endpoint: unpause, trigger with conf,
read the runs, pause.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.model import InitialPosition
from airflow_kinesis_snowflake.core.state.backups import CheckpointBackup
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.core.state.metadata import read_marks
from tests.conftest import put_json, query
from tests.emulators import Emulators
from tests.emulators.airflow_stack import AirflowStack, stuck_in_executor_shutdown
from tests.integration.test_ingest_dag import checkpoints, shard_tips

pytestmark = pytest.mark.integration

# States of a task handed to the executor: it runs to its end even once its DAG is paused.
ACTIVE_STATES = ("queued", "running")


def lease_items(emulators: Emulators, table: str) -> list[dict[str, Any]]:
    """Every item of a lease table, in key order."""
    items = emulators.boto3_client("dynamodb").scan(TableName=table, ConsistentRead=True)["Items"]
    return sorted(items, key=lambda item: str(item["lease_key"]))


def test_the_schedule_ingests_every_record_once_and_the_reset_runs_when_triggered_through_the_api(
    real_airflow: AirflowStack, emulators: Emulators
) -> None:
    stack, connector = real_airflow, real_airflow.connector
    stream, app = connector["source"]["stream_name"], connector["source"]["application_name"]
    fqn = "ANALYTICS.RAW." + connector["destination"]["table"]
    provision, ingest, reset = (f"kinesis_snowflake_orders_{kind}" for kind in ("provision", "ingest", "reset"))
    kinesis, dynamodb = emulators.boto3_client("kinesis"), emulators.boto3_client("dynamodb")

    def ids() -> Counter[int]:
        return Counter(int(row[0]) for row in query(emulators, f"SELECT ID FROM {fqn}"))

    def ingest_runs() -> list[dict[str, Any]]:
        return stack.runs(ingest)

    with stack.diagnosed():
        stack.wait_for_dags([provision, ingest, reset])
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

    # Shut down: SIGTERM is enough for whatever the tasks started, and nothing the stack started is
    # left once its grace period is over. Airflow's scheduler may outlive it, waiting in
    # LocalExecutor.end() for an idle worker (see stuck_in_executor_shutdown); stop() prints where.
    not_ended = stack.stop()
    assert [p for p in not_ended if not stuck_in_executor_shutdown(p)] == [], not_ended
    assert stack.leftovers() == []
    assert all(p.process.returncode is not None for p in stack.processes)
