"""Peak memory of one batch: the Python worker and the JVM of a real ``spark-submit`` against the batch's bytes.

    .venv/bin/python benchmarks/memory.py [--sizes 25,75,150] [--max-bytes-per-shard N]

Starts a moto server and a fakesnow server, puts JSON orders (about 1 KB each, the fields of
benchmarks/transform.py) into a one-shard stream until it holds the largest size, and then runs the
job (``spark-submit --master local[2] kinesis_to_snowflake.py --plan ...``, the operator's
submission without Airflow) once per row, each batch from the shard's start under an application
of its own:

* baseline: a batch of one record, so the worker's fixed cost (interpreter, pyarrow, boto3, the
  Snowflake connector) is measured in the same run;
* one batch per ``--sizes`` entry (MB of payload, 10**6 bytes), sized by ``max_records`` (the
  records are alike) with no byte cap;
* the whole shard under the default byte cap ``batch.max_bytes_per_shard`` (or
  ``--max-bytes-per-shard``): what one batch reads of a deep backlog;
* the same with schema evolution on: the job's other path, which reads a range's records once, keeps
  them (Spark persists them) for the two passes over them, and stages them chunk by chunk.

While a job runs, a thread reads ``/proc/<pid>/status`` (VmHWM, the peak resident set) of every
process under spark-submit every 20 ms: the JVM (java), the Python driver (the process
running kinesis_to_snowflake.py), Spark's Python daemon and the workers it forks. A worker's
VmHWM counts the pages it shares with the daemon it was forked from, as a container's memory
accounting does. The table prints each peak, and the worker's peak above the baseline as a
multiple of the batch's payload bytes, and of the chunk a task reads, builds and writes at a time
(``readers.CHUNK_BYTES``): what a worker holds beyond its fixed cost. Rows loaded are
checked against records read. The emulators and the machine's other work share the cores; memory
figures do not depend on them as times do.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_kinesis_snowflake.core.engine.credentials import JOB_AWS_CREDENTIAL_ENV
from airflow_kinesis_snowflake.core.engine.wire import encode
from airflow_kinesis_snowflake.core.model import Destination, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import DEFAULT_MAX_BYTES_PER_SHARD, BatchPlan, ShardRange
from airflow_kinesis_snowflake.core.sources.readers import CHUNK_BYTES
from benchmarks.transform import COLUMNS, order
from tests.emulators.servers import REPO_ROOT, SNOWFLAKE_DATABASE, SNOWFLAKE_SCHEMA, Emulators, local_emulators
from tests.emulators.spark_env import spark_env

STREAM = "orders-memory"
TABLE = "ORDERS_MEMORY"
JOB = REPO_ROOT / "spark_jobs" / "kinesis_to_snowflake.py"
SPARK_SUBMIT = str(Path(sys.executable).parent / "spark-submit")
PUT_CHUNK = 500
SAMPLE_SECONDS = 0.02
MB = 10**6


@dataclass
class Peaks:
    """Peak resident set (VmHWM, bytes) per kind of process under one spark-submit."""

    jvm: int = 0
    driver: int = 0
    daemon: int = 0
    worker: int = 0
    workers: set[int] = field(default_factory=set)


def _status(pid: int) -> dict[str, int]:
    values: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in ("VmHWM", "VmRSS"):
                values[name] = int(rest.split()[0]) * 1024
    return values


def _tree(root: int) -> dict[int, int]:
    """Every live process under ``root`` (and root itself): pid -> parent pid."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            parents[int(entry.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    under = {root}
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in under and pid not in under:
                under.add(pid)
                grew = True
    return {pid: parents.get(pid, 0) for pid in under}


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        return [part.decode(errors="replace") for part in cmdline.read().split(b"\0") if part]


