"""Lag you can see, after one real batch: the task's log table and XCom result, and the ``status`` command
(for a Kinesis connector, and for a DynamoDB connector's tables)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_kinesis_snowflake.__main__ import main
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import SyncSettings
from tests.conftest import LagBatch
from tests.emulators import Emulators
from tests.emulators.servers import REPO_ROOT
from tests.integration.core.test_dynamodb_sync import make_source, run, run_until_complete
from tests.integration.test_ingest_dag import shard_tips

pytestmark = pytest.mark.integration


def xcom_result(batch: LagBatch) -> dict[str, Any]:
    """The ingest task's return value, from the Airflow metadata database."""
    db = sqlite3.connect(batch.airflow_home / "airflow.db")
    try:
        (value,) = db.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = 'ingest' AND key = 'return_value'", (batch.dag_id,)
        ).fetchone()
    finally:
        db.close()
    result = json.loads(value)
    return json.loads(result) if isinstance(result, str) else dict(result)


def test_the_ingest_task_logs_a_lag_table_and_returns_each_shards_lag(
    lag_batch: LagBatch, emulators: Emulators
) -> None:
    tips = shard_tips(emulators.boto3_client("kinesis"), lag_batch.stream_name)
    assert len(tips) == 2

    # The task log: a table of every shard after the batch, with the stream's retention.
    assert "(stream retention 24 h)" in lag_batch.run_log
    assert "shard                 records  lag  checkpoint age  checkpoint" in lag_batch.run_log
    table = lag_batch.run_log[lag_batch.run_log.index("Lag after batch") :].splitlines()[1:5]
    for shard_id, tip in tips.items():
        # shard, records, lag (read to the tip), checkpoint age, checkpoint (the log's own suffix may follow)
        (row,) = [line.split() for line in table if line.split()[:1] == [shard_id]]
        assert row[2] == "0s" and row[4] == tip, table

    # The XCom result: per shard, the lag Kinesis reported, the checkpoint and its age.
    lag = xcom_result(lag_batch)["lag"]
    assert lag["retention_hours"] == 24 and lag["level"] == "ok"
    assert set(lag["shards"]) == set(tips)
    for shard_id, shard in lag["shards"].items():
        assert shard["millis_behind_latest"] == 0  # read to the tip
        assert shard["checkpoint"]["sequence_number"] == tips[shard_id]
        assert 0 <= shard["checkpoint_age_seconds"] < 600
    assert sum(s["records"] for s in lag["shards"].values()) == 21
    assert sum(s["dead_letters"] for s in lag["shards"].values()) == 1


def test_status_prints_each_shards_checkpoint_lag_last_batch_rows_and_dead_letters(
    lag_batch: LagBatch, emulators: Emulators, aws_connections: Emulators, capsys: pytest.CaptureFixture[str]
) -> None:
    tips = shard_tips(emulators.boto3_client("kinesis"), lag_batch.stream_name)
    batch_id = xcom_result(lag_batch)["batch_id"]

    # The command as a user runs it, on the DAGs folder, with Airflow's connections from the environment.
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_kinesis_snowflake", "status", str(lag_batch.dags_folder)],
        cwd=REPO_ROOT,
        env={**os.environ, **emulators.airflow_env(), "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == (
        f"connector orders: stream {lag_batch.stream_name} -> {lag_batch.table}, "
        f"application {lag_batch.application_name}, retention 24 h"
    )
    header = "shard checkpoint checkpoint age lag last batch finished rows dead letters"
    assert lines[1].split() == header.split()
    shard_rows = {line.split()[0]: line.split() for line in lines[3:]}
    assert set(shard_rows) == set(tips)
    for shard_id, cells in shard_rows.items():
        assert cells[1] == tips[shard_id] and cells[3] == "0s" and cells[4] == batch_id

    # --json: the same, as data; the rows and dead letters of the last batch add up to what was put.
    assert main(["status", str(lag_batch.connector_file), "--json"]) == 0
    (status,) = json.loads(capsys.readouterr().out)
    assert status["error"] is None and status["retention_hours"] == 24
    shards = {s["shard_id"]: s for s in status["shards"]}
    assert {shard_id: s["checkpoint"]["sequence_number"] for shard_id, s in shards.items()} == tips
    assert {s["last_batch_id"] for s in shards.values()} == {batch_id}
    assert sum(s["rows"] for s in shards.values()) == 20 and sum(s["dead_letters"] for s in shards.values()) == 1
    assert all(s["millis_behind_latest"] == 0 and s["level"] == "ok" for s in shards.values())
    assert all(len(s["history"]) == 1 for s in shards.values())


