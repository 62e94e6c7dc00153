"""Batches as one-time Databricks runs, on the emulated workspace (``tests/emulators/databricks.py``: a
real local spark-submit per run, its script and the package wheel read from the workspace's storage):
a DynamoDB batch on a new job cluster, a failed run, a cancelled one. The Kinesis ingest DAG on
Databricks is ``tests/integration/test_databricks_dag.py``.

The driver uses its own identity (the cluster's) and reads the Snowflake connection from a Secrets
Manager secret in moto; nothing of this worker's credentials is in the run.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pytest

from airflow_kinesis_snowflake.__main__ import main
from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.core.dynamodb_job import STREAMS_ENDPOINT_ENV, TableBatchPlan, TableBatchResult
from airflow_kinesis_snowflake.core.dynamodb_sync import sync_table
from airflow_kinesis_snowflake.core.load.dynamodb_rows import Layout
from airflow_kinesis_snowflake.core.load.dynamodb_sink import Deletes
from airflow_kinesis_snowflake.core.model import Destination, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import BatchPlan, ShardRange
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import SyncSettings
from airflow_kinesis_snowflake.hooks.databricks import DatabricksSubmitter
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook
from airflow_kinesis_snowflake.hooks.platforms import job_submit_hook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from airflow_kinesis_snowflake.operators.lease_table import CreateLeaseTableOperator
from tests.conftest import create_stream, create_table, put_json, unique
from tests.emulators import Emulators
from tests.emulators.databricks import WORK_PREFIX, Databricks
from tests.emulators.servers import REGION
from tests.integration.core.test_dynamodb_sync import client, destination_rows, make_source, source_items
from tests.integration.hooks.test_emr_serverless import snowflake_secret, spark_connection
from tests.unit.test_main_platform import write_connector

pytestmark = pytest.mark.integration

SPARK_CONN = "spark_databricks"
NEW_CLUSTER = {
    "spark_version": "15.4.x-scala2.12",
    "node_type_id": "m5d.large",
    "num_workers": 1,
    "aws_attributes": {"instance_profile_arn": "arn:aws:iam::123456789012:instance-profile/kinesis-snowflake-job"},
}


@dataclass(frozen=True)
class Workspace:
    """The emulated workspace with a volume and an all-purpose cluster (its driver's environment
    reaching moto, as an administrator sets a cluster up), and the Snowflake connection's secret."""

    emulators: Emulators
    databricks: Databricks
    volume: str
    cluster_id: str
    secret_id: str

    def platform(self, **fields: Any) -> dict[str, Any]:
        """``spark_platform`` on the cluster with the artifacts in the volume, or as ``fields`` say."""
        settings = {"existing_cluster_id": self.cluster_id, "artifacts": f"{self.volume}/jobs", "poll_seconds": 1}
        return {"platform": "databricks", **settings, **fields}

    def run(self, run_id: int | None = None) -> dict[str, Any]:
        """The run ``run_id``, or the newest one."""
        runs = self.databricks.runs()
        return next(r for r in runs if run_id in (None, r["run_id"]))


def workspace(emulators: Emulators, databricks: Databricks) -> Workspace:
    """A volume, a cluster whose driver reaches moto, and the Snowflake connection's secret."""
    volume = databricks.create_volume("main", unique("jobs").replace("-", "_"), "artifacts")
    endpoint = emulators.aws_endpoint
    cluster_env = {"AWS_DEFAULT_REGION": REGION, STREAMS_ENDPOINT_ENV: endpoint}
    for service in ("KINESIS", "DYNAMODB", "SECRETS_MANAGER"):
        cluster_env[f"AWS_ENDPOINT_URL_{service}"] = endpoint
    cluster_id = databricks.create_cluster(cluster_env)
    return Workspace(emulators, databricks, volume, cluster_id, snowflake_secret(emulators, unique("dbx/snowflake")))


@pytest.fixture(scope="module")
def shared(emulators: Emulators, databricks: Databricks) -> Workspace:
    return workspace(emulators, databricks)


@pytest.fixture
def dbx(shared: Workspace, aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONN.upper()}", spark_connection(shared.secret_id))
    monkeypatch.setenv("AIRFLOW_CONN_DATABRICKS_DEFAULT", json.dumps(shared.databricks.connection()))
    return shared


