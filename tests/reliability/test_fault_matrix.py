"""Fault matrix: kill or fail each step of a micro-batch, retry the DAG, count losses and duplicates.

Faults are injected at the emulators' boundary (tests/emulators/faults.py): the fakesnow server
kills the Spark job (SIGKILL, JVM and Python processes) when a given statement arrives, fails a
statement, becomes unreachable, or crashes and is started again on its data (as a Snowflake
service restart loses sessions and open transactions, not committed data); the moto server kills
the Airflow worker in the middle of the DynamoDB checkpoint; the lease table is deleted between two
runs, as by hand or by clean-up. One case is not a crash but a neighbour: the clean-up DAG of
another DAG folder, which does not know this connector, deletes with no retention asked for right
after a batch. Three cases run the batch as a job run of an emulated managed platform (EMR
Serverless, Glue, Databricks: the same entry point through a local spark-submit, found by the
application its plan names) and kill that run after its COMMIT. After each fault the DAG is run
again until it succeeds (at least once more), and the table is queried: every case must end with
every record exactly once and the checkpoints at the tips.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.engine.driver import PLAN_ARG
from airflow_kinesis_snowflake.core.engine.wire import Work, WorkKind
from airflow_kinesis_snowflake.core.state.backups import snapshot
from airflow_kinesis_snowflake.core.state.dynamodb import delete_table
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.core.state.metadata import KEY_ATTRIBUTE, RESET_EXPIRES_AT, read_marks
from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.emulators.faults import kill_spark_jobs
from tests.integration.hooks.test_databricks import workspace
from tests.integration.hooks.test_emr_serverless import ROLE as EMR_ROLE
from tests.integration.hooks.test_emr_serverless import emr_serverless, spark_connection
from tests.integration.hooks.test_glue import ROLE as GLUE_ROLE
from tests.integration.hooks.test_glue import glue
from tests.integration.test_cleanup_dag import age_lease_table, dag_folder
from tests.integration.test_cleanup_dag import connector as cleanup_connector
from tests.integration.test_ingest_dag import checkpoints, shard_tips, write_connector

pytestmark = pytest.mark.integration

RECORDS = 200
LEASE_SECONDS = 5


@dataclass(frozen=True)
class Case:
    name: str
    snowflake: list[dict[str, Any]] = field(default_factory=list)
    kill_worker_in_checkpoint: bool = False
    # Faults of the moto server (Kinesis and DynamoDB calls), as tests/emulators/kinesis_extensions.py reads them.
    aws: list[dict[str, Any]] = field(default_factory=list)
    # Rows the table must hold right after the fault, before any retry (None: not checked).
    rows_after_fault: int | None = None
    # After a successful first run, the clean-up DAG of another DAG folder deletes what it takes for unused.
    cleanup_elsewhere: bool = False
    # Before that clean-up, the lease table's checkpoints and heartbeats are dated a month back: only
    # the ledger's commit says the table is in use.
    aged_checkpoints: bool = False
    # Ingest runs at least this many times in all, whether or not the table already looks complete.
    min_runs: int = 1
    # The first run succeeds; then its lease table is deleted, and the next run must load nothing again.
    delete_lease_table: bool = False
    # After the first run, the connector's "reset" (mode delete_table) or "restore" (of a backup of
    # another generation) DAG is killed once it has recorded its intent in Snowflake, right before
    # it changes the lease table (the DynamoDB operation named in aws_kill).
    maintenance_killed: str | None = None
    aws_kill: str = ""
    # More of the connector file's batch section (continuous mode ...).
    batch: dict[str, Any] = field(default_factory=dict)
    # The managed Spark platform (spark.platform) the batches run on, emulated; None: spark-submit.
    platform: str | None = None


CHECKPOINT_FAILS = [
    {"operation": "DynamoDB.UpdateItem", "contains": "checkpoint_sequence_number", "error": "AccessDeniedException"}
]

# Continuous mode: the Spark driver runs the protocol, 40 records per shard and micro-batch (the 200
# records take three), micro-batches for 15 s per DAG run. The driver is killed right after its
# first micro-batch's commit, before the checkpoints; the next DAG run's micro-batches fast-forward
# from the ledger and read on.
CONTINUOUS = {"mode": "continuous", "max_runtime_minutes": 0.25, "max_records_per_shard": 40}

# The Spark job is killed right after its load transaction's COMMIT, before the task reads the
# outcome and checkpoints: on a managed platform, the platform's job run then ends failed.
KILLED_AFTER_COMMIT = [{"match": r"^\s*COMMIT", "when": "after", "action": "kill_spark"}]

CASES = [
    Case("SIGKILL spark-submit after reading, before staging",
         snowflake=[{"match": r"^\s*PUT ", "when": "before", "action": "kill_spark"}]),
    Case("SIGKILL spark-submit after staging, before the load transaction",
         snowflake=[{"match": r"^\s*USE SCHEMA", "when": "before", "action": "kill_spark"}]),
    Case("SIGKILL spark-submit after COPY INTO, before COMMIT",
         snowflake=[{"match": r"^\s*COMMIT", "when": "before", "action": "kill_spark"}]),
    Case("SIGKILL spark-submit after COMMIT, before the DynamoDB checkpoint",
         snowflake=[{"match": r"^\s*COMMIT", "when": "after", "action": "kill_spark"}]),
    Case("SIGKILL the Airflow worker during the DynamoDB checkpoint", kill_worker_in_checkpoint=True),
    Case("COPY INTO fails", snowflake=[{"match": r"^\s*COPY INTO", "when": "before", "action": "error"}]),
    Case("COMMIT fails", snowflake=[{"match": r"^\s*COMMIT", "when": "before", "action": "error"}], rows_after_fault=0),
    Case("The DynamoDB checkpoint write fails (after COMMIT)",
         aws=[{"operation": "DynamoDB.UpdateItem", "contains": "checkpoint_sequence_number",
               "error": "AccessDeniedException"}],
         rows_after_fault=RECORDS),
    Case("Snowflake unreachable for 8 s mid-batch (HTTP 503)",
         snowflake=[{"match": r"^\s*PUT ", "when": "before", "action": "outage", "seconds": 8}]),
    # The fakesnow process dies (os._exit) and is started again 5 s later on the same data: the
    # open load transaction is lost with it, a committed one is not (and must not load twice).
    Case("Snowflake emulator stopped mid-batch and restarted (before COPY INTO)",
         snowflake=[{"match": r"^\s*COPY INTO", "when": "before", "action": "restart", "seconds": 5}],
         rows_after_fault=0),
    Case("Snowflake emulator stopped mid-batch and restarted (after COMMIT)",
         snowflake=[{"match": r"^\s*COMMIT", "when": "after", "action": "restart", "seconds": 5}],
         rows_after_fault=RECORDS),
    Case("Clean-up in another folder (retention 0, confirmed) after the batch",
         cleanup_elsewhere=True, rows_after_fault=RECORDS, min_runs=2),
    Case("Lease table deleted between runs", delete_lease_table=True, rows_after_fault=RECORDS),
    Case("Clean-up in another folder after the batch, with month-old checkpoints (kept by the ledger)",
         cleanup_elsewhere=True, aged_checkpoints=True, rows_after_fault=RECORDS, min_runs=2),
    # The first run's checkpoint write fails after its commit, so the ledger is ahead of DynamoDB when
    # the maintenance DAG dies between its record in Snowflake and its first change to the lease table.
    Case("Reset (delete_table) killed between its record in Snowflake and deleting the lease table",
         aws=CHECKPOINT_FAILS, maintenance_killed="reset", aws_kill="DynamoDB.DeleteTable",
         rows_after_fault=RECORDS),
    Case("Restore killed between its record in Snowflake and writing the leases",
         aws=CHECKPOINT_FAILS, maintenance_killed="restore", aws_kill="DynamoDB.PutItem", rows_after_fault=RECORDS),
    Case("SIGKILL during continuous mode (the driver, after a micro-batch's COMMIT)",
         snowflake=[{"match": r"^\s*COMMIT", "when": "after", "action": "kill_spark"}],
         batch=CONTINUOUS, rows_after_fault=80),
    Case("EMR Serverless job run killed after COMMIT, before the checkpoint",
         snowflake=KILLED_AFTER_COMMIT, platform="emr_serverless"),
    Case("Glue job run killed after COMMIT, before the checkpoint", snowflake=KILLED_AFTER_COMMIT, platform="glue"),
    Case("Databricks run killed after COMMIT, before the checkpoint",
         snowflake=KILLED_AFTER_COMMIT, platform="databricks"),
]  # fmt: skip


@dataclass
class Outcome:
    case: str
    first_run: str
    fault_fired: bool
    runs: int
    rows: int
    lost: int
    duplicated: int


@pytest.fixture(scope="module")
def stream(emulators: Emulators) -> Iterator[tuple[str, Any]]:
    name = unique("faults")
    kinesis = create_stream(emulators, name, shards=2)
    put_json(kinesis, name, [{"id": i} for i in range(RECORDS)])
    yield name, kinesis


def outcome_from_property(value: str) -> Outcome:
    return Outcome(**json.loads(value))


def matrix_lines(rows: list[Outcome]) -> list[str]:
    """The fault matrix as printed at the end of the test run."""
    width = max(len(r.case) for r in rows)
    header = f"{'case':<{width}}  {'first run':<9}  {'fired':<5}  {'runs':>4}  {'rows':>5}  {'lost':>4}  {'dup':>3}"
    lines = ["Fault matrix: every case retried until the DAG succeeded, then checked in the table", header]
    lines.append("-" * len(header))
    lines += [
        f"{r.case:<{width}}  {r.first_run:<9}  {'yes' if r.fault_fired else 'NO':<5}  {r.runs:>4}  "
        f"{r.rows:>5}  {r.lost:>4}  {r.duplicated:>3}"
        for r in rows
    ]
    return lines


@dataclass(frozen=True)
class FirstRun:
    """A DAG run made with faults injected: its exit code, whether a fault fired, and its log."""

    code: int
    fired: bool
    log: Path

    @property
    def state(self) -> str:
        return "succeeded" if self.code == 0 else ("killed" if self.code < 0 else "failed")


def run_with_faults(
    emulators: Emulators,
    env: dict[str, str],
    dag_file: Path,
    dag_id: str,
    log: Path,
    *,
    app: str,
    snowflake: list[dict[str, Any]],
    aws: Sequence[dict[str, Any]] = (),
    kill_worker_on: dict[str, Any] | None = None,
) -> FirstRun:
    """Run the DAG once with the faults injected, then clear them.

    The Snowflake faults touch only ``app``'s Spark job, whatever else runs on the machine;
    ``kill_worker_on`` names the AWS call during which the moto server kills the DAG's process.
    A Snowflake restart among the faults is checked to have happened: a new process serves the
    same data, the one that held the sessions is gone.
    """
    restarts = any(fault["action"] == "restart" for fault in snowflake)
    server_before = emulators.snowflake_server_state() if restarts else None
    emulators.inject_snowflake_faults([{**fault, "application": app} for fault in snowflake])
    emulators.inject_kinesis_faults(list(aws))
    try:
        with log.open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.emulators.run_dag", str(dag_file), dag_id],
                env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
            if kill_worker_on is not None:
                emulators.inject_kinesis_faults([{**kill_worker_on, "action": "kill", "pid": proc.pid}])
            code = proc.wait(timeout=600)
        fired = bool(emulators.served_snowflake_faults() or emulators.served_kinesis_faults())
    finally:
        emulators.inject_snowflake_faults([])
        emulators.inject_kinesis_faults([])
    if server_before is not None and fired:
        server_after = emulators.wait_for_snowflake_restarts(server_before["restarts"] + 1)
        assert server_after["pid"] != server_before["pid"], (server_before, server_after)
    return FirstRun(code, fired, log)


def managed_platform(
    platform: str, emulators: Emulators, request: pytest.FixtureRequest
) -> tuple[dict[str, Any], dict[str, str]]:
    """The connector file's spark section on the emulated ``platform``, and the connections its DAG runs
    need: the Spark connection whose driver reads the Snowflake connection from a secret (and, on
    Databricks, the workspace's connection). The emulated workspace starts only for its case."""
    env: dict[str, str] = {}
    if platform == "emr_serverless":
        emr = emr_serverless(emulators)
        section: dict[str, Any] = {
            "application_id": emr.application_id,
            "execution_role_arn": EMR_ROLE,
            "artifacts": f"s3://{emr.bucket}/jobs",
        }
        secret_id = emr.secret_id
    elif platform == "glue":
        job = glue(emulators)
        section = {"job_name": job.job_name, "role_arn": GLUE_ROLE, "artifacts": f"s3://{job.bucket}/jobs"}
        section.update(worker_type="G.1X", number_of_workers=2)
        secret_id = job.secret_id
    else:
        databricks = request.getfixturevalue("databricks")
        dbx = workspace(emulators, databricks)
        section = {"existing_cluster_id": dbx.cluster_id, "artifacts": f"{dbx.volume}/jobs"}
        secret_id = dbx.secret_id
        env["AIRFLOW_CONN_DATABRICKS_DEFAULT"] = json.dumps(databricks.connection())
    env["AIRFLOW_CONN_SPARK_DEFAULT"] = spark_connection(secret_id)
    return {"platform": platform, platform: {**section, "poll_seconds": 1}}, env


def cleanup_from_another_folder(dag_env: dict[str, str], tmp_path: Path, stream: str, app: str) -> bool:
    """Delete with the clean-up DAG of a DAG folder whose one connector reads ``stream`` under another name.

    Scoped to this case's application names, with no retention asked for. True once the run decided
    on ``app``'s lease table (whatever it decided).
    """
    neighbour = f"{app}-neighbour"
    dag_id = f"cleanup_{uuid.uuid4().hex[:8]}"
    dag_file = dag_folder(
        tmp_path / "neighbour",
        cleanup_connector(neighbour.replace("-", "_"), stream, neighbour, "FM_NEIGHBOUR"),
        dag_id,
    )
    conf = {"dry_run": False, "confirm": "DELETE", "retention_days": 0, "application_name_patterns": [f"{app}*"]}
    proc = run_dag(dag_id, dag_env, dag_file=dag_file, log_path=tmp_path / "cleanup.log", conf=json.dumps(conf))
    return proc.returncode == 0 and f"lease-table {app} [" in proc.stdout + proc.stderr


def kill_maintenance(
    case: Case, emulators: Emulators, env: dict[str, str], dag_file: Path, connector: dict[str, Any], tmp_path: Path
) -> bool:
    """Run the connector's reset or restore DAG, killed right before ``case.aws_kill``; True once it was."""
    cid, app = connector["connector_id"], connector["source"]["application_name"]
    dynamodb = emulators.boto3_client("dynamodb")
    expire_locks(dynamodb, app)  # the failed run's leases expire
    generation = read_marks(dynamodb, app).generation_id  # type: ignore[union-attr]
    if case.maintenance_killed == "reset":
        conf: dict[str, Any] = {"mode": "delete_table", "dry_run": False, "confirm": app}
    else:
        # A backup of an earlier generation, whose ledger marks are not this generation's.
        destination = "ANALYTICS.RAW." + connector["destination"]["table"]
        backup = replace(
            snapshot(LeaseTable(dynamodb, app), reason="test", connector_id=cid, destination=destination),
            generation_id=uuid.uuid4().hex,
        )
        location = tmp_path / "backup.json"
        location.write_text(backup.to_json())
        conf = {"backup": str(location), "dry_run": False, "confirm": app}
    log = tmp_path / f"{case.maintenance_killed}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.emulators.run_dag", str(dag_file),
             f"kinesis_snowflake_{cid}_{case.maintenance_killed}", "--conf", json.dumps(conf)],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        emulators.inject_kinesis_faults(
            [{"operation": case.aws_kill, "contains": app, "action": "kill", "pid": proc.pid}]
        )
        code = proc.wait(timeout=600)
    killed = code < 0 and bool(emulators.served_kinesis_faults())
    emulators.inject_kinesis_faults([])
    # Killed after the record: Snowflake records the change, the table is unchanged, its generation too.
    recorded = query(
        emulators,
        "SELECT REASON FROM ANALYTICS.RAW.KINESIS_INGEST_GENERATIONS WHERE CONFIGURED_APPLICATION_NAME = "
        f"'{app}' ORDER BY RECORDED_AT DESC LIMIT 1",
    )
    assert recorded == [("reset-delete_table" if case.maintenance_killed == "reset" else "restore",)], recorded
    assert read_marks(dynamodb, app).generation_id == generation, log.read_text()[-3000:]  # type: ignore[union-attr]
    expire_locks(dynamodb, app)
    return killed


