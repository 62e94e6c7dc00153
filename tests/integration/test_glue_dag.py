"""A Kinesis connector on AWS Glue: its ingest DAG, as the factory builds it from the connector file,
defines the Glue job and loads a batch through a run of it on the emulated Glue, each record once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.operators.lease_table import CreateLeaseTableOperator
from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.integration.hooks.test_emr_serverless import spark_connection
from tests.integration.hooks.test_glue import ROLE, glue
from tests.integration.test_ingest_dag import write_connector

pytestmark = pytest.mark.integration


def test_the_ingest_dag_loads_a_batch_as_a_glue_job_run_each_record_once(
    aws_connections: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    emulators = aws_connections
    platform = glue(emulators)
    stream, app = unique("glue"), unique("glue-app")
    table = "GLUE_" + app.split("-")[-1].upper()
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    put_json(create_stream(emulators, stream, 2), stream, [{"id": i} for i in range(20)])
    CreateLeaseTableOperator(task_id="lease_table", application_name=app, stream_name=stream).execute(context={})
    connector = {
        "connector_id": app.replace("-", "_"),
        "source": {"stream_name": stream, "region": "us-east-1", "application_name": app},
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "batch": {"schedule": None, "retries": 0},
        "spark": {
            "platform": "glue",
            "glue": {
                "job_name": platform.job_name,
                "role_arn": ROLE,
                "artifacts": f"s3://{platform.bucket}/jobs",
                "worker_type": "G.2X",
                "number_of_workers": 3,
                "poll_seconds": 1,
            },
        },
    }
    dag_file = write_connector(tmp_path / "dags", connector)
    # The Spark connection holds only how the driver gets its credentials; the worker has no Spark to run.
    env = {**dag_env, "AIRFLOW_CONN_SPARK_DEFAULT": spark_connection(platform.secret_id)}

    proc = run_dag(f"kinesis_snowflake_{connector['connector_id']}_ingest", env, dag_file=dag_file)

    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    assert [r[0] for r in query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table} ORDER BY ID")] == list(range(20))
    # Each shard's checkpoint moved past what was loaded: the next batch reads on from there.
    leases = LeaseTable(emulators.boto3_client("dynamodb"), app).leases()
    assert len(leases) == 2 and all(lease.checkpoint for lease in leases.values())
    job = platform.job()
    assert (job["Role"], job["GlueVersion"], job["WorkerType"], job["NumberOfWorkers"]) == (ROLE, "5.0", "G.2X", 3)
    (run,) = platform.job_runs()
    assert run["JobRunState"] == "SUCCEEDED"
    assert f"Glue job run {run['Id']} of job {platform.job_name} started" in output
    # The script and the package zip, each under the hash of its bytes.
    prefix = f"s3://{platform.bucket}/jobs/sha256-"
    assert job["Command"]["ScriptLocation"].startswith(prefix)
    assert run["Arguments"]["--extra-py-files"].startswith(prefix)
    # The job was told which secret to read; no credential of this worker is in the job or its run.
    assert run["Arguments"]["--snowflake-connection-ref"] == platform.secret_id
    shown = json.dumps([job, run], default=str)
    assert '"snow"' not in shown and "testing" not in shown and "SNOWFLAKE_CONNECTION_JSON" not in shown
