"""A Kinesis connector on Databricks: its ingest DAG, as the factory builds it from the connector file,
loads a batch through a one-time run on an existing cluster of the emulated workspace, each record once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.operators.lease_table import CreateLeaseTableOperator
from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.emulators.databricks import Databricks
from tests.integration.hooks.test_databricks import workspace
from tests.integration.hooks.test_emr_serverless import spark_connection
from tests.integration.test_ingest_dag import write_connector

pytestmark = pytest.mark.integration


def test_the_ingest_dag_loads_a_batch_as_a_databricks_run_each_record_once(
    aws_connections: Emulators, databricks: Databricks, dag_env: dict[str, str], tmp_path: Path
) -> None:
    emulators = aws_connections
    dbx = workspace(emulators, databricks)
    stream, app = unique("dbx"), unique("dbx-app")
    table = "DBX_" + app.split("-")[-1].upper()
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    put_json(create_stream(emulators, stream, 2), stream, [{"id": i} for i in range(20)])
    CreateLeaseTableOperator(task_id="lease_table", application_name=app, stream_name=stream).execute(context={})
    artifacts = f"{dbx.volume}/kinesis-snowflake"
    connector = {
        "connector_id": app.replace("-", "_"),
        "source": {"stream_name": stream, "region": "us-east-1", "application_name": app},
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "batch": {"schedule": None, "retries": 0},
        "spark": {
            "platform": "databricks",
            "databricks": {"existing_cluster_id": dbx.cluster_id, "artifacts": artifacts, "poll_seconds": 1},
        },
    }
    dag_file = write_connector(tmp_path / "dags", connector)
    # The Spark connection holds only how the driver gets its credentials; the worker has no Spark to run.
    env = {
        **dag_env,
        "AIRFLOW_CONN_SPARK_DEFAULT": spark_connection(dbx.secret_id),
        "AIRFLOW_CONN_DATABRICKS_DEFAULT": json.dumps(databricks.connection()),
    }

    proc = run_dag(f"kinesis_snowflake_{connector['connector_id']}_ingest", env, dag_file=dag_file)

    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    assert [r[0] for r in query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table} ORDER BY ID")] == list(range(20))
    # Each shard's checkpoint moved past what was loaded: the next batch reads on from there.
    leases = LeaseTable(emulators.boto3_client("dynamodb"), app).leases()
    assert len(leases) == 2 and all(lease.checkpoint for lease in leases.values())
    run = dbx.run()
    assert (run["state"]["life_cycle_state"], run["state"]["result_state"]) == ("TERMINATED", "SUCCESS")
    assert f"Databricks run {run['run_id']} started on cluster {dbx.cluster_id}" in output
    (task,) = run["tasks"]
    assert task["existing_cluster_id"] == dbx.cluster_id and "new_cluster" not in task
    # The entry point and the package wheel in the volume, each under the hash of its bytes.
    python = task["spark_python_task"]
    assert python["python_file"].startswith(f"{artifacts}/sha256-")
    assert python["python_file"].endswith("/kinesis_to_snowflake.py")
    assert [library["whl"].startswith(f"{artifacts}/sha256-") for library in task["libraries"]] == [True]
    assert databricks.files(artifacts) == sorted([python["python_file"], task["libraries"][0]["whl"]])
    # The job was told which secret to read; no credential of this worker is in the run.
    arguments = python["parameters"]
    assert arguments[arguments.index("--snowflake-connection-ref") + 1] == dbx.secret_id
    shown = json.dumps(run)
    assert '"snow"' not in shown and "testing" not in shown and "SNOWFLAKE_CONNECTION_JSON" not in shown
