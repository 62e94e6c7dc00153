"""The connector file's ``batch.mode`` reaches the ingest task, and a continuous task's pace its Spark
application; the operator refuses a mode it cannot run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.config import load_connector_config
from airflow_kinesis_snowflake.core.engine.continuous import IDLE_SECONDS
from airflow_kinesis_snowflake.dags import build_ingest_dag
from airflow_kinesis_snowflake.hooks.spark import SparkJobSubmitHook
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from tests.unit.test_config import _set, _with, _write

TABLE: dict[str, Any] = {"stream_name": "s", "application_name": "app", "database": "D", "schema": "S", "table": "T"}


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        ({}, ("scheduled", None, IDLE_SECONDS)),
        ({"mode": "continuous", "max_runtime_minutes": 4}, ("continuous", 4, IDLE_SECONDS)),
        ({"mode": "continuous", "max_runtime_minutes": 4, "idle_seconds": 20}, ("continuous", 4, 20)),
    ],
    ids=["scheduled", "continuous", "continuous-with-an-idle-pause"],
)
def test_the_connector_files_mode_reaches_the_ingest_task(
    tmp_path: Path, batch: dict[str, Any], expected: tuple[str, float | None, float]
) -> None:
    config = load_connector_config(_write(tmp_path, _with(_set("batch", **batch))))

    task = build_ingest_dag(config).get_task("ingest")

    assert isinstance(task, SparkKinesisIngestOperator)
    assert (task.mode, task.max_runtime_minutes, task.idle_seconds) == expected


@pytest.mark.parametrize(
    "mode",
    [
        {"mode": "continuous"},
        {"mode": "continuous", "max_runtime_minutes": 0},
        {"mode": "scheduled", "max_runtime_minutes": 5},
        {"mode": "streaming", "max_runtime_minutes": 5},
    ],
    ids=["continuous-without-runtime", "zero-runtime", "scheduled-with-runtime", "unknown-mode"],
)
def test_a_mode_the_operator_cannot_run_is_refused_when_the_dag_is_built(mode: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="scheduled, or continuous with max_runtime_minutes > 0"):
        SparkKinesisIngestOperator(task_id="ingest", **TABLE, **mode)


@pytest.mark.usefixtures("unit_connections")
def test_a_continuous_task_hands_its_runtime_and_idle_pause_to_the_spark_application(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_kinesis_snowflake.core.batch import BatchOutcome
    from airflow_kinesis_snowflake.operators import ingest as module

    monkeypatch.setattr(SparkJobSubmitHook, "check_submission", lambda self: None)
    monkeypatch.setattr(module, "run_batch", lambda *a, **k: pytest.fail("a continuous task runs in Spark only"))
    asked: list[dict[str, Any]] = []

    def run_continuous(self: Any, settings: Any, **kwargs: Any) -> BatchOutcome:
        asked.append({"application_name": settings.application_name, **kwargs})
        return BatchOutcome("app")

    monkeypatch.setattr(SparkJobSubmitHook, "run_continuous", run_continuous)
    task = SparkKinesisIngestOperator(
        task_id="ingest", **TABLE, mode="continuous", max_runtime_minutes=3, idle_seconds=25,
        aws_conn_id="aws_unit", spark_conn_id="spark_unit", snowflake_conn_id="snowflake_unit",
    )  # fmt: skip

    task.execute({})

    [call] = asked
    assert (call["application_name"], call["max_runtime_minutes"], call["idle_seconds"]) == ("app", 3, 25)


@pytest.mark.usefixtures("unit_connections")
def test_a_continuous_task_emits_each_micro_batch_s_metrics_once_as_it_commits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from datetime import UTC, datetime

    from airflow_kinesis_snowflake import lineage
    from airflow_kinesis_snowflake.core.batch import BatchOutcome, outcome_of_results
    from airflow_kinesis_snowflake.core.model import BatchResult

    monkeypatch.setattr(SparkJobSubmitHook, "check_submission", lambda self: None)
    results = [("app", BatchResult(f"b{n}", f"app/b{n}", True, n, 0, (), datetime.now(UTC), {})) for n in (1, 2)]
    emitted: list[tuple[str, bool]] = []
    running = False

    def run_continuous(self: Any, settings: Any, *, on_batch: Any, **kwargs: Any) -> BatchOutcome:
        nonlocal running
        running = True  # the Spark application commits its micro-batches, one after the other
        for item in results:
            on_batch(outcome_of_results("app", [item]))
        running = False
        return outcome_of_results("app", results)

    def emit_ingest_metrics(operator: Any, outcome: BatchOutcome, destination: Any, publish: Any) -> None:
        assert outcome.result is not None
        emitted.append((outcome.result.batch_id, running))

    monkeypatch.setattr(SparkJobSubmitHook, "run_continuous", run_continuous)
    monkeypatch.setattr(lineage, "emit_ingest_metrics", emit_ingest_metrics)
    task = SparkKinesisIngestOperator(
        task_id="ingest", **TABLE, mode="continuous", max_runtime_minutes=3,
        aws_conn_id="aws_unit", spark_conn_id="spark_unit", snowflake_conn_id="snowflake_unit",
    )  # fmt: skip

    summary = task.execute({})

    # While the application ran, each micro-batch once; not again when it ended.
    assert emitted == [("b1", True), ("b2", True)]
    assert summary["batch_ids"] == ["b1", "b2"] and summary["rows_loaded"] == 3
