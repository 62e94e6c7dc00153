"""One micro-batch end to end: the ingest DAG against a bare GetRecords loop over the same stream.

    .venv/bin/python benchmarks/e2e.py [--records N] [--shards S]

Starts a moto server and a fakesnow server, puts ``--records`` JSON orders (about 1 KB each, the
fields of benchmarks/transform.py) into a stream of ``--shards`` shards, and then, in this run:

* bare loop: one boto3 client reads every shard from TRIM_HORIZON with GetRecords (Limit 10000)
  until it is caught up, counting records and parsing nothing: the rate at which one client gets
  records out of the emulator;
* DAG run: ``dag.test()`` of the connector's ingest DAG in a child process (create_lease_table,
  then ingest: leases, plan, SparkSubmitHook -> spark-submit --master local[2] -> one task per
  shard reads, transforms, writes Parquet and PUTs it -> the driver runs COPY INTO and the ledger
  update in one transaction -> DynamoDB checkpoints).

The DAG run's phases come from its log: Airflow's timestamps on the ``Spark-Submit cmd`` line and
on Spark's own lines (BlockManager initialised, job started), and the job's ``phase read+stage
took`` and ``commit took`` lines. The target compares the job once the JVM is up (tasks + commit)
with the bare loop; it is printed, not asserted. The emulators, not AWS or Snowflake, set these
figures, and everything shares the machine's cores (the load average is printed): compare the
rows of one run with each other, not with production.
"""

from __future__ import annotations

import argparse
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

from benchmarks.transform import COLUMNS, order
from tests.emulators.airflow_env import airflow_home_env, migrate, run_dag
from tests.emulators.servers import SNOWFLAKE_DATABASE, SNOWFLAKE_SCHEMA, Emulators, local_emulators

STREAM = "orders-e2e"
APPLICATION = "orders-e2e-bench"
CONNECTOR_ID = "orders_e2e"
TABLE = "ORDERS_E2E"
DAG_ID = f"kinesis_snowflake_{CONNECTOR_ID}_ingest"
GET_RECORDS_LIMIT = 10_000
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


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    note: str = ""
    sub: bool = True


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


def create_table(emulators: Emulators) -> str:
    table = f"{SNOWFLAKE_DATABASE}.{SNOWFLAKE_SCHEMA}.{TABLE}"
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


