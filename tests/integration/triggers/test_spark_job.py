"""The trigger a deferred ingest or sync task waits on, driven against the moto server's EMR Serverless
(``tests/emulators/emr_serverless.py``), the emulated Databricks workspace
(``tests/emulators/databricks.py``) and the lease table; and the deferred task's resume after a run
that failed. A run whose entry point is not in the platform's storage fails as it starts, with no
Spark: the success and timeout events of a real run are the deferred ingest task's
(``tests/integration/test_deferrable.py``)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from airflow.sdk.serde import deserialize, serialize

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.core.engine.detached import DetachedRun
from airflow_kinesis_snowflake.core.engine.leases import LeaseHold
from airflow_kinesis_snowflake.core.model import InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.hooks.databricks import DatabricksSubmitter
from airflow_kinesis_snowflake.hooks.platforms import job_submit_hook
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from airflow_kinesis_snowflake.triggers.spark_job import SparkJobRunTrigger
from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.databricks import Databricks
from tests.emulators.servers import REGION
from tests.integration.hooks.test_databricks import SPARK_CONN as DATABRICKS_SPARK_CONN
from tests.integration.hooks.test_databricks import Workspace, workspace
from tests.integration.hooks.test_emr_serverless import (
    ROLE,
    SPARK_CONN,
    EmrServerless,
    emr_serverless,
    spark_connection,
)
from tests.integration.triggers.test_kinesis import first_event

pytestmark = pytest.mark.integration

PLATFORM = {
    "platform": "emr_serverless",
    "application_id": "00fapp",
    "execution_role_arn": ROLE,
    "artifacts": "s3://jobs/orders",
    "poll_seconds": 5,
}


@pytest.fixture
def emr(aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch) -> EmrServerless:
    platform = emr_serverless(aws_connections)
    monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONN.upper()}", spark_connection(platform.secret_id))
    return platform


@pytest.fixture
def dbx(aws_connections: Emulators, databricks: Databricks, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    built = workspace(aws_connections, databricks)
    monkeypatch.setenv(f"AIRFLOW_CONN_{DATABRICKS_SPARK_CONN.upper()}", spark_connection(built.secret_id))
    monkeypatch.setenv("AIRFLOW_CONN_DATABRICKS_DEFAULT", json.dumps(databricks.connection()))
    return built


def rebuilt(trigger: SparkJobRunTrigger) -> SparkJobRunTrigger:
    """The trigger as the triggerer builds it: its kwargs through Airflow's serde, as stored between them."""
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_kinesis_snowflake.triggers.spark_job.SparkJobRunTrigger"
    stored = json.loads(json.dumps(serialize(kwargs)))
    built = SparkJobRunTrigger(**deserialize(stored))  # type: ignore[arg-type]
    assert built.serialize() == (classpath, kwargs)
    return built


def test_the_trigger_round_trips_through_what_airflow_stores_and_holds_ids_and_names_only() -> None:
    hold = LeaseHold("orders-app", "dag/ingest/run/-1/try-1/ab12cd34", ("shardId-000000000000",), 300.0)
    run = DetachedRun("emr_serverless", "00frun", "attempt-1", "orders-app", "g1", "b1", "kinesis-to-snowflake-orders")
    trigger = SparkJobRunTrigger(
        spark_platform=PLATFORM,
        job_run_id="00frun",
        aws_conn_id="aws_orders",
        region_name="eu-west-1",
        leases=hold.to_dict(),
        timeout=43_800.0,
        batch={"run": run.to_dict(), "progress": {"cutoff": "2026-01-31T12:00:00+00:00", "earlier": []}},
    )

    built = rebuilt(trigger)

    assert (built.job_run_id, built.aws_conn_id, built.region_name, built.timeout) == (
        "00frun",
        "aws_orders",
        "eu-west-1",
        43_800.0,
    )
    assert LeaseHold.from_dict(built.leases or {}) == hold
    assert DetachedRun.from_dict(built.batch["run"]) == run
    assert set(trigger.serialize()[1]) == {
        "spark_platform",
        "job_run_id",
        "aws_conn_id",
        "region_name",
        "leases",
        "poll_seconds",
        "timeout",
        "batch",
    }


def failing_run(emr: EmrServerless) -> str:
    """A job run whose entry point is not on S3: EMR Serverless fails it as it starts (no Spark runs)."""
    started = emr.emulators.boto3_client("emr-serverless").start_job_run(
        applicationId=emr.application_id,
        executionRoleArn=ROLE,
        clientToken=unique("token"),
        name="kinesis-to-snowflake-missing",
        jobDriver={"sparkSubmit": {"entryPoint": f"s3://{emr.bucket}/jobs/missing.py"}},
        configurationOverrides={
            "monitoringConfiguration": {"s3MonitoringConfiguration": {"logUri": f"s3://{emr.bucket}/jobs/logs/"}}
        },
    )
    return str(started["jobRunId"])


