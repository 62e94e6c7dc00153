"""Split and merge between runs and during a run: no loss, no duplicates, parents before children, and
one run loads every record put before it started, through every generation of shards."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.conftest import create_stream, create_table, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.integration.test_cooperation import start_dag
from tests.integration.test_ingest_dag import write_connector

pytestmark = pytest.mark.integration

SHARDS = re.compile(r"Batch \w+: \d+ shard ranges \(([^)]*)\)")
KEYS = [f"key-{k}" for k in range(12)]


def test_resharding_between_and_during_runs(emulators: Emulators, dag_env: dict[str, str], tmp_path: Path) -> None:
    stream, app = unique("reshard"), unique("reshard-app")
    table = "RESHARD_" + app.split("-")[-1].upper()
    kinesis = create_stream(emulators, stream, shards=2)
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0), K VARCHAR, N NUMBER(38,0)")
    connector = {
        "connector_id": app.replace("-", "_"),
        "source": {"stream_name": stream, "region": "us-east-1", "application_name": app},
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "batch": {"schedule": None, "retries": 0},
    }
    dag_file = write_connector(tmp_path / "dags", connector)
    dag_id = f"kinesis_snowflake_{connector['connector_id']}_ingest"
    counters = dict.fromkeys(KEYS, 0)
    next_id = 0

    def put(count: int) -> None:
        nonlocal next_id
        records = []
        for _ in range(count):
            key = KEYS[next_id % len(KEYS)]
            records.append({"Data": json.dumps({"id": next_id, "k": key, "n": counters[key]}), "PartitionKey": key})
            counters[key] += 1
            next_id += 1
        assert kinesis.put_records(StreamName=stream, Records=records)["FailedRecordCount"] == 0

    batches: list[set[str]] = []

    def run(log: Path) -> None:
        proc = run_dag(dag_id, dag_env, dag_file=dag_file, log_path=log)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        # Every micro-batch of the run, in order: a run plans again once a parent reached SHARD_END.
        batches.extend(set(found.split(", ")) for found in SHARDS.findall(proc.stdout + proc.stderr))

    def loaded() -> int:
        return int(query(emulators, f"SELECT COUNT(*) FROM ANALYTICS.RAW.{table}")[0][0])

    put(120)
    run(tmp_path / "run1.log")
    # Between runs: split shard 0 (children 2 and 3); new records go to shard 1 and the children.
    kinesis.split_shard(StreamName=stream, ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**126))
    put(120)
    run(tmp_path / "run2.log")
    assert "shardId-000000000002" not in batches[1], "a child was read before its parent reached SHARD_END"
    assert loaded() == next_id, "run 2 left records of the split's children for a later run"

    # During a run: merge shards 3 and 1 (child 4) while Spark reads, and keep producing.
    log = tmp_path / "run3.log"
    proc = start_dag(dag_id, dag_file, dag_env, log)
    deadline = time.monotonic() + 120
    while "Spark-Submit cmd" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    kinesis.merge_shards(
        StreamName=stream, ShardToMerge="shardId-000000000003", AdjacentShardToMerge="shardId-000000000001"
    )
    put(120)
    assert proc.wait(timeout=600) == 0, log.read_text()[-4000:]
    batches.extend(set(found.split(", ")) for found in SHARDS.findall(log.read_text()))

    # Between two runs: split shard 2 (children 5 and 6), then merge 6 with 4 (child 7), putting
    # records into every generation. The next single run loads all of them.
    kinesis.split_shard(StreamName=stream, ShardToSplit="shardId-000000000002", NewStartingHashKey=str(2**125))
    put(120)
    kinesis.merge_shards(
        StreamName=stream, ShardToMerge="shardId-000000000006", AdjacentShardToMerge="shardId-000000000004"
    )
    put(120)
    first_of_run4 = len(batches)
    run(tmp_path / "run4.log")
    assert loaded() == next_id, "one run did not load every record put before it started"
    run4 = batches[first_of_run4:]
    assert any("shardId-000000000007" in b for b in run4), run4  # the merge's child, two generations down

    rows = query(emulators, f"SELECT ID, K, N FROM ANALYTICS.RAW.{table}")
    assert sorted(r[0] for r in rows) == list(range(next_id)), "records lost or loaded twice"
    for key, count in counters.items():
        assert sorted(r[2] for r in rows if r[1] == key) == list(range(count)), key

    # Parents before children: no batch reads a child until every parent is finished, i.e. a
    # child's first batch comes after the last batch that read any of its parents.
    parents = {
        "shardId-000000000002": ["shardId-000000000000"],
        "shardId-000000000003": ["shardId-000000000000"],
        "shardId-000000000004": ["shardId-000000000003", "shardId-000000000001"],
        "shardId-000000000005": ["shardId-000000000002"],
        "shardId-000000000006": ["shardId-000000000002"],
        "shardId-000000000007": ["shardId-000000000006", "shardId-000000000004"],
    }
    for child, its_parents in parents.items():
        first_child = min((i for i, b in enumerate(batches) if child in b), default=None)
        if first_child is None:
            continue
        for parent in its_parents:
            last_parent = max(i for i, b in enumerate(batches) if parent in b)
            assert last_parent < first_child, (child, parent, batches)
    # Finished parents whose children started are gone from the lease table.
    leases = {
        i["lease_key"]["S"]
        for i in emulators.boto3_client("dynamodb").scan(TableName=app)["Items"]
        if i["item_type"]["S"] == "SHARD"
    }
    assert "shardId-000000000000" not in leases
    assert {"shardId-000000000005", "shardId-000000000007"} <= leases