def test_a_dynamodb_batch_runs_on_a_new_job_cluster_and_the_table_equals_a_scan(dbx: Workspace) -> None:
    emulators = dbx.emulators
    settings = SyncSettings(total_segments=2, max_segments_per_batch=2)
    workload, sync = make_source(emulators, Layout.PACKED, Deletes.HARD, settings)
    sync = replace(sync, max_items_per_segment=100, max_records_per_shard=100)
    workload.put(8, start=0)
    artifacts = f"dbfs:/{unique('jobs')}"
    platform = {"platform": "databricks", "new_cluster": NEW_CLUSTER, "artifacts": artifacts, "poll_seconds": 1}
    spark = job_submit_hook(
        conn_id=SPARK_CONN,
        conf=None,
        spark_submit={},
        spark_platform=platform,
        aws_conn_id="aws_default",
        region_name=REGION,
    )
    aws, snowflake = KinesisStreamHook(aws_conn_id="aws_default"), KinesisSnowflakeHook()
    results: list[TableBatchResult] = []

    def submit(plan: TableBatchPlan) -> TableBatchResult:
        results.append(spark.run_table_batch(plan, aws=aws, snowflake=snowflake))
        return results[-1]

    outcome = sync_table(
        sync,
        lease_dynamodb=client(emulators, "dynamodb"),
        source_dynamodb=None,  # the data plane runs on Databricks: this process reads no item
        streams=client(emulators, "dynamodbstreams"),
        connect_snowflake=emulators.snowflake_connect,
        owner=f"ddb/dbx/run/-1/try-1/{os.getpid()}",
        now=lambda: datetime.now(UTC),
        submit=submit,
        region=REGION,
    )

    assert [b.batch_id for b in outcome.batches] == [r.batch_id for r in results] and len(results) == 1
    assert sum(s.items for s in results[0].segments) == 8
    actual, tombstoned = destination_rows(emulators, sync)
    assert actual == source_items(workload) and not tombstoned
    run = dbx.run()
    assert (run["state"]["life_cycle_state"], run["state"]["result_state"]) == ("TERMINATED", "SUCCESS")
    (task,) = run["tasks"]
    # The entry point and the package wheel on DBFS, each under the hash of its bytes.
    assert task["spark_python_task"]["python_file"].startswith(f"{artifacts}/sha256-")
    assert task["spark_python_task"]["python_file"].endswith("/dynamodb_to_snowflake.py")
    (wheel,) = task["libraries"]
    assert wheel["whl"].startswith(f"{artifacts}/sha256-") and wheel["whl"].endswith("-py3-none-any.whl")
    assert dbx.databricks.files(artifacts) == sorted([task["spark_python_task"]["python_file"], wheel["whl"]])
    # The new cluster's driver learns where AWS is from the AWS connection: no credential.
    env = task["new_cluster"]["spark_env_vars"]
    assert env["AWS_DEFAULT_REGION"] == REGION and env[STREAMS_ENDPOINT_ENV] == emulators.aws_endpoint
    assert task["new_cluster"]["spark_conf"] == {"spark.log.level": "WARN"}
    shown = json.dumps(run)
    assert '"snow"' not in shown and "testing" not in shown and "SNOWFLAKE_CONNECTION_JSON" not in shown


def test_a_failed_run_raises_with_its_state_message_and_the_driver_s_last_lines(
    dbx: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = unique("dbx/missing")
    monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONN.upper()}", spark_connection(missing))
    table = unique("DBX_FAILED").replace("-", "_").upper()
    plan = BatchPlan(
        application_name="dbx-failed",
        generation_id="g",
        stream_name="s",
        region=REGION,
        destination=Destination("ANALYTICS", "RAW", table),
        cutoff=datetime(2026, 1, 31, 12, tzinfo=UTC),
        max_records_per_call=100,
        ranges=(ShardRange("shard-1", None, StartPosition(InitialPosition.TRIM_HORIZON), 100),),
    )
    spark = job_submit_hook(
        conn_id=SPARK_CONN,
        conf=None,
        spark_submit={},
        spark_platform=dbx.platform(),
        aws_conn_id="aws_default",
        region_name=REGION,
    )

    with pytest.raises(AirflowException) as raised:
        spark.run_batch(plan, kinesis=KinesisStreamHook(aws_conn_id="aws_default"), snowflake=KinesisSnowflakeHook())

    run = dbx.run()
    (task,) = run["tasks"]
    message = str(raised.value)
    assert f"run {run['run_id']} on cluster {dbx.cluster_id} ended TERMINATED FAILED" in message
    # Databricks's state message, the task's error, then what the driver wrote last, from the task run's output.
    assert "Task kinesis_snowflake failed with message: Workload failed, see run output for details" in message
    assert "; its task: " in message and "ResourceNotFoundException" in message.split("; its task: ", 1)[1]
    assert f"of the output of task run {task['run_id']}" in message
    assert "GetSecretValue" in message.split("Its driver's last", 1)[1]
    assert isinstance(spark.submitter, DatabricksSubmitter)
    assert spark.submitter.job_run_id is None  # ended: nothing for on_kill to cancel


