"""The connector file's ``spark.platform`` reaches the tasks that run the Spark job, of both sources."""

from __future__ import annotations

from pathlib import Path

import yaml

from airflow_kinesis_snowflake.config import load_connector_config
from airflow_kinesis_snowflake.dags import build_dynamodb_sync_dag, build_ingest_dag
from tests.unit.test_dags import CONNECTOR
from tests.unit.test_dags_dynamodb import config, task, with_

EMR = {
    "application_id": "00fabc123",
    "execution_role_arn": "arn:aws:iam::123456789012:role/orders-emr-job",
    "artifacts": "s3://jobs-bucket/orders",
}
PLATFORM = {"platform": "emr_serverless", **EMR, "poll_seconds": 30}


def test_the_ingest_task_runs_its_job_on_the_connector_s_platform(tmp_path: Path) -> None:
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump({**CONNECTOR, "spark": {"platform": "emr_serverless", "emr_serverless": EMR}}))
    ingest = task(build_ingest_dag(load_connector_config(path)), "ingest")
    assert ingest.spark_platform == PLATFORM
    path.write_text(yaml.safe_dump(CONNECTOR))
    assert task(build_ingest_dag(load_connector_config(path)), "ingest").spark_platform is None


def test_each_table_s_sync_task_runs_its_job_on_the_connector_s_platform() -> None:
    sync = task(
        build_dynamodb_sync_dag(config(with_("spark", platform="emr_serverless", emr_serverless=EMR))), "sync_table"
    )
    assert sync.partial_kwargs["spark_platform"] == PLATFORM
    assert task(build_dynamodb_sync_dag(config()), "sync_table").partial_kwargs["spark_platform"] is None


GLUE = {
    "job_name": "orders-to-snowflake",
    "role_arn": "arn:aws:iam::123456789012:role/orders-glue-job",
    "artifacts": "s3://jobs-bucket/glue",
}
GLUE_PLATFORM = {
    "platform": "glue",
    **GLUE,
    "worker_type": "G.1X",
    "number_of_workers": 2,
    "glue_version": "5.0",
    "max_concurrent_runs": 1,
    "additional_python_modules": [],
    "poll_seconds": 30,
}


def test_the_ingest_and_sync_tasks_run_their_job_on_glue_when_the_connector_says_so(tmp_path: Path) -> None:
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump({**CONNECTOR, "spark": {"platform": "glue", "glue": GLUE}}))
    assert task(build_ingest_dag(load_connector_config(path)), "ingest").spark_platform == GLUE_PLATFORM
    sync = task(build_dynamodb_sync_dag(config(with_("spark", platform="glue", glue=GLUE))), "sync_table")
    assert sync.partial_kwargs["spark_platform"] == GLUE_PLATFORM


DATABRICKS = {"new_cluster": {"spark_version": "16.4.x-scala2.12", "num_workers": 2}, "artifacts": "dbfs:/jobs/orders"}
DATABRICKS_PLATFORM = {
    "platform": "databricks",
    "databricks_conn_id": "databricks_default",
    **DATABRICKS,
    "libraries": [],
    "poll_seconds": 30,
}


def test_the_ingest_and_sync_tasks_run_their_job_on_databricks_when_the_connector_says_so(tmp_path: Path) -> None:
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump({**CONNECTOR, "spark": {"platform": "databricks", "databricks": DATABRICKS}}))
    assert task(build_ingest_dag(load_connector_config(path)), "ingest").spark_platform == DATABRICKS_PLATFORM
    sync = task(
        build_dynamodb_sync_dag(config(with_("spark", platform="databricks", databricks=DATABRICKS))), "sync_table"
    )
    assert sync.partial_kwargs["spark_platform"] == DATABRICKS_PLATFORM
