"""Fault matrix of the DynamoDB source: kill or fail each step of a table's batch, retry the sync DAG.

The cases of tests/reliability/test_fault_matrix.py, for a DynamoDB connector's sync DAG run as
users run it (``tests.emulators.run_dag``), each batch's data plane in a real ``spark-submit``
(``source.engine: spark``). A fault is injected at the emulators' boundary (tests/emulators/faults.py):
the fakesnow server kills the case's Spark job when a statement arrives, fails a statement, or
crashes and comes back on its data; the moto server kills the Airflow worker on the lease table's
checkpoint write; the lease table is deleted between two runs.

The workload: items put before the first run, whose stream records are then trimmed (as records
older than the stream's retention are), so only the snapshot delivers them: a snapshot of two
segments that takes two batches, so a retry resumes it from the snapshot ledger's cursors. Between
the faulted run and the retry, changes go through the table's stream (an update, an attribute whose
type changes, a delete, a new item). The DAG is run again until the Snowflake table equals a full
Scan of the DynamoDB table, item by item, three runs at most. Each case's outcome joins the matrix
printed at the end of the run, beside the Kinesis cases.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.state.dynamodb import delete_table
from tests.conftest import query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.emulators.dynamodb_streams import trim
from tests.emulators.faults import kill_spark_jobs
from tests.integration.core.sources.dynamodb.test_discovery import create
from tests.integration.test_dynamodb_dag import loaded, scanned
from tests.integration.test_ingest_dag import write_connector
from tests.reliability.test_fault_matrix import Outcome, expire_locks, run_with_faults

pytestmark = pytest.mark.integration

ITEMS = 24
SEGMENTS = 2
# Fewer than a segment's items: the snapshot takes two batches, one per DAG run.
ITEMS_PER_SEGMENT_AND_BATCH = 8
MAX_RUNS = 3


@dataclass(frozen=True)
class Case:
    name: str
    snowflake: list[dict[str, Any]] = field(default_factory=list)
    kill_worker_in_checkpoint: bool = False
    # The first run succeeds; then its lease table is deleted, and the next run must load nothing again.
    delete_lease_table: bool = False
    # The first run's batch was committed in Snowflake (the retry resumes the snapshot from it).
    committed: bool = False
    # More of the connector file's batch section (continuous mode).
    batch: dict[str, Any] = field(default_factory=dict)


# Continuous mode: the Spark driver syncs the table run after run for 6 s per DAG run. It is killed
# right after its first batch's commit, holding that batch's leases; the next DAG run's driver
# resumes the snapshot from the ledger once they expired, and follows the stream.
CONTINUOUS = {"mode": "continuous", "max_runtime_minutes": 0.1}

CASES = [
    Case("DynamoDB: SIGKILL spark-submit after staging, before COPY INTO",
         snowflake=[{"match": r"^\s*COPY INTO", "when": "before", "action": "kill_spark"}]),
    Case("DynamoDB: SIGKILL spark-submit after COPY INTO, before COMMIT",
         snowflake=[{"match": r"^\s*COMMIT", "when": "before", "action": "kill_spark"}]),
    Case("DynamoDB: SIGKILL spark-submit after COMMIT, before the lease checkpoint",
         snowflake=[{"match": r"^\s*COMMIT", "when": "after", "action": "kill_spark"}], committed=True),
    Case("DynamoDB: SIGKILL the Airflow worker during the lease checkpoint",
         kill_worker_in_checkpoint=True, committed=True),
    Case("DynamoDB: COMMIT fails", snowflake=[{"match": r"^\s*COMMIT", "when": "before", "action": "error"}]),
    Case("DynamoDB: Snowflake emulator stopped after COMMIT and restarted",
         snowflake=[{"match": r"^\s*COMMIT", "when": "after", "action": "restart", "seconds": 5}], committed=True),
    Case("DynamoDB: lease table deleted between two successful runs", delete_lease_table=True, committed=True),
    Case("DynamoDB: SIGKILL during continuous mode (the driver, after a batch's COMMIT)",
         snowflake=[{"match": r"^\s*COMMIT", "when": "after", "action": "kill_spark"}], committed=True,
         batch=CONTINUOUS),
]  # fmt: skip


def put_items(dynamodb: Any, table: str) -> None:
    """The items the snapshot reads: strings, exact numbers, maps, sets, booleans."""
    for n in range(ITEMS):
        item = {
            "pk": {"S": f"k{n:02d}"},
            "amount": {"N": f"{n}.125"},
            "count": {"N": str(n)},
            "tags": {"SS": ["a", f"t{n}"]},
            "detail": {"M": {"n": {"N": "12345678901234567890.5"}, "ok": {"BOOL": n % 2 == 0}}},
        }
        dynamodb.put_item(TableName=table, Item=item)


def change_items(dynamodb: Any, table: str) -> None:
    """Changes the stream carries to the retry: an update, a type change, a delete, a new item."""
    dynamodb.update_item(
        TableName=table,
        Key={"pk": {"S": "k01"}},
        UpdateExpression="SET amount = :a",
        ExpressionAttributeValues={":a": {"N": "99.5"}},
    )
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "k02"}, "count": {"S": "two, now a string"}})
    dynamodb.delete_item(TableName=table, Key={"pk": {"S": "k03"}})
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "new"}, "count": {"N": "1"}})


STREAM_CHANGES = 4


def segment_sizes(dynamodb: Any, table: str) -> list[int]:
    """How many items each of the snapshot's segments holds (a parallel Scan of the table)."""
    sizes = []
    for segment in range(SEGMENTS):
        pages = dynamodb.get_paginator("scan").paginate(
            TableName=table, Segment=segment, TotalSegments=SEGMENTS, Select="COUNT"
        )
        sizes.append(sum(page["Count"] for page in pages))
    return sizes