def held_leases(emulators: Emulators, owner: str, *shards: str) -> LeaseHold:
    """A lease table whose shards' leases ``owner`` holds, as a batch that deferred leaves them."""
    name = unique("deferred")
    table = LeaseTable(emulators.boto3_client("dynamodb"), name)
    table.create(stream_name="orders", application_name=name)
    leases = table.sync_shards([Shard(s) for s in shards], StartPosition(InitialPosition.TRIM_HORIZON))
    for shard in shards:
        assert table.take(leases[shard], owner, 60) is not None
    return LeaseHold(name, owner, tuple(shards), 60.0)


def test_a_run_that_fails_ends_the_wait_with_its_state_and_details_and_its_leases_were_renewed(
    emr: EmrServerless,
) -> None:
    emulators = emr.emulators
    job_run_id = failing_run(emr)
    hold = held_leases(emulators, "dag/ingest/run/-1/try-1/ab12cd34", "shardId-000000000000")
    table = LeaseTable(emulators.boto3_client("dynamodb"), hold.table_name)
    before = table.leases()["shardId-000000000000"]
    batch = {"run": {"job_run_id": job_run_id}, "progress": {"earlier": []}}
    trigger = SparkJobRunTrigger(
        spark_platform=emr.platform,
        job_run_id=job_run_id,
        region_name=REGION,
        leases=hold.to_dict(),
        poll_seconds=0.2,
        timeout=60,
        batch=batch,
    )

    event = first_event(rebuilt(trigger), within=60)

    message = event.payload.pop("message")
    assert event.payload == {
        "status": "failed",
        "job_run_id": job_run_id,
        "state": "FAILED",
        "leases": hold.to_dict(),
        "batch": batch,  # what the task resumes with, handed back
    }
    assert message.startswith("Job run could not start")
    after = table.leases()["shardId-000000000000"]
    assert after.lease_owner == hold.owner and after.lease_counter > before.lease_counter  # renewed while it waited
    assert hold.owner in table.workers()  # with the owner's heartbeat


def test_a_deferred_ingest_task_whose_run_failed_raises_with_its_end_releases_its_leases_and_loads_nothing(
    emr: EmrServerless,
) -> None:
    emulators = emr.emulators
    stream, app = unique("deferred-failed"), unique("deferred-failed-app")
    table = "DEFERRED_FAILED_" + app.split("-")[-1].upper()
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    put_json(create_stream(emulators, stream, 1), stream, [{"id": 1}])
    owner = "dag/ingest/run/-1/try-1/ab12cd34"
    hold = held_leases(emulators, owner, "shardId-000000000000")
    job_run_id = failing_run(emr)
    run = DetachedRun("emr_serverless", job_run_id, "attempt-1", hold.table_name, "g1", "b1", "kinesis-to-snowflake")
    leases = LeaseTable(emulators.boto3_client("dynamodb"), hold.table_name)
    leases.record_run(run.batch_id, run.to_dict())
    progress: dict[str, Any] = {"cutoff": "2026-01-31T12:00:00+00:00", "earlier": []}
    trigger = SparkJobRunTrigger(
        spark_platform=emr.platform,
        job_run_id=job_run_id,
        region_name=REGION,
        leases=hold.to_dict(),
        poll_seconds=0.2,
        batch={"run": run.to_dict(), "progress": progress},
    )
    event = first_event(rebuilt(trigger), within=60)
    ingest = SparkKinesisIngestOperator(
        task_id="ingest",
        stream_name=stream,
        application_name=hold.table_name,
        database="ANALYTICS",
        schema="RAW",
        table=table,
        region_name=REGION,
        spark_conn_id=SPARK_CONN,
        spark_platform=emr.platform,
        deferrable=True,
    )

    with pytest.raises(AirflowException) as raised:
        ingest.execute_complete(context={}, event=json.loads(json.dumps(event.payload)))

    message = str(raised.value)
    assert f"job run {job_run_id} of application {emr.application_id} ended FAILED (Job run could not start" in message
    assert f"no driver log was found under s3://{emr.bucket}/jobs/logs" in message
    assert {lease.lease_owner for lease in leases.leases().values()} == {None}  # released, as the blocking task's
    assert leases.recorded_run(run.batch_id) is None
    assert query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table}") == []


