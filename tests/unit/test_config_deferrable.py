"""``spark.deferrable``: the connector file's switch for deferrable waits, checked where it cannot work,
and what it gives the ingest and sync tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_kinesis_snowflake.config import load_connector_config
from airflow_kinesis_snowflake.dags import build_dynamodb_sync_dag, build_ingest_dag
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from tests.unit.test_config import _load_error, _with, _write
from tests.unit.test_config_platform import DATABRICKS, EMR, GLUE
from tests.unit.test_dags import CONNECTOR
from tests.unit.test_dags_dynamodb import config, task, with_


def _spark(section: dict[str, Any], **batch: Any) -> dict[str, Any]:
    def change(data: dict[str, Any]) -> None:
        data["spark"] = section
        data.setdefault("batch", {}).update(batch)

    return _with(change)


@pytest.mark.parametrize(
    ("section", "batch", "field", "shown", "fix"),
    [
        (
            {"deferrable": True},
            {},
            "spark",
            "spark.platform is spark_submit: spark-submit runs on the Airflow worker, in the task",
            "Set spark.platform to one of emr_serverless, glue, databricks (with its section), or remove "
            "spark.deferrable",
        ),
        (
            {"platform": "emr_serverless", "emr_serverless": EMR, "deferrable": True},
            {"mode": "continuous", "max_runtime_minutes": 30},
            "",
            "spark.deferrable: true is for batch.mode scheduled",
            "Remove spark.deferrable, or set batch.mode: scheduled",
        ),
        (
            {"platform": "emr_serverless", "emr_serverless": EMR, "deferrable": "sometimes"},
            {},
            "spark.deferrable",
            "'sometimes'",
            "valid boolean",
        ),
    ],
    ids=["spark-submit", "continuous", "not-a-boolean"],
)
def test_deferrable_where_it_cannot_work_fails_naming_the_file_the_field_and_the_fix(
    tmp_path: Path, section: dict[str, Any], batch: dict[str, Any], field: str, shown: str, fix: str
) -> None:
    message = _load_error(tmp_path, _spark(section, **batch))
    assert f"  - {field}:" in message if field else "spark.deferrable" in message
    assert shown in message and fix in message


@pytest.mark.parametrize("platform", ["emr_serverless", "glue", "databricks"])
def test_on_a_managed_platform_the_ingest_and_sync_tasks_defer_as_the_connector_file_says(
    tmp_path: Path, platform: str
) -> None:
    sections = {"emr_serverless": EMR, "glue": GLUE, "databricks": DATABRICKS}
    section = {"platform": platform, platform: sections[platform]}
    for deferrable in (True, False):
        path = _write(tmp_path, _spark({**section, "deferrable": deferrable}))
        assert task(build_ingest_dag(load_connector_config(path)), "ingest").deferrable is deferrable
    sync = task(build_dynamodb_sync_dag(config(with_("spark", **section, deferrable=True))), "sync_table")
    assert sync.partial_kwargs["deferrable"] is True


def test_left_out_the_tasks_follow_airflow_s_default_deferrable_where_they_can_defer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    on_emr = tmp_path / "emr.yaml"
    on_emr.write_text(yaml.safe_dump({**CONNECTOR, "spark": {"platform": "emr_serverless", "emr_serverless": EMR}}))
    assert task(build_ingest_dag(load_connector_config(on_emr)), "ingest").deferrable is True
    here = tmp_path / "here.yaml"
    here.write_text(yaml.safe_dump(CONNECTOR))  # spark-submit: nothing to defer to, and no refusal either
    assert task(build_ingest_dag(load_connector_config(here)), "ingest").deferrable is False
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "False")
    assert task(build_ingest_dag(load_connector_config(on_emr)), "ingest").deferrable is False


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ({}, "this task has no spark_platform: spark-submit runs in the task itself"),
        (
            {"spark_platform": {"platform": "emr_serverless", **EMR}, "mode": "continuous", "max_runtime_minutes": 30},
            "this task runs in continuous mode",
        ),
    ],
    ids=["spark-submit", "continuous"],
)
def test_an_ingest_task_that_cannot_defer_refuses_deferrable_true_at_parse_time(
    arguments: dict[str, Any], why: str
) -> None:
    with pytest.raises(ValueError) as raised:
        SparkKinesisIngestOperator(
            task_id="ingest",
            stream_name="orders",
            application_name="orders-app",
            database="ANALYTICS",
            schema="RAW",
            table="ORDERS",
            deferrable=True,
            **arguments,
        )
    message = str(raised.value)
    assert message.startswith("task 'ingest': deferrable=True waits in Airflow's triggerer") and why in message
