"""AWS Glue from ``spark_platform``: what a Glue submission refuses before anything is uploaded or
submitted, the job run's arguments it sends, and how the Glue script finds the driver's arguments
among Glue's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.hooks.artifacts import SOURCE_APPLICATIONS
from airflow_kinesis_snowflake.hooks.glue import GLUE_APPLICATION, GLUE_ARGUMENTS_LIMIT, GlueSubmitter
from airflow_kinesis_snowflake.hooks.platforms import job_submit_hook
from airflow_kinesis_snowflake.hooks.spark import CLUSTER
from airflow_kinesis_snowflake.spark_jobs.glue_to_snowflake import driver_arguments

ROLE = "arn:aws:iam::123456789012:role/orders-glue-job"
PLATFORM = {
    "platform": "glue",
    "job_name": "orders-to-snowflake",
    "role_arn": ROLE,
    "artifacts": "s3://jobs-bucket/glue",
    "worker_type": "G.2X",
    "number_of_workers": 4,
    "glue_version": "5.0",
}
IDENTITY = {"driver_identity": True, "snowflake_connection_ref": "kinesis/snowflake"}
ZIP = "s3://jobs-bucket/glue/sha256-1/kinesis_snowflake_core.zip"


def hook(monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any], **spark: Any) -> Any:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_GLUE", json.dumps({"conn_type": "kinesis_snowflake_spark", "extra": extra}))
    arguments: dict[str, Any] = {"conf": None, "spark_submit": {}, "spark_platform": PLATFORM, **spark}
    return job_submit_hook(conn_id="spark_glue", aws_conn_id="aws_unit", region_name="eu-west-1", **arguments)


def test_spark_platform_glue_runs_the_job_as_a_glue_job_of_the_connector_s_definition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spark = hook(monkeypatch, IDENTITY)
    assert isinstance(spark.submitter, GlueSubmitter) and spark.deploy_mode == CLUSTER
    glue = spark.submitter.glue("s3://jobs-bucket/glue/sha256-2/glue_to_snowflake.py")
    config = glue.create_glue_job_config()
    assert (config["Name"], config["Role"], config["MaxRetries"]) == ("orders-to-snowflake", ROLE, 0)
    assert (config["GlueVersion"], config["WorkerType"], config["NumberOfWorkers"]) == ("5.0", "G.2X", 4)
    assert config["Command"] == {
        "Name": "glueetl",
        "ScriptLocation": "s3://jobs-bucket/glue/sha256-2/glue_to_snowflake.py",
        "PythonVersion": "3",
    }
    assert "MaxCapacity" not in config  # the worker type and number size the job
    assert glue.update_config  # the task keeps the job's definition its own


def test_a_connection_without_the_driver_s_identity_is_refused_before_anything_is_submitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spark = hook(monkeypatch, {})
    with pytest.raises(AirflowException) as raised:
        spark.check_submission()
    message = str(raised.value)
    assert "Spark connection 'spark_glue' (connections.spark of the connector file)" in message
    assert f"spark.platform glue runs the driver as the Glue job's role {ROLE}" in message
    assert '"driver_identity": true and "snowflake_connection_ref"' in message
    assert "nothing was submitted" in message and "spark/#aws-glue" in message


def test_the_run_s_arguments_hold_the_job_s_the_zip_the_settings_and_where_aws_is_but_no_credential(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spark = hook(monkeypatch, IDENTITY, conf={"spark.sql.shuffle.partitions": "8"})
    location = {"AWS_DEFAULT_REGION": "eu-west-1", "AWS_ENDPOINT_URL_KINESIS": "https://kinesis.example"}
    job = ["--plan", "eNo-plan", "--attempt", "a-1", "--snowflake-connection-ref", "kinesis/snowflake"]

    arguments = spark.submitter.run_arguments(spark, job, ZIP, location)

    assert arguments == {
        "--plan": "eNo-plan",
        "--attempt": "a-1",
        "--snowflake-connection-ref": "kinesis/snowflake",
        "--extra-py-files": ZIP,
        "--driver-env": json.dumps(location, sort_keys=True),
        "--conf": "spark.sql.shuffle.partitions=8 --conf spark.log.level=WARN"
        " --conf spark.executorEnv.AWS_DEFAULT_REGION=eu-west-1"
        " --conf spark.executorEnv.AWS_ENDPOINT_URL_KINESIS=https://kinesis.example",
    }


def test_the_libraries_glue_lacks_are_installed_through_additional_python_modules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    modules = ["snowflake-connector-python>=3.17", "orjson>=3.11.7"]
    spark = hook(monkeypatch, IDENTITY, spark_platform={**PLATFORM, "additional_python_modules": modules})
    arguments = spark.submitter.run_arguments(spark, ["--plan", "eNo-plan"], ZIP, {})
    assert arguments["--additional-python-modules"] == "snowflake-connector-python>=3.17,orjson>=3.11.7"


def test_job_arguments_larger_than_glue_takes_are_refused_before_anything_is_uploaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spark = hook(monkeypatch, IDENTITY)
    plan = "x" * GLUE_ARGUMENTS_LIMIT
    label = f"<plan of batch b: {len(plan)} characters>"

    with pytest.raises(AirflowException) as raised:  # no S3 nor Glue call: no AWS connection aws_unit here
        spark.submitter.submit(
            spark, SOURCE_APPLICATIONS["kinesis"], ["--plan", plan], name="j", label=label, location={}
        )

    message = str(raised.value)
    assert message.startswith(f"{label} with the run's other arguments (")
    assert f"is longer than the {GLUE_ARGUMENTS_LIMIT:,} bytes Glue takes in one job run's arguments" in message
    assert "batch.max_shards_per_batch" in message and "nothing was submitted" in message
    assert spark.submitter.job_run_id is None


def test_on_kill_before_a_job_run_started_stops_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    spark = hook(monkeypatch, IDENTITY)
    spark.on_kill()  # no job run, no call to Glue (no AWS connection aws_unit here)
    assert spark.submitter.job_run_id is None


def test_the_sources_entry_points_run_through_the_glue_script_another_file_is_the_script() -> None:
    assert {GlueSubmitter.script(application) for application in SOURCE_APPLICATIONS.values()} == {GLUE_APPLICATION}
    assert GlueSubmitter.script("/opt/jobs/mine.py") == "/opt/jobs/mine.py"


def test_the_glue_script_keeps_the_driver_s_arguments_among_glue_s_and_reads_the_driver_s_environment() -> None:
    argv = [
        "--JOB_ID", "j_1", "--JOB_RUN_ID", "jr_1", "--JOB_NAME", "orders",
        "--job-bookmark-option", "job-bookmark-disable",
        "--conf", "spark.log.level=WARN --conf spark.executorEnv.AWS_DEFAULT_REGION=eu-west-1",
        "--extra-py-files", ZIP, "--plan", "eNo-plan", "--attempt", "a-1",
        "--snowflake-connection-ref", "kinesis/snowflake", "--driver-env", '{"AWS_DEFAULT_REGION": "eu-west-1"}',
    ]  # fmt: skip

    arguments, environment = driver_arguments(argv)

    assert arguments == ["--plan", "eNo-plan", "--attempt", "a-1", "--snowflake-connection-ref", "kinesis/snowflake"]
    assert environment == {"AWS_DEFAULT_REGION": "eu-west-1"}