def test_the_job_s_hook_reads_a_failed_run_s_end_as_the_blocking_wait_does(emr: EmrServerless) -> None:
    job_run_id = failing_run(emr)
    spark = job_submit_hook(
        conn_id=SPARK_CONN,
        conf=None,
        spark_submit={},
        spark_platform=emr.platform,
        aws_conn_id="aws_default",
        region_name=REGION,
    )
    assert spark.submitter is not None
    deadline = time.monotonic() + 60
    while not (state := spark.submitter.run_state(job_run_id)).ended and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (state.state, state.ended, state.succeeded) == ("FAILED", True, False)

    with pytest.raises(AirflowException, match=f"job run {job_run_id} of application .* ended FAILED"):
        spark.finish_run(DetachedRun("emr_serverless", job_run_id, "a", "app", "g", "b", "kinesis-to-snowflake"))


def failing_databricks_run(on: Workspace) -> str:
    """A run whose script is not in the workspace's storage: the emulated Databricks ends it
    INTERNAL_ERROR as it starts (no Spark runs)."""
    submitter = DatabricksSubmitter(**{k: v for k, v in on.platform().items() if k != "platform"})
    missing = f"{on.volume}/{unique('gone')}/kinesis_to_snowflake.py"
    task: dict[str, Any] = {"task_key": "kinesis_snowflake", "existing_cluster_id": on.cluster_id}
    task["spark_python_task"] = {"python_file": missing, "parameters": []}
    return str(submitter.databricks.submit_run({"run_name": "kinesis-to-snowflake-missing", "tasks": [task]}))


def test_a_deferred_ingest_task_on_databricks_waits_in_the_trigger_and_raises_with_the_run_s_end(
    dbx: Workspace,
) -> None:
    emulators = dbx.emulators
    stream, app = unique("deferred-dbx"), unique("deferred-dbx-app")
    table = "DEFERRED_DBX_" + app.split("-")[-1].upper()
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    put_json(create_stream(emulators, stream, 1), stream, [{"id": 1}])
    owner = "dag/ingest/run/-1/try-1/ab12cd34"
    hold = held_leases(emulators, owner, "shardId-000000000000")
    table_leases = LeaseTable(emulators.boto3_client("dynamodb"), hold.table_name)
    before = table_leases.leases()["shardId-000000000000"]
    ingest = SparkKinesisIngestOperator(  # refused at parse time where the platform cannot defer
        task_id="ingest",
        stream_name=stream,
        application_name=hold.table_name,
        database="ANALYTICS",
        schema="RAW",
        table=table,
        region_name=REGION,
        spark_conn_id=DATABRICKS_SPARK_CONN,
        spark_platform=dbx.platform(),
        deferrable=True,
    )
    job_run_id = failing_databricks_run(dbx)
    run = DetachedRun("databricks", job_run_id, "attempt-1", hold.table_name, "g1", "b1", "kinesis-to-snowflake")
    table_leases.record_run(run.batch_id, run.to_dict())
    batch = {"run": run.to_dict(), "progress": {"cutoff": "2026-01-31T12:00:00+00:00", "earlier": []}}
    trigger = SparkJobRunTrigger(
        spark_platform=dbx.platform(),
        job_run_id=job_run_id,
        region_name=REGION,
        leases=hold.to_dict(),
        poll_seconds=0.2,
        timeout=60,
        batch=batch,
    )

    event = first_event(rebuilt(trigger), within=60)

    missing = f"{dbx.volume}/"
    assert {k: v for k, v in event.payload.items() if k != "message"} == {
        "status": "failed",
        "job_run_id": job_run_id,
        "state": "INTERNAL_ERROR FAILED",  # runs/get's life cycle and result, as the submitter reads them
        "leases": hold.to_dict(),
        "batch": batch,
    }
    assert event.payload["message"].startswith("Run failed with error message: " + missing)
    renewed = table_leases.leases()["shardId-000000000000"]
    assert renewed.lease_owner == owner and renewed.lease_counter > before.lease_counter  # renewed while it waited

    with pytest.raises(AirflowException) as raised:
        ingest.execute_complete(context={}, event=json.loads(json.dumps(event.payload)))

    message = str(raised.value)
    assert f"run {job_run_id} on cluster {dbx.cluster_id} ended INTERNAL_ERROR FAILED" in message
    assert {lease.lease_owner for lease in table_leases.leases().values()} == {None}  # released
    assert table_leases.recorded_run(run.batch_id) is None
    assert query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table}") == []
