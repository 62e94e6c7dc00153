"""The connector file's ``spark.platform``: spark-submit by default, or EMR Serverless, AWS Glue or Databricks
with its section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.config import load_connector_config
from tests.unit.test_config import _load_error, _with, _write

ROLE = "arn:aws:iam::123456789012:role/orders-emr-job"
EMR = {"application_id": "00fabcdefghijklm", "execution_role_arn": ROLE, "artifacts": "s3://orders-jobs/kinesis/"}
GLUE_ROLE = "arn:aws:iam::123456789012:role/orders-glue-job"
GLUE = {"job_name": "orders-kinesis-to-snowflake", "role_arn": GLUE_ROLE, "artifacts": "s3://orders-jobs/glue/"}
CLUSTER_ID = "0123-456789-abcdefgh"
DATABRICKS = {"existing_cluster_id": CLUSTER_ID, "artifacts": "/Volumes/main/jobs/artifacts/orders/"}
NEW_CLUSTER = {
    "spark_version": "15.4.x-scala2.12",
    "node_type_id": "m5d.large",
    "num_workers": 2,
    "aws_attributes": {"instance_profile_arn": "arn:aws:iam::123456789012:instance-profile/orders-job"},
}


def _spark(section: dict[str, Any]) -> dict[str, Any]:
    return _with(lambda data: data.update(spark=section))


def test_spark_submit_is_the_platform_by_default_and_gives_the_operators_no_platform(tmp_path: Path) -> None:
    spark = load_connector_config(_write(tmp_path, _spark({}))).spark
    assert (spark.platform, spark.emr_serverless, spark.platform_arguments()) == ("spark_submit", None, None)


def test_emr_serverless_settings_reach_the_operators_with_the_shared_spark_settings(tmp_path: Path) -> None:
    section = {
        "platform": "emr_serverless",
        "emr_serverless": {**EMR, "execution_timeout_minutes": 60, "poll_seconds": 5},
        "executor_memory": "4g",
        "conf": {"spark.emr-serverless.executor.disk": "30g"},
    }
    spark = load_connector_config(_write(tmp_path, _spark(section))).spark
    assert spark.platform_arguments() == {
        "platform": "emr_serverless",
        "application_id": "00fabcdefghijklm",
        "execution_role_arn": ROLE,
        "artifacts": "s3://orders-jobs/kinesis",  # without the trailing slash
        "execution_timeout_minutes": 60,
        "poll_seconds": 5,
    }
    assert spark.submit_arguments() == {"executor_memory": "4g"}
    assert spark.spark_conf() == {"spark.emr-serverless.executor.disk": "30g"}


@pytest.mark.parametrize(
    ("section", "field", "shown", "fix"),
    [
        (
            {"platform": "dataproc"},
            "spark.platform",
            "'dataproc'",
            "one of spark_submit, emr_serverless, glue, databricks",
        ),
        ({"platform": "emr_serverless"}, "spark", "needs the spark.emr_serverless section", "execution_role_arn"),
        ({"emr_serverless": EMR}, "spark", "spark.platform is spark_submit", "set spark.platform: emr_serverless"),
        (
            {"platform": "emr_serverless", "emr_serverless": EMR, "deploy_mode": "cluster", "queue": "q"},
            "spark",
            "spark.deploy_mode, spark.queue: spark-submit's only",
            "remove them",
        ),
        (
            {"platform": "emr_serverless", "emr_serverless": {**EMR, "application_id": "App 1"}},
            "spark.emr_serverless.application_id",
            "'App 1'",
            "list-applications",
        ),
        (
            {"platform": "emr_serverless", "emr_serverless": {**EMR, "execution_role_arn": "orders-emr-job"}},
            "spark.emr_serverless.execution_role_arn",
            "'orders-emr-job'",
            "arn:aws:iam::<account>:role/<name>",
        ),
        (
            {"platform": "emr_serverless", "emr_serverless": {**EMR, "artifacts": "/tmp/jobs"}},
            "spark.emr_serverless.artifacts",
            "'/tmp/jobs'",
            "s3://<bucket>/<prefix>",
        ),
        (
            {"platform": "emr_serverless", "emr_serverless": {**EMR, "execution_timeout_minutes": 2}},
            "spark.emr_serverless.execution_timeout_minutes",
            "2",
            "from 5 to",
        ),
        (
            {"platform": "emr_serverless", "emr_serverless": {**EMR, "poll_seconds": 0}},
            "spark.emr_serverless.poll_seconds",
            "0",
            "from 1 to 300",
        ),
        (
            {"platform": "emr_serverless", "emr_serverless": {**EMR, "role": ROLE}},
            "spark.emr_serverless.role",
            "unknown field",
            "check its spelling",
        ),
        (
            {"platform": "emr_serverless", "emr_serverless": {"application_id": "00fabcdefghijklm"}},
            "spark.emr_serverless.execution_role_arn",
            "required",
            "",
        ),
        ({"platform": "glue"}, "spark", "needs the spark.glue section", "job_name, role_arn and artifacts"),
        ({"glue": GLUE}, "spark", "spark.platform is spark_submit", "set spark.platform: glue"),
        (
            {"platform": "glue", "glue": GLUE, "emr_serverless": EMR},
            "spark",
            "spark.emr_serverless is set but spark.platform is glue",
            "remove spark.emr_serverless",
        ),
        (
            {"platform": "glue", "glue": GLUE, "executor_memory": "4g", "pyspark_python": "python3"},
            "spark",
            "spark.executor_memory, spark.pyspark_python: on Glue the worker type",
            "choose spark.glue.worker_type and number_of_workers",
        ),
        ({"platform": "glue", "glue": {**GLUE, "glue_version": 4.0}}, "spark.glue.glue_version", "4.0", '"5.0"'),
        (
            {"platform": "glue", "glue": {**GLUE, "worker_type": "Standard"}},
            "spark.glue.worker_type",
            "'Standard'",
            "G.1X",
        ),
        ({"platform": "glue", "glue": {**GLUE, "number_of_workers": 1}}, "spark.glue.number_of_workers", "1", "from 2"),
        (
            {"platform": "glue", "glue": {**GLUE, "timeout_minutes": 3000}},
            "spark.glue.timeout_minutes",
            "3000",
            "from 1 to 2,880",
        ),
        (
            {"platform": "glue", "glue": {**GLUE, "role_arn": "orders-glue"}},
            "spark.glue.role_arn",
            "'orders-glue'",
            "arn:aws:iam::",
        ),
        (
            {"platform": "glue", "glue": {**GLUE, "artifacts": "jobs"}},
            "spark.glue.artifacts",
            "'jobs'",
            "s3://<bucket>/<prefix>",
        ),
        (
            {"platform": "glue", "glue": {**GLUE, "additional_python_modules": ["orjson,tenacity"]}},
            "spark.glue.additional_python_modules",
            "'orjson,tenacity'",
            "one pip requirement or S3 wheel per item",
        ),
        ({"platform": "glue", "glue": {**GLUE, "job_name": "a\nb"}}, "spark.glue.job_name", "'a\\nb'", "1 to 255"),
        (
            {"platform": "databricks"},
            "spark",
            "needs the spark.databricks section",
            "existing_cluster_id or new_cluster",
        ),
        ({"databricks": DATABRICKS}, "spark", "spark.platform is spark_submit", "set spark.platform: databricks"),
        (
            {"platform": "databricks", "databricks": {"artifacts": "dbfs:/jobs"}},
            "spark.databricks",
            "neither of existing_cluster_id and new_cluster",
            "one of them",
        ),
        (
            {"platform": "databricks", "databricks": {**DATABRICKS, "new_cluster": NEW_CLUSTER}},
            "spark.databricks",
            "both of existing_cluster_id and new_cluster",
            "one of them",
        ),
        (
            {"platform": "databricks", "databricks": {**DATABRICKS, "existing_cluster_id": "orders"}},
            "spark.databricks.existing_cluster_id",
            "'orders'",
            "0123-456789-abcdefgh",
        ),
        (
            {"platform": "databricks", "databricks": {**DATABRICKS, "artifacts": "s3://orders-jobs/kinesis"}},
            "spark.databricks.artifacts",
            "'s3://orders-jobs/kinesis'",
            "dbfs:/<path> or, in a Unity Catalog volume, /Volumes/<catalog>/<schema>/<volume>/<path>",
        ),
        (
            {"platform": "databricks", "databricks": {**DATABRICKS, "artifacts": "/Volumes/main/jobs"}},
            "spark.databricks.artifacts",
            "'/Volumes/main/jobs'",
            "/Volumes/<catalog>/<schema>/<volume>",
        ),
        (
            {
                "platform": "databricks",
                "databricks": {
                    "artifacts": "dbfs:/jobs",
                    "new_cluster": {**NEW_CLUSTER, "spark_version": "14.3.x-scala2.12"},
                },
            },
            "spark.databricks.new_cluster",
            "spark_version '14.3.x-scala2.12': the job needs Python 3.11 and Spark 3.5 or 4",
            "choose 15.4.x-scala2.12 or later",
        ),
        (
            {"platform": "databricks", "databricks": {"artifacts": "dbfs:/jobs", "new_cluster": {"num_workers": 1}}},
            "spark.databricks.new_cluster",
            "spark_version None",
            "e.g. 15.4.x-scala2.12",
        ),
        (
            {"platform": "databricks", "databricks": {**DATABRICKS, "timeout_minutes": 0}},
            "spark.databricks.timeout_minutes",
            "0",
            "32-bit number of seconds",
        ),
        (
            {"platform": "databricks", "databricks": {**DATABRICKS, "poll_seconds": 301}},
            "spark.databricks.poll_seconds",
            "301",
            "from 1 to 300",
        ),
        (
            {"platform": "databricks", "databricks": {**DATABRICKS, "libraries": [" "]}},
            "spark.databricks.libraries",
            "' '",
            "one pip requirement per item",
        ),
        (
            {"platform": "databricks", "databricks": DATABRICKS, "executor_memory": "4g"},
            "spark",
            "spark.executor_memory: on Databricks the cluster's node types size the driver and executors",
            "spark.databricks.new_cluster",
        ),
        (
            {"platform": "databricks", "databricks": DATABRICKS, "conf": {"spark.sql.shuffle.partitions": 8}},
            "spark",
            "spark.conf: a run on an existing cluster (spark.databricks.existing_cluster_id) has the cluster's Spark",
            "set them in the cluster's Spark config, or run on spark.databricks.new_cluster",
        ),
    ],
)
def test_a_wrong_platform_setting_names_file_field_value_and_fix(
    tmp_path: Path, section: dict[str, Any], field: str, shown: str, fix: str
) -> None:
    message = _load_error(tmp_path, _spark(section))
    assert f"  - {field}:" in message
    assert shown in message
    assert fix in message


def test_a_credential_in_an_emr_serverless_driver_environment_setting_is_refused(tmp_path: Path) -> None:
    key = "spark.emr-serverless.driverEnv.SNOWFLAKE_PASSWORD"
    section = {"platform": "emr_serverless", "emr_serverless": EMR, "conf": {key: "s3cr3t-value"}}
    message = _load_error(tmp_path, _spark(section))
    assert "  - spark.conf:" in message and repr(key) in message and "credential" in message
    assert "s3cr3t-value" not in message


def test_glue_settings_reach_the_operators_with_glue_s_defaults(tmp_path: Path) -> None:
    section = {"platform": "glue", "glue": {**GLUE, "timeout_minutes": 90}, "conf": {"spark.sql.shuffle.partitions": 8}}
    spark = load_connector_config(_write(tmp_path, _spark(section))).spark
    assert spark.platform_arguments() == {
        "platform": "glue",
        "job_name": "orders-kinesis-to-snowflake",
        "role_arn": GLUE_ROLE,
        "artifacts": "s3://orders-jobs/glue",  # without the trailing slash
        "worker_type": "G.1X",
        "number_of_workers": 2,
        "glue_version": "5.0",
        "timeout_minutes": 90,
        "max_concurrent_runs": 1,
        "additional_python_modules": [],
        "poll_seconds": 30,
    }
    assert spark.spark_conf() == {"spark.sql.shuffle.partitions": "8"}


def test_databricks_settings_reach_the_operators_and_a_new_cluster_may_take_the_spark_settings(tmp_path: Path) -> None:
    section = {
        "platform": "databricks",
        "databricks": {"artifacts": "dbfs:/jobs/orders/", "new_cluster": NEW_CLUSTER, "timeout_minutes": 60},
        "conf": {"spark.sql.shuffle.partitions": 8},
        "log_level": "INFO",
    }
    spark = load_connector_config(_write(tmp_path, _spark(section))).spark
    assert spark.platform_arguments() == {
        "platform": "databricks",
        "databricks_conn_id": "databricks_default",
        "new_cluster": NEW_CLUSTER,
        "artifacts": "dbfs:/jobs/orders",  # without the trailing slash
        "libraries": [],
        "timeout_minutes": 60,
        "poll_seconds": 30,
    }
    assert spark.spark_conf() == {"spark.sql.shuffle.partitions": "8", "spark.log.level": "INFO"}


def test_a_credential_in_a_new_cluster_s_environment_is_refused_unless_it_references_a_databricks_secret(
    tmp_path: Path,
) -> None:
    env = {"SNOWFLAKE_PASSWORD": "s3cr3t-value", "AWS_SECRET_ACCESS_KEY": "{{secrets/aws/secret-key}}", "TZ": "UTC"}
    conf = {"spark.hadoop.fs.s3a.secret.key": "an0ther-s3cr3t", "spark.hadoop.fs.s3a.access.key": "{{secrets/aws/id}}"}
    cluster = {**NEW_CLUSTER, "spark_env_vars": env, "spark_conf": conf}
    section = {"platform": "databricks", "databricks": {"artifacts": "dbfs:/jobs", "new_cluster": cluster}}
    message = _load_error(tmp_path, _spark(section))
    assert "  - spark.databricks.new_cluster:" in message
    assert "spark_env_vars['SNOWFLAKE_PASSWORD'] would hold a credential" in message
    assert "{{secrets/<scope>/<key>}}" in message
    assert "spark_conf: key 'spark.hadoop.fs.s3a.secret.key' holds a secret" in message
    # The references to Databricks secrets are what to write; no value is shown.
    assert "AWS_SECRET_ACCESS_KEY" not in message and "access.key" not in message
    assert "s3cr3t-value" not in message and "an0ther-s3cr3t" not in message
