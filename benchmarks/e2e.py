"""One micro-batch end to end: the ingest DAG's fixed cost and its cost per record, against a bare GetRecords loop.

    .venv/bin/python benchmarks/e2e.py [--records N] [--small n] [--shards S]

Starts a moto server and a fakesnow server, puts JSON orders (about 1 KB each, the fields of
benchmarks/transform.py) into two streams of ``--shards`` shards, a small one of ``--small``
records and a large one of ``--records``, and then, in this run:

* bare loop: the job's Kinesis client (``kinesis_client``, the same timestamp parser) reads every
  shard of each stream from TRIM_HORIZON with GetRecords (Limit 10000) until it is caught up,
  counting records and parsing nothing: the rate at which one client gets records out of the
  emulator, with no pacing;
* DAG runs: ``dag.test()`` of each stream's connector's ingest DAG in a child process, after a
  warm-up run of a third, tiny stream's (not counted: it pays what only a first run pays), the
  small one first (wait_for_records, the sensor; create_lease_table; then ingest: leases, plan,
  SparkSubmitHook -> spark-submit --master local[2] -> one task per shard reads, transforms, writes
  Parquet and PUTs it -> the driver runs COPY INTO and the ledger update in one transaction ->
  DynamoDB checkpoints).

The DAG runs' phases come from their logs: Airflow's timestamps on each task's ``[DAG TEST]``
lines, on the ``Spark-Submit cmd`` line and on Spark's own lines (BlockManager initialised, job
started), and the job's ``phase read+stage took`` and ``commit took`` lines. Two sizes split each
phase into a fixed cost and a cost per record: per record = (large - small) / (records - small
records), fixed = the small run's seconds less its records' share. The target compares the job's
cost per record once the JVM is up (tasks + commit) with the bare loop's, each from the two
streams, so neither side's fixed cost enters the ratio; it is printed, not asserted.

The reader keeps to a shard's read budget (2 MiB and 5 calls per second, as on AWS), which the
bare loop ignores: the floor that budget sets on the large run's reading is printed beside it.
The emulators, not AWS or Snowflake, set these figures, and everything shares the machine's cores
(the load average is printed): compare the rows of one run with each other, not with production.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_kinesis_snowflake.core.sources.readers import kinesis_client
from benchmarks.transform import COLUMNS, order
from tests.emulators.airflow_env import airflow_home_env, migrate, run_dag
from tests.emulators.servers import (
    AWS_KEY,
    REGION,
    SNOWFLAKE_DATABASE,
    SNOWFLAKE_SCHEMA,
    Emulators,
    local_emulators,
)

GET_RECORDS_LIMIT = 10_000
# A shard's read budget, which the job's reader keeps to (core/sources/pacing.py).
SHARD_READ_BYTES_PER_SECOND = 2 << 20
# Spark tasks at once: spark-submit --master local[2].
TASKS_AT_ONCE = 2
WARM_UP_RECORDS = 10
PUT_CHUNK = 500
TARGET = 0.70

DAG_FILE = """\
from pathlib import Path

from airflow_kinesis_snowflake.dags import build_connector_dags

