"""A Kinesis connector on EMR Serverless: its ingest DAG, as the factory builds it from the connector file,
loads a batch through a job run of the emulated EMR Serverless, each record once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.operators.lease_table import CreateLeaseTableOperator
from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.integration.hooks.test_emr_serverless import ROLE, emr_serverless, spark_connection
from tests.integration.test_ingest_dag import write_connector

pytestmark = pytest.mark.integration


def test_the_ingest_dag_loads_a_batch_as_an_emr_serverless_job_run_each_record_once(
    aws_connections: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    emulators = aws_connections
    emr = emr_serverless(emulators)
    stream, app = unique("emr"), unique("emr-app")
    table = "EMR_" + app.split("-")[-1].upper()
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    put_json(create_stream(emulators, stream, 2), stream, [{"id": i} for i in range(20)])
    CreateLeaseTableOperator(task_id="lease_table", application_name=app, stream_name=stream).execute(context={})
    connector = {
        "connector_id": app.replace("-", "_"),
        "source": {"stream_name": stream, "region": "us-east-1", "application_name": app},
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "batch": {"schedule": None, "retries": 0},
        "spark": {
            "platform": "emr_serverless",
            "emr_serverless": {
                "application_id": emr.application_id,
                "execution_role_arn": ROLE,
                "artifacts": f"s3://{emr.bucket}/jobs",
                "poll_seconds": 1,
            },
        },
    }
    dag_file = write_connector(tmp_path / "dags", connector)
    # The Spark connection holds only how the driver gets its credentials; the worker has no Spark to run.
    env = {**dag_env, "AIRFLOW_CONN_SPARK_DEFAULT": spark_connection(emr.secret_id)}

    proc = run_dag(f"kinesis_snowflake_{connector['connector_id']}_ingest", env, dag_file=dag_file)

    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    assert [r[0] for r in query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table} ORDER BY ID")] == list(range(20))
    # Each shard's checkpoint moved past what was loaded: the next batch reads on from there.
    leases = LeaseTable(emulators.boto3_client("dynamodb"), app).leases()
    assert len(leases) == 2 and all(lease.checkpoint for lease in leases.values())
    (run,) = emr.job_runs()
    assert (run["state"], run["executionRole"]) == ("SUCCESS", ROLE)
    assert f"EMR Serverless job run {run['jobRunId']} of application {emr.application_id} started" in output
    driver = run["jobDriver"]["sparkSubmit"]
    # The entry point and the package zip, each under the hash of its bytes.
    prefix = f"s3://{emr.bucket}/jobs/sha256-"
    assert driver["entryPoint"].startswith(prefix) and driver["entryPoint"].endswith("/kinesis_to_snowflake.py")
    assert f"--py-files {prefix}" in driver["sparkSubmitParameters"]
    # The job was told which secret to read; no credential of this worker is in the job run.
    arguments = driver["entryPointArguments"]
    assert arguments[arguments.index("--snowflake-connection-ref") + 1] == emr.secret_id
    shown = json.dumps(run, default=str)
    assert '"snow"' not in shown and "testing" not in shown and "SNOWFLAKE_CONNECTION_JSON" not in shown