def write_connector(dags_dir: Path, records_per_shard: int) -> Path:
    """The connector file and the DAG file that turns it into DAGs, in a DAGs folder of their own."""
    connector = {
        "connector_id": CONNECTOR_ID,
        "source": {
            "stream_name": STREAM,
            "region": "us-east-1",
            "application_name": APPLICATION,
            "initial_position": "TRIM_HORIZON",
            "max_records_per_call": GET_RECORDS_LIMIT,
        },
        "destination": {"database": SNOWFLAKE_DATABASE, "schema": SNOWFLAKE_SCHEMA, "table": TABLE},
        # One batch takes the whole backlog; a failed run fails the benchmark instead of retrying.
        "batch": {"schedule": None, "max_records_per_shard": records_per_shard, "retries": 0},
    }
    (dags_dir / "connectors").mkdir(parents=True, exist_ok=True)
    (dags_dir / "connectors" / f"{CONNECTOR_ID}.yaml").write_text(yaml.safe_dump(connector))
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
    ingest = since("ingest_start", "ingest_end")
    startup = since("submit", "job_start")
    return [
        Phase("Airflow: start-up, create_lease_table, run end", wall - ingest, "dag.test() outside the ingest task"),
        Phase("ingest: leases, plan, Snowflake checks", since("ingest_start", "submit"), "-> 'Spark-Submit cmd'"),
        Phase("JVM/Spark start-up", startup, "'Spark-Submit cmd' -> Spark job submitted", sub=False),
        Phase("JVM, SparkContext", since("submit", "context_up"), "-> 'Initialized BlockManager'"),
        Phase(
            "driver: SparkSession, Snowflake DDL, columns",
            since("context_up", "job_start"),
            f"-> 'Starting job'; first task {since('job_start', 'first_task'):.2f} s later",
        ),
        Phase("read+transform+stage (Spark tasks)", read_stage_s, "job's 'phase read+stage took'"),
        Phase("commit (COPY INTO + ledger)", commit_s, "job's 'commit took'"),
        Phase(
            "Spark stop, checkpoints",
            since("submit", "ingest_end") - startup - read_stage_s - commit_s,
            "rest of the ingest task",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="records in the batch (default 200000)")
    parser.add_argument("--shards", type=int, default=4, help="shards of the stream (default 4)")
    args = parser.parse_args(argv)
    if args.records < 1 or args.shards < 1:
        parser.error("--records and --shards must be at least 1")

    work = Path(tempfile.mkdtemp(prefix="e2e-benchmark-"))
    log_path = work / "dag-run.log"
    bodies = payloads(args.records)
    megabytes = sum(map(len, bodies)) / 1e6

    with local_emulators(work / "emulators") as emulators:
        kinesis = emulators.boto3_client("kinesis")
        kinesis.create_stream(StreamName=STREAM, ShardCount=args.shards)
        kinesis.get_waiter("stream_exists").wait(StreamName=STREAM)
        started = time.perf_counter()
        put_all(kinesis, STREAM, bodies)
        put_seconds = time.perf_counter() - started
        del bodies

        load_before = os.getloadavg()[0]
        bare_records, bare_calls, bare_seconds = bare_loop(emulators.boto3_client("kinesis"), STREAM)
        table = create_table(emulators)
        dag_file = write_connector(work / "dags", records_per_shard=args.records)
        env = airflow_home_env(work / "airflow", emulators.airflow_env())
        migrate(env)  # the metadata database, before the clock starts

        started = time.perf_counter()
        proc = run_dag(DAG_ID, env, dag_file=dag_file, log_path=log_path)
        wall = time.perf_counter() - started
        load_after = os.getloadavg()[0]
        rows = count_rows(emulators, table)
        failures = count_rows(emulators, f"{table}_PARSE_FAILURES")

    log = log_path.read_text()
    if proc.returncode != 0:
        print(f"the DAG run failed (exit {proc.returncode}); its log: {log_path}\n{log[-4000:]}", file=sys.stderr)
        return 1
    cut = phases(log, wall)
    by_name = {p.name: p.seconds for p in cut}
    job_s = by_name["read+transform+stage (Spark tasks)"] + by_name["commit (COPY INTO + ledger)"]
    bare_rate = bare_records / bare_seconds
    job_rate = args.records / job_s

    spark = SPARK_VERSION.search(log)
    print(
        f"end to end: {args.records:,} records ({megabytes:.1f} MB, {megabytes * 1e6 / args.records:.0f} B/record) "
        f"in {args.shards} shards; Python {platform.python_version()}, Spark {spark.group(1) if spark else '?'} "
        "(--master local[2]); moto and fakesnow servers on loopback"
    )
    print(
        f"{os.cpu_count()} cores; load average (1 min) {load_before:.2f} before the bare loop, "
        f"{load_after:.2f} after the DAG run"
    )
    print(f"loading the stream (PutRecords of {PUT_CHUNK}, one thread; not timed below): {put_seconds:.1f} s")
    print(f"DAG run log: {log_path}\n")

    rows_out: list[tuple[str, float, str]] = [
        ("DAG run, total wall time", wall, "run_dag: dag.test() in a child process"),
        *((("  " if p.sub else "") + p.name, p.seconds, p.note) for p in cut),
        ("job once the JVM is up: tasks + commit", job_s, "the target's figure"),
    ]
    width = max(len(name) for name, _, _ in rows_out)
    header = f"{'measurement':<{width}}  {'seconds':>8}  {'records/s':>10}  {'x bare loop':>11}  note"
    print(header)
    print("-" * len(header))
    print(
        f"{'bare loop: GetRecords, count only':<{width}}  {bare_seconds:8.2f}  {bare_rate:10,.0f}  {1:11.2f}  "
        f"{bare_records:,} records in {bare_calls} calls, one client, shard after shard"
    )
    for name, seconds, note in rows_out:
        rate = args.records / seconds if seconds > 0 else float("inf")
        print(f"{name:<{width}}  {seconds:8.2f}  {rate:10,.0f}  {rate / bare_rate:11.2f}  {note}")
    print("records/s of a phase: all the batch's records over that phase's seconds alone")

    print()
    same = rows == args.records and bare_records == args.records
    print(
        f"rows in {table}: {rows:,}; records put: {args.records:,}; bare loop counted {bare_records:,}; "
        f"parse failures: {failures:,} -> {'equal' if same else 'DIFFERENT'}"
    )
    ratio = job_rate / bare_rate
    print(
        f"target: the job once the JVM is up >= {TARGET:.0%} of the bare loop's records/s: "
        f"{job_rate:,.0f} / {bare_rate:,.0f} = {ratio:.0%} -> {'PASS' if ratio >= TARGET else 'MISS'}"
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
