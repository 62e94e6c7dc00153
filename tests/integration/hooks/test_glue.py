"""Batches as AWS Glue job runs, through moto's Glue extended to run them (``tests/emulators/glue.py``:
a real local spark-submit of the job's script per run, its files read from moto's S3): a DynamoDB
batch, a failed run, a stopped one. The Kinesis ingest DAG on Glue is ``tests/integration/test_glue_dag.py``.

The driver uses its own identity (the job's role) and reads the Snowflake connection from a Secrets
Manager secret in moto; nothing of this worker's credentials is in the job run.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pytest

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.core.dynamodb_job import TableBatchPlan, TableBatchResult
from airflow_kinesis_snowflake.core.dynamodb_sync import sync_table
from airflow_kinesis_snowflake.core.load.dynamodb_rows import Layout
from airflow_kinesis_snowflake.core.load.dynamodb_sink import Deletes
from airflow_kinesis_snowflake.core.model import Destination, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import BatchPlan, ShardRange
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import SyncSettings
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook
from airflow_kinesis_snowflake.hooks.platforms import job_submit_hook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from airflow_kinesis_snowflake.operators.lease_table import CreateLeaseTableOperator
from tests.conftest import create_stream, create_table, put_json, unique
from tests.emulators import Emulators
from tests.emulators.servers import REGION
from tests.integration.core.test_dynamodb_sync import client, destination_rows, make_source, source_items
from tests.integration.hooks.test_emr_serverless import snowflake_secret, spark_connection

pytestmark = pytest.mark.integration

ROLE = "arn:aws:iam::123456789012:role/kinesis-snowflake-glue-job"
SPARK_CONN = "spark_glue"


@dataclass(frozen=True)
class Glue:
    """A Glue job's name (the task defines the job), its artifacts bucket, and the Snowflake connection's secret."""

    emulators: Emulators
    job_name: str
    bucket: str
    secret_id: str

    @property
    def platform(self) -> dict[str, Any]:
        return {
            "platform": "glue",
            "job_name": self.job_name,
            "role_arn": ROLE,
            "artifacts": f"s3://{self.bucket}/jobs",
            "worker_type": "G.1X",
            "number_of_workers": 2,
            "glue_version": "5.0",
            "poll_seconds": 1,
        }

    def job(self) -> dict[str, Any]:
        return dict(self.emulators.boto3_client("glue").get_job(JobName=self.job_name)["Job"])

    def job_runs(self) -> list[dict[str, Any]]:
        return list(self.emulators.boto3_client("glue").get_job_runs(JobName=self.job_name)["JobRuns"])


def glue(emulators: Emulators) -> Glue:
    """An artifacts bucket and the Snowflake connection's secret (fakesnow's) in moto; no Glue job yet."""
    bucket = unique("glue-jobs")
    emulators.boto3_client("s3").create_bucket(Bucket=bucket)
    return Glue(emulators, unique("orders-to-snowflake"), bucket, snowflake_secret(emulators, unique("glue/snowflake")))


@pytest.fixture
def glue_job(aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch) -> Glue:
    platform = glue(aws_connections)
    monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONN.upper()}", spark_connection(platform.secret_id))
    return platform


def test_a_dynamodb_batch_runs_as_a_glue_job_run_and_the_table_equals_a_scan(glue_job: Glue) -> None:
    emulators = glue_job.emulators
    settings = SyncSettings(total_segments=2, max_segments_per_batch=2)
    workload, sync = make_source(emulators, Layout.PACKED, Deletes.HARD, settings)
    sync = replace(sync, max_items_per_segment=100, max_records_per_shard=100)
    workload.put(8, start=0)
    spark = job_submit_hook(
        conn_id=SPARK_CONN,
        conf=None,
        spark_submit={},
        spark_platform=glue_job.platform,
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
        source_dynamodb=None,  # the data plane runs on Glue: this process reads no item
        streams=client(emulators, "dynamodbstreams"),
        connect_snowflake=emulators.snowflake_connect,
        owner=f"ddb/glue/run/-1/try-1/{os.getpid()}",
        now=lambda: datetime.now(UTC),
        submit=submit,
        region=REGION,
    )

    assert [b.batch_id for b in outcome.batches] == [r.batch_id for r in results] and len(results) == 1
    assert sum(s.items for s in results[0].segments) == 8
    actual, tombstoned = destination_rows(emulators, sync)
    assert actual == source_items(workload) and not tombstoned
    # The task defined the job: its script the Glue entry point under the hash of its bytes, its role and workers.
    job = glue_job.job()
    assert job["Command"]["ScriptLocation"].startswith(f"s3://{glue_job.bucket}/jobs/sha256-")
    assert job["Command"]["ScriptLocation"].endswith("/glue_to_snowflake.py")
    assert (job["Role"], job["GlueVersion"], job["WorkerType"], job["NumberOfWorkers"]) == (ROLE, "5.0", "G.1X", 2)
    (run,) = glue_job.job_runs()
    assert run["JobRunState"] == "SUCCEEDED"
    assert run["Arguments"]["--extra-py-files"].endswith("/kinesis_snowflake_core.zip")
    assert run["Arguments"]["--snowflake-connection-ref"] == glue_job.secret_id


def test_a_failed_job_run_raises_with_its_error_message_and_the_driver_s_last_lines(
    glue_job: Glue, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = unique("glue/missing")
    monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONN.upper()}", spark_connection(missing))
    table = unique("GLUE_FAILED").replace("-", "_").upper()
    plan = BatchPlan(
        application_name="glue-failed",
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
        spark_platform=glue_job.platform,
        aws_conn_id="aws_default",
        region_name=REGION,
    )

    with pytest.raises(AirflowException) as raised:
        spark.run_batch(plan, kinesis=KinesisStreamHook(aws_conn_id="aws_default"), snowflake=KinesisSnowflakeHook())

    (run,) = glue_job.job_runs()
    message = str(raised.value)
    assert f"job run {run['Id']} of job {glue_job.job_name} ended FAILED" in message
    # Glue's error message, then what the driver wrote last, read from CloudWatch Logs.
    error = message.split(" ended FAILED (", 1)[1].split(").", 1)[0]
    assert "ResourceNotFoundException" in error and "GetSecretValue" in error and repr(missing) in error
    assert f"/aws-glue/jobs/error/{run['Id']}" in message
    assert "ResourceNotFoundException" in message.split("Its driver's last", 1)[1]
    assert "GetSecretValue" in message


def test_on_kill_stops_the_job_run_and_its_processes_end(glue_job: Glue, tmp_path: Path) -> None:
    emulators = glue_job.emulators
    stream, app = unique("glue-kill"), unique("glue-kill-app")
    table = "GLUE_KILL_" + app.split("-")[-1].upper()
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
        spark_platform=glue_job.platform,
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
        try:
            if [r for r in glue_job.job_runs() if r["JobRunState"] == "RUNNING"]:
                running.set()
        except emulators.boto3_client("glue").exceptions.EntityNotFoundException:
            pass  # the task has not defined the job yet
    assert running.is_set(), raised

    ingest.on_kill()
    task.join(timeout=300)

    (run,) = glue_job.job_runs()
    assert run["JobRunState"] == "STOPPED"
    assert [type(err) for err in raised] == [AirflowException]
    assert "ended STOPPED" in str(raised[0])
    processes = psutil.process_iter(["pid", "cmdline"])
    alive = [p.info["pid"] for p in processes if run["Id"] in " ".join(p.info["cmdline"] or [])]
    assert alive == []
