"""The connector file's ``spark:`` section: spark-submit settings, checked before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.config import load_connector_config
from tests.unit.test_config import _load_error, _with, _write


def _spark(section: dict[str, Any]) -> dict[str, Any]:
    return _with(lambda data: data.update(spark=section))


def test_the_section_is_optional_and_sets_nothing_by_default(tmp_path: Path) -> None:
    config = load_connector_config(_write(tmp_path, _with(lambda data: data.pop("spark", None))))
    spark = config.spark
    assert spark.spark_conf() == {}
    assert (spark.deploy_mode, spark.executor_memory, spark.total_executor_cores, spark.queue) == (None,) * 4


def test_every_setting_is_read_as_spark_submit_takes_it(tmp_path: Path) -> None:
    section = {
        "deploy_mode": "Client",
        "executor_memory": "2G",
        "driver_memory": "1024m",
        "executor_cores": 2,
        "total_executor_cores": "4",
        "num_executors": 3,
        "pyspark_python": "/opt/spark-python/bin/python",
        "pyspark_driver_python": "python3",
        "queue": "root.ingest",
        "conf": {"spark.ui.enabled": False, "spark.sql.shuffle.partitions": 8, "spark.executorEnv.TZ": "UTC"},
    }
    spark = load_connector_config(_write(tmp_path, _spark(section))).spark
    assert (spark.deploy_mode, spark.executor_memory, spark.driver_memory) == ("client", "2g", "1024m")
    assert (spark.executor_cores, spark.total_executor_cores, spark.num_executors) == (2, 4, 3)
    assert spark.queue == "root.ingest"
    # Values as Spark reads them; the Pythons are the Spark settings they stand for.
    assert spark.spark_conf() == {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.executorEnv.TZ": "UTC",
        "spark.pyspark.python": "/opt/spark-python/bin/python",
        "spark.pyspark.driver.python": "python3",
    }


@pytest.mark.parametrize(
    ("section", "field", "shown", "fix"),
    [
        ({"executor_memory": "512"}, "spark.executor_memory", "'512'", "'512m' or '2g'"),
        ({"driver_memory": "2 gigabytes"}, "spark.driver_memory", "'2 gigabytes'", "'512m' or '2g'"),
        ({"executor_memory": "256m"}, "spark.executor_memory", "'256m'", "at least 450m"),
        ({"executor_cores": 0}, "spark.executor_cores", "0", "from 1 to"),
        ({"total_executor_cores": -1}, "spark.total_executor_cores", "-1", "from 1 to"),
        ({"num_executors": True}, "spark.num_executors", "True", "whole number"),
        ({"num_executors": 1.5}, "spark.num_executors", "1.5", "whole number"),
        ({"deploy_mode": "yarn"}, "spark.deploy_mode", "'yarn'", "client or cluster"),
        ({"queue": "my queue"}, "spark.queue", "'my queue'", "name of a YARN queue"),
        ({"pyspark_python": ""}, "spark.pyspark_python", "''", "Python interpreter"),
        ({"master": "yarn"}, "spark.master", "unknown field", "check its spelling"),
        ({"conf": ["spark.ui.enabled=false"]}, "spark.conf", "spark.ui.enabled=false", "mapping of spark.*"),
        ({"conf": {"ui.enabled": "false"}}, "spark.conf", "'ui.enabled'", "start with 'spark.'"),
        ({"conf": {"spark.ui.enabled": None}}, "spark.conf", "None", "string, number or true/false"),
        ({"conf": {"spark.jars": ["a.jar"]}}, "spark.conf", "['a.jar']", "string, number or true/false"),
        ({"conf": {"spark.cores.max": 0}}, "spark.conf", "'spark.cores.max'", "spark.total_executor_cores"),
        ({"conf": {"spark.executor.memory": "4"}}, "spark.conf", "'spark.executor.memory'", "'512m' or '2g'"),
        ({"log_level": "WARNING"}, "spark.log_level", "'WARNING'", "ALL, TRACE, DEBUG, INFO, WARN, ERROR, FATAL, OFF"),
        ({"log_level": 3}, "spark.log_level", "3", "must be a Spark log level"),
        ({"conf": {"spark.log.level": "loud"}}, "spark.conf", "'spark.log.level'", "it is spark.log_level"),
    ],
)
def test_a_wrong_setting_names_file_field_value_and_fix(
    tmp_path: Path, section: dict[str, Any], field: str, shown: str, fix: str
) -> None:
    message = _load_error(tmp_path, _spark(section))
    assert f"  - {field}:" in message
    assert shown in message
    assert fix in message


@pytest.mark.parametrize(
    "key",
    [
        "spark.executorEnv.AWS_SECRET_ACCESS_KEY",
        "spark.yarn.appMasterEnv.AWS_SESSION_TOKEN",
        "spark.kubernetes.driverEnv.SNOWFLAKE_CONNECTION_JSON",
        "spark.executorEnv.DB_PASSWORD",
        "spark.yarn.appMasterEnv.SNOWFLAKE_PRIVATE_KEY",
        "spark.kubernetes.driverEnv.GITHUB_TOKEN",
        "spark.executorEnv.AWS_ACCESS_KEY_ID",
    ],
)
def test_a_credential_in_a_driver_or_executor_environment_setting_is_refused(tmp_path: Path, key: str) -> None:
    message = _load_error(tmp_path, _spark({"conf": {key: "s3cr3t-value"}}))
    assert "  - spark.conf:" in message and repr(key) in message
    assert "credential" in message and "remove it" in message
    assert "s3cr3t-value" not in message  # the error names the key, never the secret


@pytest.mark.parametrize(
    "key",
    [
        "spark.authenticate.secret",
        "spark.hadoop.fs.s3a.secret.key",
        "spark.ssl.keyPassword",
        "spark.kubernetes.authenticate.submission.oauthToken",
        "spark.kubernetes.authenticate.driver.oauthToken",
        "spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net",
        "spark.hadoop.fs.azure.sas.container.acct.blob.core.windows.net",
        "spark.hadoop.fs.gs.auth.service.account.private.key",
        "spark.hadoop.fs.s3a.encryption.key",
    ],
)
def test_a_secret_held_by_a_spark_setting_is_refused(tmp_path: Path, key: str) -> None:
    message = _load_error(tmp_path, _spark({"conf": {key: "s3cr3t-value"}}))
    assert repr(key) in message and "spark-defaults.conf" in message
    assert "s3cr3t-value" not in message


def test_settings_that_name_but_do_not_hold_a_secret_are_kept(tmp_path: Path) -> None:
    conf = {
        "spark.executorEnv.AWS_REGION": "eu-west-1",
        "spark.hadoop.fs.s3a.aws.credentials.provider": "com.amazonaws.auth.InstanceProfileCredentialsProvider",
        "spark.authenticate.secret.file": "/etc/spark/secret",
        "spark.kubernetes.authenticate.driver.oauthTokenFile": "/var/run/secrets/token",
        # Endpoints, not secrets: a driver on the cluster reaches Secrets Manager through a VPC endpoint.
        "spark.yarn.appMasterEnv.AWS_ENDPOINT_URL_SECRETS_MANAGER": "https://vpce-1.secretsmanager.example",
        "spark.kubernetes.driver.secretKeyRef.SNOWFLAKE_PASSWORD": "snowflake:password",
    }
    assert load_connector_config(_write(tmp_path, _spark({"conf": conf}))).spark.spark_conf() == conf


@pytest.mark.parametrize(
    ("field", "value", "setting", "same"),
    [
        ("executor_memory", "2g", "spark.executor.memory", "4g"),
        ("driver_memory", "1g", "spark.driver.memory", "1g"),
        ("executor_cores", 2, "spark.executor.cores", 2),
        ("total_executor_cores", 1, "spark.cores.max", 1),
        ("num_executors", 2, "spark.executor.instances", 4),
        ("deploy_mode", "client", "spark.submit.deployMode", "client"),
        ("pyspark_python", "/usr/bin/python3", "spark.pyspark.python", "/usr/bin/python3"),
        ("queue", "etl", "spark.yarn.queue", "etl"),
        ("log_level", "ERROR", "spark.log.level", "INFO"),
    ],
)
def test_a_conf_entry_that_a_field_stands_for_is_refused_saying_which_to_keep(
    tmp_path: Path, field: str, value: Any, setting: str, same: Any
) -> None:
    message = _load_error(tmp_path, _spark({field: value, "conf": {setting: same}}))
    assert f"spark.conf[{setting!r}] ({str(same)!r}) duplicates spark.{field} ({value!r})" in message
    assert f"keep spark.{field} and remove {setting} from spark.conf" in message


def test_spark_logs_at_the_level_of_the_section_as_spark_writes_it(tmp_path: Path) -> None:
    spark = load_connector_config(_write(tmp_path, _spark({"log_level": " info "}))).spark
    assert spark.log_level == "INFO"
    assert spark.spark_conf() == {"spark.log.level": "INFO"}


def test_the_documented_example_is_valid_once_uncommented(tmp_path: Path) -> None:
    """The commented ``spark:`` block of dags/connectors/orders.yaml, uncommented, loads."""
    from tests.unit.test_config import SHIPPED

    lines = SHIPPED.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# spark:"))
    block = []
    for line in lines[start:]:
        if not line.startswith("#"):
            break
        block.append(line[2:])
    text = SHIPPED.read_text(encoding="utf-8") + "\n" + "\n".join(block) + "\n"
    path = tmp_path / "orders.yaml"
    path.write_text(text, encoding="utf-8")
    spark = load_connector_config(path).spark
    assert spark.executor_memory and spark.total_executor_cores and spark.spark_conf()
    assert spark.spark_conf()["spark.log.level"] == "WARN"
