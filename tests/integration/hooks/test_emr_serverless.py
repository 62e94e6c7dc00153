"""Batches as EMR Serverless job runs, through moto's EMR Serverless extended to run them
(``tests/emulators/emr_serverless.py``: a real local spark-submit per job run, its files read from
moto's S3): a DynamoDB batch, a failed run, a cancelled one. The Kinesis ingest DAG on EMR Serverless
is ``tests/integration/test_emr_serverless_dag.py``.

The driver uses its own identity (the execution role) and reads the Snowflake connection from a
Secrets Manager secret in moto; nothing of this worker's credentials is in the job run.
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

pytestmark = pytest.mark.integration

ROLE = "arn:aws:iam::123456789012:role/kinesis-snowflake-job"
SPARK_CONN = "spark_emr_serverless"


@dataclass(frozen=True)
class EmrServerless:
    """An EMR Serverless application in moto, its artifacts bucket, and the Snowflake connection's secret."""

    emulators: Emulators
    application_id: str
    bucket: str
    secret_id: str

    @property
    def platform(self) -> dict[str, Any]:
        return {
            "platform": "emr_serverless",
            "application_id": self.application_id,
            "execution_role_arn": ROLE,
            "artifacts": f"s3://{self.bucket}/jobs",
            "poll_seconds": 1,
        }

    def job_runs(self) -> list[dict[str, Any]]:
        emr = self.emulators.boto3_client("emr-serverless")
        runs = emr.list_job_runs(applicationId=self.application_id)["jobRuns"]
        return [emr.get_job_run(applicationId=self.application_id, jobRunId=r["id"])["jobRun"] for r in runs]

    def keys(self) -> list[str]:
        s3 = self.emulators.boto3_client("s3")
        return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=self.bucket).get("Contents", []))


def spark_connection(secret_id: str) -> str:
    """A Spark connection that only says how the driver gets its credentials."""
    extra = {"driver_identity": True, "snowflake_connection_ref": secret_id}
    return json.dumps({"conn_type": "kinesis_snowflake_spark", "extra": extra})


def snowflake_secret(emulators: Emulators, secret_id: str) -> str:
    """A Secrets Manager secret ``secret_id`` in moto holding the Snowflake connection (fakesnow's)."""
    snowflake = {
        "account": "fakesnow",
        "user": "fake",
        "password": "snow",
        "host": "127.0.0.1",
        "port": emulators.fakesnow_port,
        "protocol": "http",
    }
    emulators.boto3_client("secretsmanager").create_secret(Name=secret_id, SecretString=json.dumps(snowflake))
    return secret_id


def emr_serverless(emulators: Emulators) -> EmrServerless:
    """An application, an artifacts bucket and the Snowflake connection's secret (fakesnow's) in moto."""
    bucket = unique("emr-jobs")
    emulators.boto3_client("s3").create_bucket(Bucket=bucket)
    application = emulators.boto3_client("emr-serverless").create_application(
        name=unique("ingest"), releaseLabel="emr-7.5.0", type="SPARK"
    )["applicationId"]
    secret_id = snowflake_secret(emulators, unique("emr/snowflake"))
    return EmrServerless(emulators, application, bucket, secret_id)


@pytest.fixture
def emr(aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch) -> EmrServerless:
    platform = emr_serverless(aws_connections)
    monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONN.upper()}", spark_connection(platform.secret_id))
    return platform


def test_a_dynamodb_batch_runs_as_a_job_run_and_the_table_equals_a_scan(emr: EmrServerless) -> None:
    emulators = emr.emulators
    settings = SyncSettings(total_segments=2, max_segments_per_batch=2)
    workload, sync = make_source(emulators, Layout.PACKED, Deletes.HARD, settings)
    sync = replace(sync, max_items_per_segment=100, max_records_per_shard=100)
    workload.put(8, start=0)
    spark = job_submit_hook(
        conn_id=SPARK_CONN,
        conf=None,
        spark_submit={},
        spark_platform=emr.platform,
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
        source_dynamodb=None,  # the data plane runs on EMR Serverless: this process reads no item
        streams=client(emulators, "dynamodbstreams"),
        connect_snowflake=emulators.snowflake_connect,
        owner=f"ddb/emr/run/-1/try-1/{os.getpid()}",
        now=lambda: datetime.now(UTC),
        submit=submit,
        region=REGION,
    )

    assert [b.batch_id for b in outcome.batches] == [r.batch_id for r in results] and len(results) == 1
    assert sum(s.items for s in results[0].segments) == 8
    actual, tombstoned = destination_rows(emulators, sync)
    assert actual == source_items(workload) and not tombstoned
    (run,) = emr.job_runs()
    assert run["state"] == "SUCCESS"
    assert run["jobDriver"]["sparkSubmit"]["entryPoint"].endswith("/dynamodb_to_snowflake.py")


def test_a_failed_job_run_raises_with_its_state_details_and_the_driver_s_last_lines(
    emr: EmrServerless, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = unique("emr/missing")
    monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONN.upper()}", spark_connection(missing))
    table = unique("EMR_FAILED").replace("-", "_").upper()
    plan = BatchPlan(
        application_name="emr-failed",
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
        spark_platform=emr.platform,
        aws_conn_id="aws_default",
        region_name=REGION,
    )

    with pytest.raises(AirflowException) as raised:
        spark.run_batch(plan, kinesis=KinesisStreamHook(aws_conn_id="aws_default"), snowflake=KinesisSnowflakeHook())

    (run,) = emr.job_runs()
    message = str(raised.value)
    assert f"job run {run['jobRunId']} of application {emr.application_id} ended FAILED" in message
    # EMR Serverless's state details, then what the driver wrote last, read from its log on S3.
    assert (
        "ExitCode: 1" in message and "Last few exceptions: botocore.errorfactory.ResourceNotFoundException" in message
    )
    assert "SPARK_DRIVER/stdout.gz" in message
    assert "ResourceNotFoundException" in message.split("Its driver's last", 1)[1]
    assert "GetSecretValue" in message


def test_on_kill_cancels_the_job_run_and_its_processes_end(emr: EmrServerless, tmp_path: Path) -> None:
    emulators = emr.emulators
    stream, app = unique("emr-kill"), unique("emr-kill-app")
    table = "EMR_KILL_" + app.split("-")[-1].upper()
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
        spark_platform=emr.platform,
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
        if [r for r in emr.job_runs() if r["state"] == "RUNNING"]:
            running.set()
    assert running.is_set(), raised

    ingest.on_kill()
    task.join(timeout=300)

    (run,) = emr.job_runs()
    assert run["state"] == "CANCELLED"
    assert [type(err) for err in raised] == [AirflowException]
    assert "ended CANCELLED" in str(raised[0])
    processes = psutil.process_iter(["pid", "cmdline"])
    alive = [p.info["pid"] for p in processes if run["jobRunId"] in " ".join(p.info["cmdline"] or [])]
    assert alive == []
