"""Freshness: how long a record takes from PutRecords to a row Snowflake queries, per batch mode.

    .venv/bin/python benchmarks/freshness.py [--minutes M] [--rate R] [--shards S]

Starts a moto server and a fakesnow server and, in one run, measures two connectors of the same
stream shape, one after the other:

* scheduled: ``batch.mode: scheduled``; the ingest DAG is run back to back (``dag.test()`` in a
  child process, the next run as soon as the last one ended: the shortest interval a schedule can
  give; a real ``*/5`` schedule adds up to five minutes to every figure);
* continuous: ``batch.mode: continuous``; one DAG run whose Spark driver runs micro-batches back
  to back for the whole window (plus a margin to drain).

For ``--minutes`` a producer thread puts ``--rate`` records per second (PutRecords every quarter
second), each carrying its id and the time it was put. A poller queries the table twice a second;
a record's freshness is the time its row was first seen minus the time it was put (so the figures
include up to half a second of polling). Throughput is the rows loaded per second between the first
put and the last row seen. The continuous window starts once the Spark application is up (its first
micro-batch is logged): the start-up is a once-per-runtime cost, told on its own line. The targets
(continuous p50 <= 10 s, p95 <= 20 s) are printed, not asserted. The emulators, not AWS or
Snowflake, set these figures, and everything shares the machine's cores (the load average is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.emulators.airflow_env import airflow_home_env, migrate, run_dag
from tests.emulators.servers import SNOWFLAKE_DATABASE, SNOWFLAKE_SCHEMA, Emulators, local_emulators

MODES = ("scheduled", "continuous")
TARGET_P50, TARGET_P95 = 10.0, 20.0
PUT_INTERVAL = 0.25
POLL_INTERVAL = 0.5
DRAIN_MINUTES = 1.0
FIRST_BATCH = "airflow_kinesis_snowflake.core.batch: Batch "

DAG_FILE = """\
from pathlib import Path

from airflow_kinesis_snowflake.dags import build_connector_dags

globals().update(build_connector_dags(Path(__file__).parent / "connectors"))
"""


@dataclass(frozen=True)
class Measured:
    mode: str
    put: int
    latencies: list[float]
    seconds: float  # first put -> last row seen
    dag_runs: int
    startup: float | None = None  # continuous: DAG run start -> first micro-batch planned

    @property
    def rows(self) -> int:
        return len(self.latencies)

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def names(mode: str) -> tuple[str, str, str, str]:
    """Stream, application, connector id and table of a mode's connector."""
    return f"fresh-{mode}", f"fresh-{mode}-bench", f"fresh_{mode}", f"FRESH_{mode.upper()}"


def write_connectors(dags_dir: Path, minutes: float) -> Path:
    (dags_dir / "connectors").mkdir(parents=True, exist_ok=True)
    for mode in MODES:
        stream, app, connector_id, table = names(mode)
        batch: dict[str, Any] = {"schedule": None, "retries": 0}
        if mode == "continuous":
            batch.update(mode="continuous", max_runtime_minutes=minutes + DRAIN_MINUTES)
        connector = {
            "connector_id": connector_id,
            "source": {"stream_name": stream, "region": "us-east-1", "application_name": app},
            "destination": {"database": SNOWFLAKE_DATABASE, "schema": SNOWFLAKE_SCHEMA, "table": table},
            "batch": batch,
        }
        (dags_dir / "connectors" / f"{connector_id}.yaml").write_text(yaml.safe_dump(connector))
    dag_file = dags_dir / "freshness_dags.py"
    dag_file.write_text(DAG_FILE)
    return dag_file


def create_table(emulators: Emulators, table: str) -> str:
    name = f"{SNOWFLAKE_DATABASE}.{SNOWFLAKE_SCHEMA}.{table}"
    conn = emulators.snowflake_connect()
    try:
        cur = conn.cursor()
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {SNOWFLAKE_DATABASE}")
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {SNOWFLAKE_DATABASE}.{SNOWFLAKE_SCHEMA}")
        cur.execute(f"CREATE TABLE {name} (ID NUMBER(38,0), PUT_AT NUMBER(38,6), KINESISMETADATA OBJECT)")
    finally:
        conn.close()
    return name


class Producer(threading.Thread):
    """PutRecords of ``rate`` records per second, every quarter second, for ``seconds``."""

    def __init__(self, kinesis: Any, stream: str, rate: float, seconds: float) -> None:
        super().__init__(daemon=True)
        self.kinesis, self.stream, self.rate, self.seconds = kinesis, stream, rate, seconds
        self.put_at: dict[int, float] = {}
        self.first = float("nan")

    def run(self) -> None:
        start = self.first = time.time()
        sent = ticks = 0
        while (now := time.time()) < start + self.seconds:
            due = int((now - start) * self.rate)
            if due > sent:
                ids = range(sent, due)
                records = [
                    {"Data": json.dumps({"id": i, "put_at": now}).encode(), "PartitionKey": f"order-{i}"} for i in ids
                ]
                response = self.kinesis.put_records(StreamName=self.stream, Records=records)
                if response["FailedRecordCount"]:
                    raise RuntimeError(f"{response['FailedRecordCount']} records of a PutRecords call failed")
                self.put_at.update(dict.fromkeys(ids, now))
                sent = due
            ticks += 1
            time.sleep(max(0.0, start + ticks * PUT_INTERVAL - time.time()))


