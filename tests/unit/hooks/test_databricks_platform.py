"""Databricks from ``spark_platform``: what a Databricks submission refuses before anything is uploaded
or submitted, the one-time run it asks for (runs/submit) on an existing or a new cluster, and the
package as the wheel the cluster installs."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.hooks.databricks import DatabricksSubmitter, package_wheel
from airflow_kinesis_snowflake.hooks.managed import Submission
from airflow_kinesis_snowflake.hooks.platforms import job_submit_hook
from airflow_kinesis_snowflake.hooks.spark import CLUSTER, package_core

CLUSTER_ID = "0123-456789-abcdefgh"
EXISTING = {"platform": "databricks", "existing_cluster_id": CLUSTER_ID, "artifacts": "/Volumes/main/jobs/a/orders"}
NEW_CLUSTER = {
    "spark_version": "15.4.x-scala2.12",
    "node_type_id": "m5d.large",
    "num_workers": 2,
    "aws_attributes": {"instance_profile_arn": "arn:aws:iam::123456789012:instance-profile/orders-job"},
    "spark_conf": {"spark.sql.shuffle.partitions": "4"},
    "spark_env_vars": {"TZ": "UTC"},
}
IDENTITY = {"driver_identity": True, "snowflake_connection_ref": "kinesis/snowflake"}
ARGUMENTS = ["--plan", "<encoded>", "--attempt", "a1", "--snowflake-connection-ref", "kinesis/snowflake"]
LOCATION = {"AWS_DEFAULT_REGION": "eu-west-1", "AWS_ENDPOINT_URL_KINESIS": "https://kinesis.example"}


def hook(monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any], platform: dict[str, Any], **spark: Any) -> Any:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DBX", json.dumps({"conn_type": "kinesis_snowflake_spark", "extra": extra}))
    arguments: dict[str, Any] = {"conf": None, "spark_submit": {}, "spark_platform": platform, **spark}
    return job_submit_hook(conn_id="spark_dbx", aws_conn_id="aws_unit", region_name="eu-west-1", **arguments)


def submission(spark: Any) -> Submission:
    return Submission(spark, "kinesis_to_snowflake.py", ARGUMENTS, "kinesis-to-snowflake-orders", "<plan>", LOCATION)


def test_spark_platform_databricks_runs_the_driver_on_the_connector_s_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    spark = hook(monkeypatch, IDENTITY, EXISTING)
    assert isinstance(spark.submitter, DatabricksSubmitter) and spark.deploy_mode == CLUSTER
    assert (spark.submitter.existing_cluster_id, spark.submitter.databricks_conn_id) == (
        CLUSTER_ID,
        "databricks_default",
    )
    spark.check_submission()  # no spark-submit needed on this worker


def test_a_connection_without_the_driver_s_identity_is_refused_before_anything_is_submitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spark = hook(monkeypatch, {}, EXISTING)
    with pytest.raises(AirflowException) as raised:
        spark.check_submission()
    message = str(raised.value)
    assert (
        "Spark connection 'spark_dbx' (connections.spark of the connector file): spark.platform databricks" in message
    )
    assert f"the AWS identity of cluster {CLUSTER_ID} (its instance profile)" in message
    assert '"driver_identity": true and "snowflake_connection_ref"' in message
    assert "nothing was submitted" in message and "spark/#databricks" in message


def test_a_run_on_an_existing_cluster_runs_the_entry_point_with_the_package_wheel_and_the_cluster_s_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    platform = {**EXISTING, "libraries": ["snowflake-connector-python>=3.17"], "timeout_minutes": 90}
    spark = hook(monkeypatch, IDENTITY, platform)
    request = spark.submitter.run_request(spark, submission(spark), "/Volumes/x/entry.py", "/Volumes/x/core.whl")

    (task,) = request.pop("tasks")
    assert len(request.pop("idempotency_token")) == 32  # one per submission: a retried call starts no second run
    assert request == {"run_name": "kinesis-to-snowflake-orders", "timeout_seconds": 5400}
    assert task == {
        "task_key": "kinesis_snowflake",
        "existing_cluster_id": CLUSTER_ID,
        "spark_python_task": {"python_file": "/Volumes/x/entry.py", "parameters": ARGUMENTS},
        "libraries": [{"whl": "/Volumes/x/core.whl"}, {"pypi": {"package": "snowflake-connector-python>=3.17"}}],
    }


def test_a_new_cluster_gets_the_spark_settings_and_where_aws_is_but_no_credential(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    platform = {"platform": "databricks", "new_cluster": NEW_CLUSTER, "artifacts": "dbfs:/jobs"}
    spark = hook(monkeypatch, IDENTITY, platform, conf={"spark.log.level": "INFO", "spark.sql.ansi.enabled": "true"})
    request = spark.submitter.run_request(spark, submission(spark), "dbfs:/jobs/entry.py", "dbfs:/jobs/core.whl")

    (task,) = request["tasks"]
    assert "existing_cluster_id" not in task and "timeout_seconds" not in request
    cluster = task["new_cluster"]
    assert cluster["spark_conf"] == {
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.ansi.enabled": "true",
        "spark.log.level": "INFO",
    }
    assert cluster["spark_env_vars"] == {"TZ": "UTC", **LOCATION}
    assert cluster["aws_attributes"] == NEW_CLUSTER["aws_attributes"]
    assert NEW_CLUSTER["spark_env_vars"] == {"TZ": "UTC"}  # the connector's spec is left as it is


def test_on_kill_before_a_run_started_cancels_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    spark = hook(monkeypatch, IDENTITY, EXISTING)
    spark.on_kill()  # no run, no call to Databricks (no connection databricks_default here)
    assert spark.submitter.job_run_id is None


def test_the_package_wheel_is_the_same_from_every_worker_and_installs_what_the_driver_imports(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    wheel = package_wheel(first)
    assert wheel.read_bytes() == package_wheel(second).read_bytes()
    assert wheel.name.startswith("kinesis_snowflake_core-0.1.0+sha256.") and wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        record = zf.read(next(n for n in names if n.endswith(".dist-info/RECORD"))).decode()
    with zipfile.ZipFile(package_core(tmp_path)) as core:  # what --py-files ships on the other platforms
        assert names[: len(core.namelist())] == core.namelist()
    assert [name.rsplit("/", 1)[1] for name in names[len(core.namelist()) :]] == ["METADATA", "WHEEL", "RECORD"]
    # Each file's hash and size as an installer checks them (RECORD lists itself without either).
    rows = [line.split(",") for line in record.splitlines()]
    assert [row[0] for row in rows] == names
    with zipfile.ZipFile(wheel) as zf:
        for name, digest, size in rows[:-1]:
            data = zf.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, size) == (f"sha256={expected}", str(len(data)))
    # The package is at the wheel's root: the driver imports from it as the cluster's installation has it
    # (no site processing and another working directory, so that this checkout stays out; the libraries
    # come from site-packages).
    code = (
        f"import sys; sys.path.append({sysconfig.get_paths()['purelib']!r}); "
        "import airflow_kinesis_snowflake.core.engine.driver as d; print(d.__file__)"
    )
    shown = subprocess.run(
        [sys.executable, "-S", "-c", code],
        env={"PYTHONPATH": str(wheel)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == str(wheel / "airflow_kinesis_snowflake/core/engine/driver.py")