def expire_locks(dynamodb: Any, app: str) -> None:
    """Date back the leases a failed or killed run left, and the reset mark of a killed reset or restore,
    as when their time has passed."""
    for item in dynamodb.scan(TableName=app, ConsistentRead=True)["Items"]:
        key = {KEY_ATTRIBUTE: item[KEY_ATTRIBUTE]}
        if RESET_EXPIRES_AT in item:
            dynamodb.update_item(TableName=app, Key=key, UpdateExpression=f"SET {RESET_EXPIRES_AT} = :past",
                                 ExpressionAttributeValues={":past": {"N": "0"}})  # fmt: skip
        elif "lease_owner" in item:
            dynamodb.update_item(TableName=app, Key=key, UpdateExpression="SET lease_expires_at = :past",
                                 ExpressionAttributeValues={":past": {"N": "0"}})  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_record_exactly_once_after_the_fault(
    case: Case,
    emulators: Emulators,
    dag_env: dict[str, str],
    stream: tuple[str, Any],
    outcomes: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    name, kinesis = stream
    app = unique("fm-app")
    table = "FM_" + app.split("-")[-1].upper()
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    connector = {
        "connector_id": app.replace("-", "_"),
        "source": {"stream_name": name, "region": "us-east-1", "application_name": app},
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "batch": {"schedule": None, "retries": 0, "lease_duration_seconds": LEASE_SECONDS, **case.batch},
    }
    platform_env: dict[str, str] = {}
    if case.platform is not None:
        connector["spark"], platform_env = managed_platform(case.platform, emulators, request)
    dag_file = write_connector(tmp_path / "dags", connector)
    dag_id = f"kinesis_snowflake_{connector['connector_id']}_ingest"
    retry_env = {**dag_env, **platform_env}
    run_env = {**retry_env, "AIRFLOW__CORE__DAGS_FOLDER": str(dag_file.parent)}

    kill_worker = {"operation": "DynamoDB.UpdateItem", "contains": "checkpoint_sequence_number"}
    first = run_with_faults(
        emulators, run_env, dag_file, dag_id, tmp_path / "run1.log", app=app, snowflake=case.snowflake, aws=case.aws,
        kill_worker_on=kill_worker if case.kill_worker_in_checkpoint else None,
    )  # fmt: skip
    code, fired, log = first.code, first.fired, first.log
    try:
        if case.cleanup_elsewhere and code == 0:
            if case.aged_checkpoints:
                age_lease_table(emulators.boto3_client("dynamodb"), app, f"ANALYTICS.RAW.{table}")
            fired = cleanup_from_another_folder(dag_env, tmp_path, name, app)
        if case.delete_lease_table and code == 0:
            delete_table(emulators.boto3_client("dynamodb"), app)
            fired = True
        if case.maintenance_killed is not None:
            fired = kill_maintenance(case, emulators, run_env, dag_file, connector, tmp_path) and fired
    finally:
        emulators.inject_kinesis_faults([])
    first_run = first.state
    assert fired, f"the fault never fired:\n{log.read_text()[-3000:]}"
    if case.rows_after_fault is not None:
        assert query(emulators, f"SELECT COUNT(*) FROM ANALYTICS.RAW.{table}") == [(case.rows_after_fault,)]

    if case.kill_worker_in_checkpoint or case.aws:
        expire_locks(emulators.boto3_client("dynamodb"), app)  # leases the failed worker may still hold expire
    runs = 1
    retry_failure = None
    while runs < 4 and (
        runs < case.min_runs
        or query(emulators, f"SELECT COUNT(*) FROM ANALYTICS.RAW.{table}") != [(RECORDS,)]
        or not LeaseTable(emulators.boto3_client("dynamodb"), app).exists()
        or checkpoints(emulators, app) != shard_tips(kinesis, name)
    ):
        retry = run_dag(dag_id, retry_env, dag_file=dag_file, log_path=tmp_path / f"run{runs + 1}.log")
        runs += 1
        if retry.returncode != 0:
            retry_failure = (retry.stdout + retry.stderr)[-4000:]
            break
    ids = [r[0] for r in query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table}")]
    outcome = Outcome(
        case=case.name,
        first_run=first_run,
        fault_fired=fired,
        runs=runs,
        rows=len(ids),
        lost=len(set(range(RECORDS)) - set(ids)),
        duplicated=len(ids) - len(set(ids)),
    )
    outcomes(outcome)  # before any assertion: a failed case is printed in the matrix too
    assert retry_failure is None, f"retry {runs} failed:\n{retry_failure}"
    assert (outcome.lost, outcome.duplicated) == (0, 0), json.dumps(outcome.__dict__)
    assert sorted(ids) == list(range(RECORDS))
    assert checkpoints(emulators, app) == shard_tips(kinesis, name)


def test_a_fault_kills_the_job_run_of_its_application_on_a_managed_platform() -> None:
    """kill_spark_jobs(app) finds an emulated platform's job run, a spark-submit without the task's
    --name, by the application its encoded plan names, and no other app's."""

    def plan(application: str) -> str:
        work = Work("kinesis", WorkKind.BATCH, "us-east-1", {"application_name": application})
        return base64.urlsafe_b64encode(zlib.compress(work.to_json().encode())).decode("ascii")

    sleep = "import time; time.sleep(60)"
    jobs = {
        name: subprocess.Popen(
            [sys.executable, "-c", sleep, "org.apache.spark.deploy.SparkSubmit", "job.py", PLAN_ARG, plan(name)]
        )
        for name in ("app-a", "app-ab")
    }
    try:
        killed = kill_spark_jobs("app-a")
        assert killed == [jobs["app-a"].pid]
        assert jobs["app-a"].wait(timeout=10) < 0
        assert jobs["app-ab"].poll() is None
    finally:
        for job in jobs.values():
            job.kill()
            job.wait()