def committed_results(emulators: Emulators, app: str) -> list[dict[str, Any]]:
    """The DynamoDB batch results the application's Spark jobs recorded in the outcomes table, oldest first."""
    rows = query(
        emulators,
        "SELECT RESULT FROM ANALYTICS.RAW.DYNAMODB_INGEST_BATCH_OUTCOMES "
        f"WHERE APPLICATION_NAME = '{app}' AND COMMITTED ORDER BY RECORDED_AT",
    )
    return [json.loads(r[0])["detail"] for r in rows]


def count_loss(expected: dict[str, Any], actual: dict[str, Any]) -> int:
    """Keys of the Scan missing from Snowflake or with another item, and rows of deleted keys."""
    wrong = {key for key, item in expected.items() if actual.get(key) != item}
    return len(wrong) + len(set(actual) - set(expected))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_table_equals_a_scan_after_the_fault(
    case: Case, emulators: Emulators, dag_env: dict[str, str], outcomes: Any, tmp_path: Path
) -> None:
    dynamodb = emulators.boto3_client("dynamodb")
    suffix = unique("x").split("-")[-1]
    app, source = f"ddb-fm-{suffix}", f"ddb-fm-src-{suffix}"
    destination = source.replace("-", "_").upper()  # destination_table_template "{table}"
    create(dynamodb, source)
    put_items(dynamodb, source)
    sizes = segment_sizes(dynamodb, source)
    assert min(sizes) > ITEMS_PER_SEGMENT_AND_BATCH, sizes  # each segment takes two batches
    # The puts' stream records are gone, as after the stream's retention: only the snapshot has them.
    trim(emulators.aws_endpoint, source, before=datetime.now(UTC) + timedelta(seconds=2))
    with emulators.snowflake_connect() as conn:
        conn.cursor().execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
        conn.cursor().execute("CREATE SCHEMA IF NOT EXISTS ANALYTICS.RAW")
    connector = {
        "connector_id": app.replace("-", "_"),
        "source": {
            "type": "dynamodb",
            "region": "us-east-1",
            "application_name": app,
            "tables": [source],
            "layout": "packed",
            "engine": "spark",
            "snapshot_total_segments": SEGMENTS,
            "snapshot_max_items_per_segment": ITEMS_PER_SEGMENT_AND_BATCH,
            # One snapshot batch per run: the faulted run's first batch, the retry's second.
            "snapshot_max_batches_per_run": 1,
            "snapshot_read_units_per_second": 10000,
        },
        "destination": {"database": "ANALYTICS", "schema": "RAW"},
        "batch": {"schedule": None, "retries": 0, "lease_duration_seconds": 60, **case.batch},
    }
    dag_file = write_connector(tmp_path / "dags", connector)
    dag_id = f"dynamodb_snowflake_{connector['connector_id']}_sync"
    run_env = {**dag_env, "AIRFLOW__CORE__DAGS_FOLDER": str(dag_file.parent)}

    # The lease table's checkpoint write (LeaseTable.checkpoint) of this case's table.
    kill_worker = {"operation": "DynamoDB.UpdateItem", "contains_all": ["checkpointed_at", app]}
    first = run_with_faults(
        emulators, run_env, dag_file, dag_id, tmp_path / "run1.log", app=app, snowflake=case.snowflake,
        kill_worker_on=kill_worker if case.kill_worker_in_checkpoint else None,
    )  # fmt: skip
    code, fired, log = first.code, first.fired, first.log
    if case.delete_lease_table and code == 0:
        delete_table(dynamodb, app)
        fired = True
    first_run = first.state
    assert fired, f"the fault never fired:\n{log.read_text()[-3000:]}"
    # The first batch (a batch of each segment) is in Snowflake exactly when it was committed.
    after_fault = query(emulators, f"SELECT COUNT(*) FROM ANALYTICS.RAW.{destination}")
    committed_rows = SEGMENTS * ITEMS_PER_SEGMENT_AND_BATCH if case.committed else 0
    assert after_fault == [(committed_rows,)], (after_fault, log.read_text()[-3000:])

    change_items(dynamodb, source)
    if case.kill_worker_in_checkpoint or case.batch:
        expire_locks(dynamodb, app)  # the leases the killed worker (or continuous driver) held expire
    runs = 1
    retry_failure = None
    while runs < MAX_RUNS and loaded(emulators, destination) != scanned(dynamodb, source):
        retry = run_dag(dag_id, dag_env, dag_file=dag_file, log_path=tmp_path / f"run{runs + 1}.log")
        runs += 1
        if retry.returncode != 0:
            retry_failure = (retry.stdout + retry.stderr)[-4000:]
            break
    expected, actual = scanned(dynamodb, source), loaded(emulators, destination)
    keys = [r[0] for r in query(emulators, f"SELECT PK FROM ANALYTICS.RAW.{destination}")]
    outcome = Outcome(
        case=case.name,
        first_run=first_run,
        fault_fired=fired,
        runs=runs,
        rows=len(keys),
        lost=count_loss(expected, actual),
        duplicated=len(keys) - len(set(keys)),
    )
    outcomes(outcome)  # before any assertion: a failed case is printed in the matrix too
    assert retry_failure is None, f"retry {runs} failed:\n{retry_failure}"
    assert (outcome.lost, outcome.duplicated) == (0, 0), json.dumps(outcome.__dict__)
    assert actual == expected

    # Nothing was loaded twice: under the one generation the first run started, each committed
    # batch went on from the one before (the snapshot ledger holds every item a batch read once),
    # and each stream change was applied once.
    results = committed_results(emulators, app)
    # (A batch that read nothing is named by where it starts, as the one before it: a continuous
    # driver idle on the stream records one each time it looks.)
    applied = [r["batch_id"] for r in results if r["merge"]["changes_loaded"]]
    assert len(set(applied)) == len(applied), results
    ledger = query(
        emulators,
        "SELECT SEGMENT, ITEMS FROM ANALYTICS.RAW.DYNAMODB_SNAPSHOT_LEDGER "
        f"WHERE APPLICATION_NAME = '{app}' ORDER BY SEGMENT",
    )
    read = [sum(s["items"] for r in results for s in r["segments"] if s["number"] == n) for n in range(SEGMENTS)]
    assert ledger == [(n, items) for n, items in enumerate(read)], (ledger, results)
    # Each change between the runs once through the stream, each item scanned once (the outcome of a
    # committed batch is recorded in its transaction, so a job killed after COMMIT left it too).
    stream_records = sum(s["records_read"] for r in results for s in r["shards"])
    assert stream_records == STREAM_CHANGES, results
    assert sum(r["merge"]["changes_loaded"] for r in results) == sum(read) + STREAM_CHANGES, results
    generations = query(
        emulators,
        f"SELECT GENERATION FROM ANALYTICS.RAW.DYNAMODB_SYNC_GENERATIONS WHERE APPLICATION_NAME = '{app}'",
    )
    assert generations == [(0,)], generations
    if case.batch:
        # Continuous: one Spark application per DAG run, whose batches share its attempt id, and each
        # committed at least its first sync run's batch (the killed one, the one that COMMIT was).
        # How many more fit in its runtime depends on the machine: the loop itself is specified in
        # tests/unit/core/test_dynamodb_continuous.py, and the rows, the ledger and each change
        # applied once are checked above.
        per_attempt = query(
            emulators,
            "SELECT COUNT(*) FROM ANALYTICS.RAW.DYNAMODB_INGEST_BATCH_OUTCOMES "
            f"WHERE APPLICATION_NAME = '{app}' AND COMMITTED GROUP BY ATTEMPT_ID ORDER BY MIN(RECORDED_AT)",
        )
        assert len(per_attempt) == runs and all(n >= 1 for (n,) in per_attempt), (runs, per_attempt)


