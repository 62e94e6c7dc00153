"""The Spark job's driver records the batch's outcome in Snowflake (core/job.py ``commit``), which
the Airflow worker reads back: in the load transaction when the batch commits, on its own when
nothing was read. Run without Spark: ``commit`` is what the driver calls once its tasks staged."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_kinesis_snowflake.core.engine.credentials import JobCredentials
from airflow_kinesis_snowflake.core.job import commit
from airflow_kinesis_snowflake.core.load.schema import ColumnMap
from airflow_kinesis_snowflake.core.load.snowflake_sink import ROWS_DIR, OutcomeKey, SnowflakeSink, StaleBatchError
from airflow_kinesis_snowflake.core.model import (
    Checkpoint,
    Destination,
    InitialPosition,
    ShardResult,
    StartPosition,
)
from airflow_kinesis_snowflake.core.planning import BatchPlan, ShardRange
from tests.conftest import create_table, query, unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration

TRIM = StartPosition(InitialPosition.TRIM_HORIZON)


def credentials(emulators: Emulators) -> JobCredentials:
    return JobCredentials(
        aws={},
        snowflake=emulators.snowflake_params(),
    )


def plan_for(table: str) -> BatchPlan:
    return BatchPlan(
        application_name=f"app-{table.lower()}",
        generation_id="g",
        stream_name="s",
        region="us-east-1",
        destination=Destination("ANALYTICS", "RAW", table),
        cutoff=datetime(2026, 1, 31, 12, tzinfo=UTC),
        max_records_per_call=100,
        ranges=(ShardRange("shard-1", None, TRIM, 100),),
    )


def metadata(seq: int) -> dict[str, object]:
    return {
        "stream": "s",
        "shardId": "shard-1",
        "approximateArrival": "2026-01-01T00:00:00+00:00",
        "partitionKey": "k",
        "sequenceNumber": str(seq),
        "subSequenceNumber": 0,
        "shardedSequenceNumber": str(seq),
    }


def staged(shard_end: Checkpoint | None, rows: int) -> ShardResult:
    return ShardResult("shard-1", None, shard_end, rows, rows, 0, 10 * rows, False, 1, 0, None)


def test_the_driver_records_what_it_committed_and_what_it_did_not(emulators: Emulators, tmp_path: Path) -> None:
    table = unique("OUTCOME").replace("-", "_").upper()
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    plan, creds = plan_for(table), credentials(emulators)
    conn = emulators.snowflake_connect()
    sink = SnowflakeSink(conn, plan.destination)
    sink.ensure_support_objects()
    key = OutcomeKey(plan.application_name, plan.generation_id, plan.batch_id, "attempt-1")

    # Nothing read: no transaction, the outcome is recorded on its own.
    empty = commit(plan, "app/b/empty", [staged(None, 0)], creds, attempt_id="attempt-1")
    assert sink.read_outcome(key) == empty and not empty.committed

    # Read and staged: the retry (a new attempt of the same batch) commits and records its outcome.
    rows = ColumnMap(sink.describe_columns()).to_arrow([{"ID": 1}, {"ID": 2}], [metadata(1), metadata(2)])
    pq.write_table(rows, tmp_path / "rows.parquet")
    sink.put_file(tmp_path / "rows.parquet", f"app/b/full/{ROWS_DIR}")
    done = commit(
        plan, "app/b/full", [staged(Checkpoint("2"), 2)], creds, schema={"evolution": False}, attempt_id="attempt-2"
    )

    retry = OutcomeKey(plan.application_name, plan.generation_id, plan.batch_id, "attempt-2")
    assert sink.read_outcome(retry) == done and done.committed and done.rows_loaded == 2
    assert sink.read_outcome(key) == empty  # each attempt reads its own
    recorded = query(
        emulators, "SELECT RESULT FROM ANALYTICS.RAW.KINESIS_INGEST_BATCH_OUTCOMES WHERE ATTEMPT_ID = 'attempt-2'"
    )
    assert json.loads(recorded[0][0])["schema"] == {"evolution": False}

    # A third attempt of the same plan is stale (the ledger moved): it records no outcome.
    with pytest.raises(StaleBatchError):
        commit(plan, "app/b/full", [staged(Checkpoint("2"), 2)], creds, attempt_id="attempt-3")
    assert sink.read_outcome(OutcomeKey(plan.application_name, "g", plan.batch_id, "attempt-3")) is None
    conn.close()