def test_on_kill_cancels_the_run_and_its_processes_end(dbx: Workspace, tmp_path: Path) -> None:
    emulators = dbx.emulators
    stream, app = unique("dbx-kill"), unique("dbx-kill-app")
    table = "DBX_KILL_" + app.split("-")[-1].upper()
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    put_json(create_stream(emulators, stream, 1), stream, [{"id": 1}])
    CreateLeaseTableOperator(task_id="lease_table", application_name=app, stream_name=stream).execute(context={})
    application = tmp_path / "waits.py"
    application.write_text("import time\n\ntime.sleep(600)\n")  # a job that runs until it is stopped
    ingest = SparkKinesisIngestOperator(
        task_id="ingest",
        stream_name=stream,
        application_name=app,
        database="ANALYTICS",
        schema="RAW",
        table=table,
        region_name=REGION,
        spark_conn_id=SPARK_CONN,
        spark_platform=dbx.platform(),
        application=str(application),
    )
    raised: list[BaseException] = []

    def execute() -> None:
        try:
            ingest.execute(context={})
        except BaseException as err:  # noqa: BLE001 - checked below
            raised.append(err)

    task = threading.Thread(target=execute)
    task.start()
    running = threading.Event()
    while task.is_alive() and not running.wait(0.5):
        runs = [
            r for r in dbx.databricks.runs() if r["tasks"][0]["spark_python_task"]["python_file"].endswith("/waits.py")
        ]
        if runs and runs[0]["state"]["life_cycle_state"] == "RUNNING":
            running.set()
    assert running.is_set(), raised

    ingest.on_kill()
    task.join(timeout=300)

    run = dbx.run()
    assert (run["state"]["life_cycle_state"], run["state"]["result_state"]) == ("TERMINATED", "CANCELED")
    assert [type(err) for err in raised] == [AirflowException]
    assert "ended TERMINATED CANCELED" in str(raised[0])
    work = f"{WORK_PREFIX}{run['tasks'][0]['run_id']}-"
    processes = psutil.process_iter(["pid", "cmdline"])
    alive = [p.info["pid"] for p in processes if work in " ".join(p.info["cmdline"] or [])]
    assert alive == []


def test_artifacts_upload_puts_the_entry_point_and_the_wheel_where_the_tasks_look_for_them(
    dbx: Workspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    artifacts = f"{dbx.volume}/{unique('cli')}"
    spark = {"platform": "databricks", "databricks": {"existing_cluster_id": dbx.cluster_id, "artifacts": artifacts}}
    connector = write_connector(tmp_path, spark)

    assert main(["artifacts", "upload", "--connector", str(connector)]) == 0
    first = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert main(["artifacts", "upload", "--connector", str(connector)]) == 0
    again = [line.split("\t") for line in capsys.readouterr().out.splitlines()]

    assert [state for _, state in first] == ["uploaded", "uploaded"]
    assert [state for _, state in again] == ["already there", "already there"]
    (entry_point, _), (wheel, _) = first
    assert entry_point.startswith(f"{artifacts}/sha256-") and entry_point.endswith("/kinesis_to_snowflake.py")
    assert wheel.startswith(f"{artifacts}/sha256-") and wheel.endswith("-py3-none-any.whl")
    assert dbx.databricks.files(artifacts) == sorted([entry_point, wheel])


def test_a_run_whose_script_is_not_in_storage_ends_internal_error_and_the_exception_says_why(dbx: Workspace) -> None:
    submitter = DatabricksSubmitter(**{k: v for k, v in dbx.platform().items() if k != "platform"})
    missing = f"{dbx.volume}/{unique('gone')}/kinesis_to_snowflake.py"
    task: dict[str, Any] = {"task_key": "kinesis_snowflake", "existing_cluster_id": dbx.cluster_id}
    task["spark_python_task"] = {"python_file": missing, "parameters": []}
    run_id = submitter.databricks.submit_run({"run_name": "gone", "tasks": [task]})

    submitter._wait_for_run(str(run_id), "gone")

    state = submitter.run_state(str(run_id))  # what a deferred task's trigger reads
    assert (state.state, state.ended, state.succeeded) == ("INTERNAL_ERROR FAILED", True, False)
    assert state.details == f"Run failed with error message: {missing} does not exist"
    with pytest.raises(AirflowException) as raised:
        submitter.finish(str(run_id), "gone")
    message = str(raised.value)
    assert f"run {run_id} on cluster {dbx.cluster_id} ended INTERNAL_ERROR FAILED" in message
    assert f"{missing} does not exist" in message
    assert "has no output to show" in message  # no script ran: no driver line to show
