"""The connector file's ``spark:`` section reaches the ingest job's spark-submit command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.config import load_connector_config
from airflow_kinesis_snowflake.dags import build_ingest_dag
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from tests.unit.test_config import _with, _write


def _ingest_task(tmp_path: Path, spark: dict[str, Any] | None) -> SparkKinesisIngestOperator:
    data = _with(lambda d: d.update(spark=spark) if spark is not None else d.pop("spark", None))
    task = build_ingest_dag(load_connector_config(_write(tmp_path, data))).get_task("ingest")
    assert isinstance(task, SparkKinesisIngestOperator)
    return task


def _options(command: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The ``--flag value`` options and the ``--conf key=value`` settings of a spark-submit command."""
    flags: dict[str, str] = {}
    conf: dict[str, str] = {}
    application = command.index("job.py")
    for flag, value in zip(command[1:application:2], command[2:application:2], strict=True):
        if flag == "--conf":
            key, _, setting = value.partition("=")
            conf[key] = setting
        else:
            flags[flag] = value
    return flags, conf


@pytest.fixture
def standalone_master(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "spark://10.0.0.5", "port": 7077})
    )
    return "spark://10.0.0.5:7077"


def test_the_spark_section_reaches_the_spark_submit_command_line(tmp_path: Path, standalone_master: str) -> None:
    section = {
        "deploy_mode": "client",
        "executor_memory": "2g",
        "driver_memory": "1g",
        "executor_cores": 2,
        "total_executor_cores": 4,
        "num_executors": 3,
        "queue": "ingest",
        "pyspark_python": "/opt/executor-python/bin/python",
        "conf": {"spark.sql.shuffle.partitions": 8, "spark.dynamicAllocation.enabled": False},
    }
    hook = _ingest_task(tmp_path, section).build_spark_hook()
    command = hook._build_spark_submit_command("job.py")
    flags, conf = _options(command)
    assert flags == {
        "--master": standalone_master,
        "--num-executors": "3",
        "--total-executor-cores": "4",
        "--executor-cores": "2",
        "--executor-memory": "2g",
        "--driver-memory": "1g",
        "--deploy-mode": "client",
        "--name": "default-name",
        "--queue": "ingest",
    }
    assert conf == {
        "spark.sql.shuffle.partitions": "8",
        "spark.dynamicAllocation.enabled": "false",
        "spark.pyspark.python": "/opt/executor-python/bin/python",
    }
    assert hook.deploy_mode == "client"


def test_without_the_section_spark_submit_gets_only_the_master(tmp_path: Path, standalone_master: str) -> None:
    hook = _ingest_task(tmp_path, None).build_spark_hook()
    flags, conf = _options(hook._build_spark_submit_command("job.py"))
    assert flags == {"--master": standalone_master, "--name": "default-name"}
    assert conf == {}


def test_the_sections_deploy_mode_overrides_the_connections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, standalone_master: str
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT",
        json.dumps(
            {"conn_type": "spark", "host": "spark://10.0.0.5", "port": 7077, "extra": {"deploy-mode": "cluster"}}
        ),
    )
    assert _ingest_task(tmp_path, None).build_spark_hook().deploy_mode == "cluster"
    assert _ingest_task(tmp_path, {"deploy_mode": "client"}).build_spark_hook().deploy_mode == "client"


def test_template_fields_are_exactly_the_run_time_values() -> None:
    """The Spark sizes are not templated, as in the Spark provider's SparkSubmitOperator; ``spark_conf`` is."""
    assert tuple(SparkKinesisIngestOperator.template_fields) == (
        "stream_name",
        "application_name",
        "database",
        "schema",
        "table",
        "initial_timestamp",
        "aws_conn_id",
        "region_name",
        "snowflake_conn_id",
        "spark_conn_id",
        "spark_conf",
    )


def test_an_unknown_spark_submit_argument_is_refused_naming_it_and_those_allowed() -> None:
    with pytest.raises(ValueError, match=r"spark_submit: executor_mem not among deploy_mode, executor_memory"):
        SparkKinesisIngestOperator(
            task_id="ingest",
            stream_name="s",
            application_name="app",
            database="d",
            schema="s",
            table="t",
            spark_submit={"executor_mem": "2g"},
        )


def test_the_section_gives_the_hook_only_the_arguments_it_sets(tmp_path: Path) -> None:
    task = _ingest_task(tmp_path, {"executor_memory": "2g", "queue": "ingest"})
    assert task.spark_submit == {"executor_memory": "2g", "yarn_queue": "ingest"}
    assert _ingest_task(tmp_path, None).spark_submit == {}


def test_spark_conf_given_to_the_operator_is_checked_as_the_connector_files_is(tmp_path: Path) -> None:
    task = _ingest_task(tmp_path, None)
    task.spark_conf = {"spark.kubernetes.authenticate.driver.oauthToken": "s3cr3t-value"}
    with pytest.raises(ValueError, match=r"spark_conf of task 'ingest': key 'spark\.kubernetes") as raised:
        task.build_spark_hook()
    assert "s3cr3t-value" not in str(raised.value)
