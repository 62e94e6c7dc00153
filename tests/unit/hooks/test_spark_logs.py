"""SparkJobSubmitHook: spark-submit's output in the task log at its levels, and Spark kept at WARN."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.apache.spark.hooks import spark_submit

from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.hooks.spark import DEFAULT_APPLICATION, SparkJobSubmitHook

OUTPUT = [
    "26/11/27 18:07:34 INFO SparkContext: Running Spark version 4.3.0\n",
    "26/11/27 18:07:36 WARN NativeCodeLoader: Unable to load native-hadoop library\n",
    "kinesis-snowflake WARNING: staged files under a/b/c were not removed: REMOVE failed\n",
    "batch b1: 5 rows loaded, 0 dead letters, 1 shards\n",
    "kinesis-snowflake ERROR: Traceback (most recent call last):\n",
    'kinesis-snowflake ERROR:   File "job.py", line 1, in load\n',
    "kinesis-snowflake ERROR: RuntimeError: the batch failed\n",
    "26/11/27 18:07:37 ERROR Executor: Exception in task 0.0\n",
    "\tat org.apache.spark.executor.Executor.run(Executor.scala:1)\n",
    "done\n",
]


def hook(monkeypatch: pytest.MonkeyPatch, conf: dict[str, str] | None = None, **extra: Any) -> SparkJobSubmitHook:
    spark = {"conn_type": "spark", "host": "local[2]", "extra": {"deploy-mode": "client", **extra}}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOGS", json.dumps(spark))
    return SparkJobSubmitHook(conn_id="spark_logs", conf=conf)


def test_the_jobs_and_sparks_warnings_and_errors_reach_the_task_log_at_their_level(
    monkeypatch: pytest.MonkeyPatch, hook_log: Callable[[], list[tuple[str, str]]]
) -> None:
    submit = hook(monkeypatch)

    submit._process_spark_submit_log(iter(OUTPUT))

    assert hook_log() == [
        ("info", "26/11/27 18:07:34 INFO SparkContext: Running Spark version 4.3.0"),
        ("warning", "26/11/27 18:07:36 WARN NativeCodeLoader: Unable to load native-hadoop library"),
        ("warning", "staged files under a/b/c were not removed: REMOVE failed"),
        ("info", "batch b1: 5 rows loaded, 0 dead letters, 1 shards"),
        ("error", "Traceback (most recent call last):"),
        ("error", '  File "job.py", line 1, in load'),
        ("error", "RuntimeError: the batch failed"),
        ("error", "26/11/27 18:07:37 ERROR Executor: Exception in task 0.0"),
        ("error", "\tat org.apache.spark.executor.Executor.run(Executor.scala:1)"),
        ("info", "done"),
    ]


def job_hooks(monkeypatch: pytest.MonkeyPatch) -> tuple[KinesisStreamHook, KinesisSnowflakeHook]:
    aws = {"conn_type": "aws", "login": "AKIALOGSTEST00000001", "password": "x", "extra": {"region_name": "us-east-1"}}
    monkeypatch.setenv("AIRFLOW_CONN_AWS_LOGS", json.dumps(aws))
    snowflake = {"conn_type": "snowflake", "login": "U", "password": "pw-8c2e4a1f", "extra": {"account": "a"}}
    monkeypatch.setenv("AIRFLOW_CONN_SNOWFLAKE_LOGS", json.dumps(snowflake))
    return KinesisStreamHook(aws_conn_id="aws_logs"), KinesisSnowflakeHook(snowflake_conn_id="snowflake_logs")


def submitted_with(
    monkeypatch: pytest.MonkeyPatch, submit: SparkJobSubmitHook
) -> tuple[dict[str, str], list[str], dict[str, str]]:
    """The environment, command and log4j2 file (as key -> value) spark-submit would have run with."""
    seen: list[tuple[dict[str, str], list[str], dict[str, str]]] = []

    def run(self: spark_submit.SparkSubmitHook, application: str = "", **kwargs: Any) -> None:
        env = kwargs["env"]
        options = shlex.split(env.get("SPARK_SUBMIT_OPTS", ""))
        files = [o.split("=", 1)[1] for o in options if o.startswith("-Dlog4j.configurationFile=")]
        text = Path(files[0]).read_text() if files else ""
        lines = [line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#")]
        seen.append((env, self._build_spark_submit_command(application), {k.strip(): v.strip() for k, v in lines}))

    monkeypatch.setattr(spark_submit.SparkSubmitHook, "submit", run)
    kinesis, snowflake = job_hooks(monkeypatch)
    submit.submit_job(DEFAULT_APPLICATION, application_args=[], aws=kinesis, snowflake=snowflake)
    return seen[0]


def test_spark_logs_at_warn_by_default_from_the_start_of_spark_submits_jvm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-XX:+UseSerialGC")
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)

    env, command, log4j2 = submitted_with(monkeypatch, hook(monkeypatch))

    assert env["SPARK_SUBMIT_OPTS"].startswith("-XX:+UseSerialGC -Dlog4j.configurationFile=")
    assert log4j2["rootLogger.level"] == "warn"
    assert "spark.log.level=WARN" in command  # for the SparkContext, wherever the driver runs
    assert not [c for c in command if "extraJavaOptions" in c]  # no Spark setting of the user's replaced


def test_the_connectors_level_is_sparks_and_a_wrong_one_is_refused_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _env, command, log4j2 = submitted_with(monkeypatch, hook(monkeypatch, conf={"spark.log.level": "error"}))
    assert log4j2["rootLogger.level"] == "error"
    assert "spark.log.level=ERROR" in command

    with pytest.raises(ValueError, match=r"Spark setting spark.log.level must be a Spark log level: one of ALL"):
        submitted_with(monkeypatch, hook(monkeypatch, conf={"spark.log.level": "loud"}))


@pytest.mark.parametrize("where", ["SPARK_SUBMIT_OPTS", "spark.driver.extraJavaOptions", "SPARK_CONF_DIR"])
def test_a_log4j2_configuration_of_the_workers_own_is_left_in_charge(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str
) -> None:
    own = tmp_path / "log4j2.properties"
    own.write_text("rootLogger.level = info\n")
    conf = {}
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "empty"))
    if where == "SPARK_SUBMIT_OPTS":
        monkeypatch.setenv("SPARK_SUBMIT_OPTS", f"-Dlog4j.configurationFile={own}")
    elif where == "spark.driver.extraJavaOptions":
        monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
        conf = {where: f"-Dlog4j.configurationFile={own}"}
    else:
        monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
        monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))

    env, command, log4j2 = submitted_with(monkeypatch, hook(monkeypatch, conf=conf))

    assert log4j2 in ({}, {"rootLogger.level": "info"})  # ours is not written: theirs, or none
    assert env.get("SPARK_SUBMIT_OPTS", "").count("-Dlog4j.configurationFile=") <= 1
    assert "spark.log.level=WARN" in command