def test_status_shows_a_connector_it_cannot_read_and_exits_1(
    aws_connections: Emulators, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "connectors").mkdir()
    (tmp_path / "connectors" / "gone.yaml").write_text(
        "connector_id: gone\nsource:\n  stream_name: no-such-stream\n  region: us-east-1\n"
        "  application_name: gone-app\n"
        "destination:\n  database: ANALYTICS\n  schema: RAW\n  table: T\n"
    )

    assert main(["status", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    # The connector is shown, with the reason it could not be read.
    assert "connector gone: stream no-such-stream -> ANALYTICS.RAW.T" in out
    assert "error: ResourceNotFoundException" in out


def test_status_shows_each_dynamodb_table_its_snapshot_its_stream_shards_and_exits_1_near_the_safe_age(
    emulators: Emulators, aws_connections: Emulators, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload, sync = make_source(emulators, settings=SyncSettings(total_segments=2))
    workload.put(10, start=0)
    connector = {
        "connector_id": "tables",
        "source": {
            "type": "dynamodb",
            "region": "us-east-1",
            "application_name": sync.application_name,
            "tables": [sync.table],
            "snapshot_total_segments": 2,
            "snapshot_read_units_per_second": 1000,
        },
        "destination": {"database": "ANALYTICS", "schema": "RAW"},
        "batch": {"schedule": None},
    }
    (tmp_path / "connectors").mkdir()
    (tmp_path / "connectors" / "tables.yaml").write_text(yaml.safe_dump(connector))

    # Synced 19 hours ago, by the runs' clock, and not since: 95% of the safe age of 20 hours.
    run_until_complete(emulators, sync, 0, now=lambda: datetime.now(UTC) - timedelta(hours=19))
    assert main(["status", str(tmp_path), "--json"]) == 1
    (status,) = json.loads(capsys.readouterr().out)
    assert (status["source"], status["error"], status["safe_age_hours"]) == ("dynamodb", None, 20)
    (table,) = status["tables"]
    assert (table["table"], table["destination"], table["generation"]) == (sync.table, sync.target.table, 0)
    snapshot = table["snapshot"]
    assert {k: snapshot[k] for k in ("total_segments", "segments_done", "items", "completed")} == {
        "total_segments": 2,
        "segments_done": 2,
        "items": 10,
        "completed": True,
    }
    assert (snapshot["percent"], snapshot["eta_seconds"]) == (100, 0)  # its progress: done
    shards = table["shards"]
    assert shards and {s["level"] for s in shards} == {"error"}
    assert all(19 * 3600 <= s["checkpoint_age_seconds"] < 20 * 3600 for s in shards)
    assert table["last_batch_id"] is not None

    # A change, read by a run now: the shard's checkpoint moves, its age is seconds, the status exits 0.
    workload.put(1, start=10)
    run(emulators, sync, 30)
    assert main(["status", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"connector tables: DynamoDB tables, application {sync.application_name}, safe age 20 h"
    assert lines[3].split()[:4] == [sync.table, sync.target.table, "0", "complete"]
    assert not any(line.lstrip().startswith(("error:", "warning:")) for line in lines)