globals().update(build_connector_dags(Path(__file__).parent / "connectors"))
"""

# Lines of the DAG run's log that bound the phases. Every line starts with Airflow's timestamp,
# taken when the line reached the task (spark-submit's output is read line by line as it comes).
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z ")
MARKERS = {
    "sensor_start": "[DAG TEST] starting task_id=wait_for_records",
    "lease_table_start": "[DAG TEST] starting task_id=create_lease_table",
    "ingest_start": "[DAG TEST] starting task_id=ingest",
    "submit": "Spark-Submit cmd:",
    "context_up": "BlockManager: Initialized BlockManager",
    "job_start": "SparkContext: Starting job",
    "first_task": "TaskSetManager: Starting task",
    "ingest_end": "[DAG TEST] end task task_id=ingest",
}
SPARK_VERSION = re.compile(r"SparkContext: Running Spark version (\S+)")
# The job's own lines: the Spark job (collect of the shard tasks), then the driver's commit.
READ_STAGE = re.compile(r"phase read\+stage took ([\d.]+) s")
COMMIT = re.compile(r"commit took ([\d.]+) s")
AIRFLOW = "Airflow: start-up, run end"
SENSOR = "sensor wait_for_records"
READ_STAGE_PHASE = "read+transform+stage (Spark tasks)"
COMMIT_PHASE = "commit (COPY INTO + ledger)"


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    note: str = ""
    sub: bool = True


@dataclass(frozen=True)
class Connector:
    """One stream and the connector that loads it into a table of its own."""

    name: str
    records: int

    @property
    def stream(self) -> str:
        return f"orders-e2e-{self.name}"

    @property
    def connector_id(self) -> str:
        return f"orders_e2e_{self.name}"

    @property
    def table(self) -> str:
        return f"ORDERS_E2E_{self.name.upper()}"

    @property
    def dag_id(self) -> str:
        return f"kinesis_snowflake_{self.connector_id}_ingest"


def payloads(count: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    return [json.dumps(order(rng, i)).encode() for i in range(count)]


def put_all(kinesis: Any, stream: str, bodies: list[bytes]) -> None:
    """PutRecords in chunks of 500, from one thread.

    moto's Shard.put_record is not safe for concurrency (two requests in flight on one shard can
    get the same sequence number, and one record replaces the other), and the server is bound by
    one interpreter lock anyway, so threads lose records and save little time. Loading takes
    minutes: moto finds a shard's last sequence number by listing all its records, on every put.
    """
    for start in range(0, len(bodies), PUT_CHUNK):
        chunk = bodies[start : start + PUT_CHUNK]
        response = kinesis.put_records(
            StreamName=stream,
            Records=[{"Data": body, "PartitionKey": f"order-{start + i}"} for i, body in enumerate(chunk)],
        )
        if response["FailedRecordCount"]:
            raise RuntimeError(f"{response['FailedRecordCount']} records of a PutRecords call failed")


def job_kinesis_client(emulators: Emulators) -> Any:
    """A Kinesis client made as the job makes it (``kinesis_client``), of the moto server."""
    return kinesis_client(
        region_name=REGION,
        endpoint_url=emulators.aws_endpoint,
        aws_access_key_id=AWS_KEY,
        aws_secret_access_key=AWS_KEY,
    )


def bare_loop(kinesis: Any, stream: str) -> tuple[int, int, float]:
    """Read every shard from TRIM_HORIZON until caught up; (records, GetRecords calls, seconds)."""
    started = time.perf_counter()
    records = calls = 0
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        iterator = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            response = kinesis.get_records(ShardIterator=iterator, Limit=GET_RECORDS_LIMIT)
            calls += 1
            records += len(response["Records"])
            if not response["Records"] and response.get("MillisBehindLatest", 0) == 0:
                break
            iterator = response.get("NextShardIterator")
    return records, calls, time.perf_counter() - started


def create_table(emulators: Emulators, name: str) -> str:
    table = f"{SNOWFLAKE_DATABASE}.{SNOWFLAKE_SCHEMA}.{name}"
    columns = ", ".join(f"{c.name} {c.data_type}" for c in COLUMNS.columns)
    conn = emulators.snowflake_connect()
    try:
        cur = conn.cursor()
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {SNOWFLAKE_DATABASE}")
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {SNOWFLAKE_DATABASE}.{SNOWFLAKE_SCHEMA}")
        cur.execute(f"CREATE TABLE {table} ({columns}, KINESISMETADATA OBJECT)")
    finally:
        conn.close()
    return table


def count_rows(emulators: Emulators, table: str) -> int:
    conn = emulators.snowflake_connect()
    try:
        return int(conn.cursor().execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def write_connector(dags_dir: Path, connector_of: Connector) -> Path:
    """The connector's file and the DAG file that turns the folder's connectors into DAGs."""
    connector = {
        "connector_id": connector_of.connector_id,
        "source": {
            "stream_name": connector_of.stream,
            "region": "us-east-1",
            "application_name": f"{connector_of.stream}-bench",
            "initial_position": "TRIM_HORIZON",
            "max_records_per_call": GET_RECORDS_LIMIT,
        },
        "destination": {"database": SNOWFLAKE_DATABASE, "schema": SNOWFLAKE_SCHEMA, "table": connector_of.table},
        # One batch takes the whole backlog; a failed run fails the benchmark instead of retrying.
        "batch": {"schedule": None, "max_records_per_shard": max(1, connector_of.records), "retries": 0},
        # Spark's INFO lines (BlockManager, job and task starts) bound the phases.
        "spark": {"conf": {"spark.log.level": "INFO"}},
    }
    (dags_dir / "connectors").mkdir(parents=True, exist_ok=True)
    (dags_dir / "connectors" / f"{connector_of.connector_id}.yaml").write_text(yaml.safe_dump(connector))
    dag_file = dags_dir / "e2e_dags.py"
    dag_file.write_text(DAG_FILE)
    return dag_file


def first_times(log: str) -> dict[str, datetime]:
    """When each marker line first appears in the log."""
    found: dict[str, datetime] = {}
    for line in log.splitlines():
        stamp = LOG_TIME.match(line)
        if stamp is None:
            continue
        for key, marker in MARKERS.items():
            if key not in found and marker in line:
                found[key] = datetime.fromisoformat(stamp.group(1))
    return found


def phases(log: str, wall: float) -> list[Phase]:
    """The DAG run cut into consecutive phases that add up to its wall time."""
    at = first_times(log)
    read_stage, commit = READ_STAGE.search(log), COMMIT.search(log)
    missing = sorted(set(MARKERS) - set(at)) + [
        name for name, m in (("read+stage", read_stage), ("commit", commit)) if m is None
    ]
    if missing:
        raise RuntimeError(f"the DAG run's log lacks the lines for {', '.join(missing)}: cannot cut it into phases")
    assert read_stage is not None and commit is not None

    def since(start: str, end: str) -> float:
        return (at[end] - at[start]).total_seconds()

    read_stage_s, commit_s = float(read_stage.group(1)), float(commit.group(1))
    in_tasks = since("sensor_start", "ingest_end")
    startup = since("submit", "job_start")
    return [
        Phase(AIRFLOW, wall - in_tasks, "dag.test() before the first task and after the last"),
        Phase(SENSOR, since("sensor_start", "lease_table_start"), "the sensor's one check, to the next task"),
        Phase("create_lease_table", since("lease_table_start", "ingest_start"), "-> ingest starts"),
        Phase("ingest: leases, plan, Snowflake checks", since("ingest_start", "submit"), "-> 'Spark-Submit cmd'"),
        Phase("JVM/Spark start-up", startup, "'Spark-Submit cmd' -> Spark job submitted", sub=False),
        Phase("JVM, SparkContext", since("submit", "context_up"), "-> 'Initialized BlockManager'"),
        Phase(
            "driver: SparkSession, Snowflake DDL, columns",
            since("context_up", "job_start"),
            f"-> 'Starting job'; first task {since('job_start', 'first_task'):.2f} s later",
        ),
        Phase(READ_STAGE_PHASE, read_stage_s, "job's 'phase read+stage took'"),
        Phase(COMMIT_PHASE, commit_s, "job's 'commit took'"),
        Phase(
            "Spark stop, checkpoints",
            since("submit", "ingest_end") - startup - read_stage_s - commit_s,
            "rest of the ingest task",
        ),
    ]


@dataclass(frozen=True)
class Run:
    """One connector's stream, read by the bare loop and loaded by its DAG run."""

    connector: Connector
    megabytes: float
    largest_shard_bytes: int
    bare_records: int
    bare_calls: int
    bare_seconds: float
    wall: float
    phases: list[Phase]
    rows: int
    failures: int
    log_path: Path