class Poller(threading.Thread):
    """Queries the table every half second; when each id was first seen."""

    def __init__(self, emulators: Emulators, table: str) -> None:
        super().__init__(daemon=True)
        self.emulators, self.table = emulators, table
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        conn = self.emulators.snowflake_connect()
        try:
            while not self.stop.is_set():
                now = time.time()
                for (row_id,) in conn.cursor().execute(f"SELECT ID FROM {self.table}").fetchall():
                    self.seen.setdefault(int(row_id), now)
                self.stop.wait(POLL_INTERVAL)
        finally:
            conn.close()


def start_dag(dag_id: str, dag_file: Path, env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    run_env = {**env, "AIRFLOW__CORE__DAGS_FOLDER": str(dag_file.parent)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.emulators.run_dag", str(dag_file), dag_id],
        env=run_env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )


def measure(
    mode: str, emulators: Emulators, env: dict[str, str], dag_file: Path, work: Path, args: argparse.Namespace
) -> Measured:
    stream, _, connector_id, table_name = names(mode)
    kinesis = emulators.boto3_client("kinesis")
    kinesis.create_stream(StreamName=stream, ShardCount=args.shards)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream)
    table = create_table(emulators, table_name)
    dag_id = f"kinesis_snowflake_{connector_id}_ingest"
    producer = Producer(kinesis, stream, args.rate, args.minutes * 60)
    poller = Poller(emulators, table)
    poller.start()
    runs, startup = 0, None
    if mode == "scheduled":
        producer.start()
        deadline = time.time() + args.minutes * 60 + DRAIN_MINUTES * 60 + 600
        while time.time() < deadline:
            proc = run_dag(dag_id, env, dag_file=dag_file, log_path=work / f"{mode}-run{runs + 1}.log")
            runs += 1
            if proc.returncode != 0:
                raise RuntimeError(f"DAG run {runs} of {dag_id} failed; log: {work / f'{mode}-run{runs}.log'}")
            time.sleep(2 * POLL_INTERVAL)  # the poller sees what the run loaded
            if not producer.is_alive() and len(poller.seen) >= len(producer.put_at):
                break
    else:
        log = work / f"{mode}-run1.log"
        started = time.time()
        proc = start_dag(dag_id, dag_file, env, log)
        runs = 1
        while FIRST_BATCH not in log.read_text() and proc.poll() is None:
            time.sleep(0.2)
        startup = time.time() - started
        producer.start()
        if proc.wait(timeout=(args.minutes + DRAIN_MINUTES) * 60 + 900) != 0:
            raise RuntimeError(f"the continuous DAG run of {dag_id} failed; log: {log}")
    producer.join()
    time.sleep(2 * POLL_INTERVAL)
    poller.stop.set()
    poller.join()
    latencies = [poller.seen[i] - at for i, at in producer.put_at.items() if i in poller.seen]
    last = max(poller.seen.values(), default=producer.first)
    return Measured(mode, len(producer.put_at), latencies, last - producer.first, runs, startup)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="producer window per mode (default 3)")
    parser.add_argument("--rate", type=float, default=20.0, help="records put per second (default 20)")
    parser.add_argument("--shards", type=int, default=2, help="shards of each stream (default 2)")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.rate <= 0 or args.shards < 1:
        parser.error("--minutes and --rate must be positive, --shards at least 1")

    work = Path(tempfile.mkdtemp(prefix="freshness-benchmark-"))
    results: list[Measured] = []
    load_before = os.getloadavg()[0]
    with local_emulators(work / "emulators") as emulators:
        dag_file = write_connectors(work / "dags", args.minutes)
        env = airflow_home_env(work / "airflow", emulators.airflow_env())
        migrate(env)
        for mode in MODES:
            results.append(measure(mode, emulators, env, dag_file, work, args))
    load_after = os.getloadavg()[0]

    print(
        f"freshness: {args.rate:g} records/s for {args.minutes:g} min per mode into {args.shards} shards; "
        f"moto and fakesnow servers on loopback; Spark --master local[2]; logs under {work}"
    )
    print(f"{os.cpu_count()} cores; load average (1 min) {load_before:.2f} before, {load_after:.2f} after\n")
    header = (
        f"{'mode':<11}  {'put':>6}  {'loaded':>6}  {'p50 s':>6}  {'p95 s':>6}  {'max s':>6}  "
        f"{'rows/s':>7}  {'DAG runs':>8}  note"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        note = "runs back to back" if r.mode == "scheduled" else f"Spark up {r.startup:.1f} s after the run started"
        print(
            f"{r.mode:<11}  {r.put:>6}  {r.rows:>6}  {r.quantile(0.5):6.1f}  {r.quantile(0.95):6.1f}  "
            f"{max(r.latencies, default=float('nan')):6.1f}  {r.rows / r.seconds:7.1f}  {r.dag_runs:>8}  {note}"
        )
    scheduled, continuous = results
    print(
        f"\nscheduled / continuous: p50 {scheduled.quantile(0.5) / continuous.quantile(0.5):.1f}x, "
        f"p95 {scheduled.quantile(0.95) / continuous.quantile(0.95):.1f}x"
    )
    p50, p95 = continuous.quantile(0.5), continuous.quantile(0.95)
    ok = p50 <= TARGET_P50 and p95 <= TARGET_P95
    print(
        f"target: continuous p50 <= {TARGET_P50:g} s and p95 <= {TARGET_P95:g} s: {p50:.1f} s, {p95:.1f} s "
        f"-> {'PASS' if ok else 'MISS'}"
    )
    complete = all(r.rows == r.put for r in results)
    print(f"every record loaded: {'yes' if complete else 'NO'}")
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
