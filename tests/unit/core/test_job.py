"""The Spark job's typed result: what crosses the Spark boundary as JSON, and what the job prints."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from airflow_kinesis_snowflake.core.job import report
from airflow_kinesis_snowflake.core.model import BatchResult, Checkpoint, ShardResult

SHARD = ShardResult(
    shard_id="shardId-000000000000",
    start=Checkpoint("49590338271490256608559692538361571095921575989136588898", 2),
    end=Checkpoint("49590338271490256608559692538361571095921575989136588999"),
    records_read=12,
    rows_staged=10,
    dead_letters_staged=2,
    bytes_read=640,
    shard_end=True,
    get_records_calls=3,
    subscriptions=0,
    millis_behind_latest=1500,
)
RESULT = BatchResult(
    batch_id="0123456789abcdef0123",
    stage_dir="app/0123456789abcdef0123/abc",
    committed=True,
    rows_loaded=10,
    dead_letters_loaded=2,
    shards=(SHARD, ShardResult("shardId-000000000001", None, None, 0, 0, 0, 0, False)),
    finished_at=datetime(2026, 1, 31, 12, 0, tzinfo=UTC),
    schema={"evolution": True, "why": None, "columns_added": [{"column": "NEW", "type": "VARCHAR"}]},
)


def test_the_result_survives_its_json_file() -> None:
    restored = BatchResult.from_dict(json.loads(json.dumps(RESULT.to_dict())))
    assert restored == RESULT
    assert restored.shards[0].end == SHARD.end and restored.shards[1].end is None


def test_each_figure_has_one_name_in_the_json() -> None:
    data = RESULT.to_dict()
    assert (data["rows_loaded"], data["dead_letters_loaded"]) == (10, 2)
    assert {k: data["shards"][0][k] for k in ("records_read", "rows_staged", "dead_letters_staged", "bytes_read")} == {
        "records_read": 12,
        "rows_staged": 10,
        "dead_letters_staged": 2,
        "bytes_read": 640,
    }
    assert "dead_letters" not in data and "records" not in data["shards"][0]


def test_report_prints_what_the_batch_loaded(capsys: pytest.CaptureFixture[str]) -> None:
    report(RESULT)
    assert capsys.readouterr().out.splitlines() == [
        "batch 0123456789abcdef0123: 10 rows loaded, 2 dead letters, 2 shards",
        'schema evolution: added "NEW" VARCHAR',
    ]