def split(small: float, large: float, small_records: int, large_records: int) -> tuple[float, float]:
    """(fixed seconds, seconds per record) of a cost measured at two sizes."""
    per_record = (large - small) / (large_records - small_records)
    return small - per_record * small_records, per_record


def load(emulators: Emulators, connector: Connector, shards: int) -> tuple[float, int, float]:
    """Put the connector's records into its stream; (megabytes, bytes of the largest shard, seconds)."""
    bodies = payloads(connector.records)
    kinesis = emulators.boto3_client("kinesis")
    kinesis.create_stream(StreamName=connector.stream, ShardCount=shards)
    kinesis.get_waiter("stream_exists").wait(StreamName=connector.stream)
    started = time.perf_counter()
    put_all(kinesis, connector.stream, bodies)
    seconds = time.perf_counter() - started
    # put_all's partition keys are order-<i>: a record goes to the shard whose range holds its key's MD5.
    ranges = [
        (int(s["HashKeyRange"]["StartingHashKey"]), int(s["HashKeyRange"]["EndingHashKey"]), s["ShardId"])
        for s in kinesis.list_shards(StreamName=connector.stream)["Shards"]
    ]
    by_shard = dict.fromkeys((shard for _, _, shard in ranges), 0)
    for i, body in enumerate(bodies):
        key = int.from_bytes(hashlib.md5(f"order-{i}".encode(), usedforsecurity=False).digest(), "big")
        shard_id = next(shard for low, high, shard in ranges if low <= key <= high)
        by_shard[shard_id] += len(body) + len(f"order-{i}")
    return sum(map(len, bodies)) / 1e6, max(by_shard.values()), seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="records in the large batch (default 200000)")
    parser.add_argument("--small", type=int, default=2_000, help="records in the small batch (default 2000)")
    parser.add_argument("--shards", type=int, default=4, help="shards of each stream (default 4)")
    args = parser.parse_args(argv)
    if args.small < 1 or args.shards < 1 or args.records <= args.small:
        parser.error("--small and --shards must be at least 1, and --records above --small")

    work = Path(tempfile.mkdtemp(prefix="e2e-benchmark-"))
    # The warm-up's DAG run pays what only a first run pays (compiling, caches) and is not counted.
    warm_up = Connector("warmup", WARM_UP_RECORDS)
    connectors = [warm_up, Connector("small", args.small), Connector("large", args.records)]
    runs: list[Run] = []
    warm_up_seconds = 0.0
    loaded: dict[str, tuple[float, int, float]] = {}

    with local_emulators(work / "emulators") as emulators:
        for connector in connectors:
            loaded[connector.name] = load(emulators, connector, args.shards)
        load_before = os.getloadavg()
        bare = {c.name: bare_loop(job_kinesis_client(emulators), c.stream) for c in connectors}
        tables = {c.name: create_table(emulators, c.table) for c in connectors}
        dag_file = work / "dags" / "e2e_dags.py"
        for connector in connectors:
            dag_file = write_connector(work / "dags", connector)
        env = airflow_home_env(work / "airflow", emulators.airflow_env())
        migrate(env)  # the metadata database, before the clock starts

        for connector in connectors:
            log_path = work / f"dag-run-{connector.name}.log"
            started = time.perf_counter()
            proc = run_dag(connector.dag_id, env, dag_file=dag_file, log_path=log_path)
            wall = time.perf_counter() - started
            log = log_path.read_text()
            if connector is warm_up:
                warm_up_seconds = wall
            if proc.returncode != 0:
                print(
                    f"the {connector.name} DAG run failed (exit {proc.returncode}); its log: {log_path}\n{log[-4000:]}",
                    file=sys.stderr,
                )
                return 1
            if connector is warm_up:
                continue
            megabytes, largest, _ = loaded[connector.name]
            records, calls, seconds = bare[connector.name]
            runs.append(
                Run(
                    connector,
                    megabytes,
                    largest,
                    records,
                    calls,
                    seconds,
                    wall,
                    phases(log, wall),
                    count_rows(emulators, tables[connector.name]),
                    count_rows(emulators, f"{tables[connector.name]}_PARSE_FAILURES"),
                    log_path,
                )
            )
        load_after = os.getloadavg()

    small, large = runs
    spark = SPARK_VERSION.search(large.log_path.read_text())
    print(
        f"end to end: {small.connector.records:,} and {large.connector.records:,} records "
        f"({small.megabytes:.1f} and {large.megabytes:.1f} MB, {large.megabytes * 1e6 / large.connector.records:.0f} "
        f"B/record) in {args.shards} shards each; Python {platform.python_version()}, "
        f"Spark {spark.group(1) if spark else '?'} (--master local[2]); moto and fakesnow servers on loopback"
    )
    print(
        f"{os.cpu_count()} cores; load average (1, 5 min) {load_before[0]:.2f}, {load_before[1]:.2f} before the bare "
        f"loops, {load_after[0]:.2f}, {load_after[1]:.2f} after the DAG runs"
    )
    print(
        "loading the streams (PutRecords of "
        f"{PUT_CHUNK}, one thread; not timed below): {sum(t for _, _, t in loaded.values()):.1f} s"
    )
    print(
        f"warm-up DAG run ({WARM_UP_RECORDS} records, not counted below): {warm_up_seconds:.1f} s; "
        f"DAG run logs: {small.log_path}, {large.log_path}\n"
    )

    def rows_of(run: Run) -> list[tuple[str, float, str, bool]]:
        return [
            ("DAG run, total wall time", run.wall, "run_dag: dag.test() in a child process", False),
            *((p.name, p.seconds, p.note, p.sub) for p in run.phases),
            ("job once the JVM is up: tasks + commit", job_seconds(run), "the target's figure", False),
        ]

    small_rows, large_rows = rows_of(small), rows_of(large)
    width = max(len(name) for name, _, _, _ in large_rows) + 2
    header = (
        f"{'measurement':<{width}}  {'small s':>8}  {'large s':>8}  {'fixed s':>8}  {'us/record':>9}  "
        f"{'x bare':>6}  note"
    )
    print(header)
    print("-" * len(header))
    bare_fixed, bare_per_record = split(small.bare_seconds, large.bare_seconds, small.bare_records, large.bare_records)
    print(
        f"{'bare loop: GetRecords, count only':<{width}}  {small.bare_seconds:8.2f}  {large.bare_seconds:8.2f}  "
        f"{bare_fixed:8.2f}  {bare_per_record * 1e6:9.1f}  {1:6.2f}  "
        f"{large.bare_records:,} records in {large.bare_calls} calls, the job's client, shard after shard"
    )
    for (name, small_s, note, sub), (_, large_s, _, _) in zip(small_rows, large_rows, strict=True):
        fixed, per_record = split(small_s, large_s, small.connector.records, large.connector.records)
        versus = f"{bare_per_record / per_record:6.2f}" if per_record > 0 else f"{'-':>6}"
        label = ("  " if sub else "") + name
        print(
            f"{label:<{width}}  {small_s:8.2f}  {large_s:8.2f}  {fixed:8.2f}  {per_record * 1e6:9.1f}  {versus}  {note}"
        )
    waves = -(-args.shards // TASKS_AT_ONCE)
    floor = large.largest_shard_bytes / SHARD_READ_BYTES_PER_SECOND * waves
    print(
        f"{'  shard read budget, large run (floor)':<{width}}  {'':8}  {floor:8.2f}  {'':8}  {'':9}  {'':6}  "
        f"largest shard's bytes at 2 MiB/s, {waves} wave(s) of {TASKS_AT_ONCE} tasks "
        "(about: a first page waits for nothing)"
    )
    print(
        "fixed s: the small run's seconds less its records' share; us/record: (large - small) / (records - small "
        "records); x bare: the bare loop's us/record over the phase's"
    )

    print()
    same = all(r.rows == r.connector.records and r.bare_records == r.connector.records for r in runs)
    for run in runs:
        print(
            f"rows in {run.connector.table}: {run.rows:,}; records put: {run.connector.records:,}; bare loop counted "
            f"{run.bare_records:,}; parse failures: {run.failures:,}"
        )
    print(f"-> {'equal' if same else 'DIFFERENT'}")
    _, job_per_record = split(job_seconds(small), job_seconds(large), small.connector.records, large.connector.records)
    ratio = bare_per_record / job_per_record
    print(
        f"target: the job's cost per record once the JVM is up within {1 / TARGET:.2f}x the bare loop's "
        f"(records/s >= {TARGET:.0%}): {bare_per_record * 1e6:.1f} / {job_per_record * 1e6:.1f} us = {ratio:.0%} "
        f"-> {'PASS' if ratio >= TARGET else 'MISS'}"
    )
    return 0 if same else 1


def job_seconds(run: Run) -> float:
    by_name = {p.name: p.seconds for p in run.phases}
    return by_name[READ_STAGE_PHASE] + by_name[COMMIT_PHASE]


if __name__ == "__main__":
    sys.exit(main())