def test_a_fault_kills_only_the_spark_job_of_its_dynamodb_application(tmp_path: Path) -> None:
    """kill_spark_jobs(app) finds a DynamoDB table's job by its spark-submit name, and no other app's."""
    sleep = "import time; time.sleep(60)"
    jobs = {
        name: subprocess.Popen([sys.executable, "-c", sleep, "org.apache.spark.deploy.SparkSubmit", "--name", name])
        for name in ("dynamodb-to-snowflake-app-a-orders", "dynamodb-to-snowflake-app-ab-orders")
    }
    try:
        killed = kill_spark_jobs("app-a")
        assert killed == [jobs["dynamodb-to-snowflake-app-a-orders"].pid]
        assert jobs["dynamodb-to-snowflake-app-a-orders"].wait(timeout=10) < 0
        assert jobs["dynamodb-to-snowflake-app-ab-orders"].poll() is None
    finally:
        for job in jobs.values():
            job.kill()
            job.wait()


# -- operator mistakes between runs: refused before any side effect, or handled exactly -----------------------

MISTAKES = (
    "DynamoDB mistake: layout changed after a sync (unpacked -> packed)",
    "DynamoDB mistake: application_name renamed without the reset DAG",
    "DynamoDB mistake: items with attribute names no column can take",
)