class Sampler(threading.Thread):
    """Samples the processes under ``root`` until stopped, keeping each kind's peak."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.peaks, self._stop_event = root, Peaks(), threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            time.sleep(SAMPLE_SECONDS)

    def stop(self) -> Peaks:
        self._stop_event.set()
        self.join()
        return self.peaks

    def sample(self) -> None:
        tree = _tree(self.root)
        kinds: dict[int, str] = {}
        for pid in sorted(tree):
            try:
                argv = _cmdline(pid)
            except OSError:
                continue
            if not argv:
                continue
            program = Path(argv[0]).name
            if program == "java":
                kinds[pid] = "jvm"
            elif program.startswith("python"):
                kinds[pid] = "driver" if any(str(JOB) == a or a.endswith(JOB.name) for a in argv) else "python"
        # Spark's daemon is started by the JVM; the workers are forked by the daemon.
        pythons = {pid for pid, kind in kinds.items() if kind == "python"}
        for pid in pythons:
            kinds[pid] = "worker" if tree[pid] in pythons else "daemon"
        for pid, kind in kinds.items():
            try:
                hwm = _status(pid).get("VmHWM", 0)
            except OSError:
                continue
            setattr(self.peaks, kind, max(getattr(self.peaks, kind), hwm))
            if kind == "worker":
                self.peaks.workers.add(pid)


@dataclass(frozen=True)
class Run:
    name: str
    records: int
    payload_bytes: int
    rows: int
    seconds: float
    peaks: Peaks


def put_stream(emulators: Emulators, total_bytes: int) -> list[int]:
    """Orders into a one-shard stream until it holds ``total_bytes``; the payload sizes, in order."""
    kinesis = emulators.boto3_client("kinesis")
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    kinesis.get_waiter("stream_exists").wait(StreamName=STREAM)
    rng = random.Random(7)
    sizes: list[int] = []
    held = 0
    while held < total_bytes:
        chunk = [json.dumps(order(rng, len(sizes) + i)).encode() for i in range(PUT_CHUNK)]
        response = kinesis.put_records(
            StreamName=STREAM,
            Records=[{"Data": body, "PartitionKey": f"order-{len(sizes) + i}"} for i, body in enumerate(chunk)],
        )
        if response["FailedRecordCount"]:
            raise RuntimeError(f"{response['FailedRecordCount']} records of a PutRecords call failed")
        sizes += map(len, chunk)
        held += sum(map(len, chunk))
    return sizes


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


def job_env(emulators: Emulators) -> dict[str, str]:
    env = {**os.environ, **spark_env()}
    env.update(
        {
            # Under the job's own names, as the hook gives them (Spark copies the standard ones into its configuration).
            JOB_AWS_CREDENTIAL_ENV["AWS_ACCESS_KEY_ID"]: "testing",
            JOB_AWS_CREDENTIAL_ENV["AWS_SECRET_ACCESS_KEY"]: "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_KINESIS": emulators.aws_endpoint,
            "SNOWFLAKE_CONNECTION_JSON": json.dumps(emulators.snowflake_params()),
            "PYSPARK_PYTHON": sys.executable,
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        }
    )
    return env


def plan_for(max_records: int, max_bytes: int | None, evolution: bool = False) -> BatchPlan:
    """A batch of the shard from its start, under an application of its own (a ledger of its own)."""
    start = StartPosition(InitialPosition.TRIM_HORIZON)
    return BatchPlan(
        application_name=f"memory-{uuid.uuid4().hex[:8]}",
        generation_id="g",
        stream_name=STREAM,
        region="us-east-1",
        destination=Destination(SNOWFLAKE_DATABASE, SNOWFLAKE_SCHEMA, TABLE),
        cutoff=datetime.now(UTC),
        max_records_per_call=10_000,
        ranges=(ShardRange("shardId-000000000000", None, start, max_records, max_bytes=max_bytes),),
        schema_evolution=evolution,
    )


def run_job(plan: BatchPlan, env: dict[str, str], work: Path, name: str) -> tuple[float, Peaks]:
    log = work / f"{name}.log"
    started = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [SPARK_SUBMIT, "--master", "local[2]", str(JOB), "--plan", encode(plan), "--attempt", name],
            env=env,
            cwd=work,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        sampler = Sampler(proc.pid)
        sampler.start()
        code = proc.wait()
        peaks = sampler.stop()
    seconds = time.perf_counter() - started
    if code != 0:
        raise RuntimeError(f"the job of row {name!r} failed (exit {code}); its log: {log}\n{log.read_text()[-3000:]}")
    return seconds, peaks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="25,75,150", help="batch sizes in MB of payload (default 25,75,150)")
    parser.add_argument(
        "--max-bytes-per-shard", type=int, default=None, help="the capped rows' cap (default: the config's default)"
    )
    args = parser.parse_args(argv)
    sizes = sorted(int(s) * MB for s in args.sizes.split(","))
    cap = args.max_bytes_per_shard or DEFAULT_MAX_BYTES_PER_SHARD

    work = Path(tempfile.mkdtemp(prefix="memory-benchmark-"))
    runs: list[Run] = []
    with local_emulators(work / "emulators") as emulators:
        started = time.perf_counter()
        print(f"putting {sizes[-1] / MB:g} MB into {STREAM} ...", file=sys.stderr, flush=True)
        payloads = put_stream(emulators, sizes[-1])
        put_seconds = time.perf_counter() - started
        table = create_table(emulators)
        env = job_env(emulators)
        rows: list[tuple[str, int, int | None, bool]] = [("baseline: 1 record", 1, None, False)]
        for size in sizes:
            rows.append((f"{size // MB} MB, no byte cap", _within_cap(payloads, size), None, False))
        capped = f"byte cap {cap / 2**20:g} MiB"
        rows.append((f"whole shard, {capped}", len(payloads), cap, False))
        # Last: it may add columns to the table (the orders' keys without one).
        rows.append((f"{capped}, schema evolution", len(payloads), cap, True))
        load_before = os.getloadavg()[0]
        for name, max_records, max_bytes, evolution in rows:
            before = count_rows(emulators, table)
            plan = plan_for(max_records, max_bytes, evolution)
            seconds, peaks = run_job(plan, env, work, name.split(":")[0].replace(" ", "-").replace(",", ""))
            loaded = count_rows(emulators, table) - before
            read = max_records if max_bytes is None else _within_cap(payloads, max_bytes)
            runs.append(Run(name, read, sum(payloads[:read]), loaded, seconds, peaks))
        load_after = os.getloadavg()[0]

    print(
        f"memory of one batch: one shard of {len(payloads):,} orders ({sum(payloads) / MB:.1f} MB, "
        f"{sum(payloads) / len(payloads):.0f} B/record); Python {platform.python_version()}, "
        "spark-submit --master local[2]; moto and fakesnow servers on loopback"
    )
    print(
        f"{os.cpu_count()} cores; load average (1 min) {load_before:.2f} before the jobs, {load_after:.2f} after; "
        f"putting the stream took {put_seconds:.0f} s (not measured below); logs: {work}"
    )
    print("peak RSS = the largest VmHWM of a process of that kind; MB = 10**6 bytes\n")
    base = runs[0].peaks.worker
    header = (
        f"{'batch':<34} {'records':>8} {'payload MB':>10} {'worker MB':>9} {'x payload':>9} "
        f"{'(worker-base)/payload':>21} {'JVM MB':>7} {'driver MB':>9} {'seconds':>7}  rows loaded"
    )
    print(header)
    print("-" * len(header))
    equal = True
    for run in runs:
        payload_mb = run.payload_bytes / MB
        over = "" if run is runs[0] else f"{(run.peaks.worker - base) / run.payload_bytes:21.2f}"
        times = f"{run.peaks.worker / run.payload_bytes:9.2f}" if run is not runs[0] else f"{'':>9}"
        same = run.rows == run.records
        equal &= same
        print(
            f"{run.name:<34} {run.records:8,} {payload_mb:10.1f} {run.peaks.worker / MB:9.0f} {times} "
            f"{over:>21} {run.peaks.jvm / MB:7.0f} {run.peaks.driver / MB:9.0f} {run.seconds:7.1f}  "
            f"{run.rows:,} ({'=' if same else 'DIFFERENT from'} records read)"
        )
    print(f"baseline worker: {base / MB:.0f} MB, the fixed cost every worker pays before it reads a record")
    streamed = [run for run in runs[1:] if "evolution" not in run.name]
    if streamed:
        most = max(run.peaks.worker - base for run in streamed)
        print(
            f"worker above the baseline, at most over the rows without schema evolution: {most / MB:.0f} MB = "
            f"{most / CHUNK_BYTES:.1f} x the chunk of {CHUNK_BYTES / MB:.1f} MB a task builds and writes at a time"
        )
    return 0 if equal else 1


def _within_cap(payloads: list[int], cap: int) -> int:
    """Records a batch reads under a byte cap: up to and including the record that reaches it."""
    held = 0
    for i, size in enumerate(payloads):
        held += size
        if held >= cap:
            return i + 1
    return len(payloads)


if __name__ == "__main__":
    sys.exit(main())
