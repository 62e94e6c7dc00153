"""The connector file's ``batch.mode`` reaches the ingest task; the operator refuses a mode it cannot run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.config import load_connector_config
from airflow_kinesis_snowflake.dags import build_ingest_dag
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from tests.unit.test_config import _set, _with, _write

TABLE: dict[str, Any] = {"stream_name": "s", "application_name": "app", "database": "D", "schema": "S", "table": "T"}


@pytest.mark.parametrize(
    ("batch", "expected"),
    [({}, ("scheduled", None)), ({"mode": "continuous", "max_runtime_minutes": 4}, ("continuous", 4))],
    ids=["scheduled", "continuous"],
)
def test_the_connector_files_mode_reaches_the_ingest_task(
    tmp_path: Path, batch: dict[str, Any], expected: tuple[str, float | None]
) -> None:
    config = load_connector_config(_write(tmp_path, _with(_set("batch", **batch))))

    task = build_ingest_dag(config).get_task("ingest")

    assert isinstance(task, SparkKinesisIngestOperator)
    assert (task.mode, task.max_runtime_minutes) == expected


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