def unpacked_rows(emulators: Emulators, table: str) -> dict[str, tuple[Any, Any]]:
    """The unpacked destination's rows by partition key: (NAME, QTY)."""
    return {str(r[0]): (r[1], r[2]) for r in query(emulators, f"SELECT PK, NAME, QTY FROM ANALYTICS.RAW.{table}")}


def scanned_rows(dynamodb: Any, table: str, without: set[str]) -> dict[str, tuple[Any, Any]]:
    """A Scan as the unpacked destination holds its NAME and QTY, the set-aside keys left out."""
    items = dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
    return {
        i["pk"]["S"]: (i.get("name", {}).get("S"), int(i["qty"]["N"]) if "qty" in i else None)
        for i in items
        if i["pk"]["S"] not in without
    }


def test_operator_mistakes_are_refused_before_any_side_effect_and_odd_items_are_set_aside(
    emulators: Emulators, dag_env: dict[str, str], outcomes: Any, tmp_path: Path
) -> None:
    dynamodb = emulators.boto3_client("dynamodb")
    suffix = unique("x").split("-")[-1]
    app, source = f"ddb-mistake-{suffix}", f"ddb-mistake-src-{suffix}"
    destination = source.replace("-", "_").upper()
    create(dynamodb, source)
    for n in range(10):
        dynamodb.put_item(TableName=source, Item={"pk": {"S": f"k{n}"}, "name": {"S": f"n{n}"}, "qty": {"N": str(n)}})
    odd = {
        "odd-item": {"ITEM": {"S": "mine"}},
        "odd-case": {"Name": {"S": "a"}, "name": {"S": "b"}},
        "odd-long": {"x" * 300: {"S": "long"}},
    }
    for pk, attributes in odd.items():
        dynamodb.put_item(TableName=source, Item={"pk": {"S": pk}, "qty": {"N": "1"}, **attributes})
    with emulators.snowflake_connect() as conn:
        conn.cursor().execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
        conn.cursor().execute("CREATE SCHEMA IF NOT EXISTS ANALYTICS.RAW")
    connector: dict[str, Any] = {
        "connector_id": app.replace("-", "_"),
        "source": {
            "type": "dynamodb",
            "region": "us-east-1",
            "application_name": app,
            "tables": [source],
            "layout": "unpacked",
            "engine": "spark",
            "snapshot_total_segments": SEGMENTS,
            "snapshot_read_units_per_second": 10000,
        },
        "destination": {"database": "ANALYTICS", "schema": "RAW"},
        "batch": {"schedule": None, "retries": 0},
    }
    dag_id = f"dynamodb_snowflake_{connector['connector_id']}_sync"

    def sync(name: str, **source_changes: Any) -> tuple[int, str]:
        dag_file = write_connector(
            tmp_path / "dags", {**connector, "source": {**connector["source"], **source_changes}}
        )
        done = run_dag(dag_id, dag_env, dag_file=dag_file, log_path=tmp_path / f"{name}.log")
        return done.returncode, done.stdout + done.stderr

    code, log = sync("first")
    assert code == 0, log[-4000:]
    before = unpacked_rows(emulators, destination)
    assert before == scanned_rows(dynamodb, source, set(odd))
    dynamodb.put_item(TableName=source, Item={"pk": {"S": "k1"}, "name": {"S": "changed"}, "qty": {"N": "100"}})
    dynamodb.delete_item(TableName=source, Key={"pk": {"S": "k2"}})

    refused = [sync("layout", layout="packed"), sync("renamed", application_name=f"{app}-renamed")]

    assert all(code != 0 for code, _ in refused), [log[-2000:] for _, log in refused]
    assert "created with layout: unpacked" in refused[0][1], refused[0][1][-4000:]
    assert f"is loaded by application {app!r}" in refused[1][1], refused[1][1][-4000:]
    after_refusals = unpacked_rows(emulators, destination)
    code, log = sync("back")
    assert code == 0, log[-4000:]
    expected, actual = scanned_rows(dynamodb, source, set(odd)), unpacked_rows(emulators, destination)
    set_aside = {str(r[0]) for r in query(emulators, f"SELECT PK FROM ANALYTICS.RAW.{destination}_DYNAMODB_FAILURES")}
    keys = [r[0] for r in query(emulators, f"SELECT PK FROM ANALYTICS.RAW.{destination}")]
    lost = count_loss(expected, actual) + len(set(odd) - set_aside)
    for case, runs, first_run in zip(MISTAKES, (2, 3, 1), ("refused", "refused", "success"), strict=True):
        outcomes(
            Outcome(
                case=case, first_run=first_run, fault_fired=True, runs=runs, rows=len(keys), lost=lost,
                duplicated=len(keys) - len(set(keys)),
            )
        )  # fmt: skip
    assert after_refusals == before  # the refused runs changed nothing
    assert (lost, len(keys) - len(set(keys))) == (0, 0)
    assert actual == expected and set_aside == set(odd)
