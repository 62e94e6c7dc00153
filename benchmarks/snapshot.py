"""The snapshot's client cost per item: ``scan_segment`` against a bare boto3 parallel scan, same table, same segments.

    .venv/bin/python benchmarks/snapshot.py [--items 20000] [--segments 4] [--max-items 5000] [--repeats 3]

Both sides read every segment of the same table on a moto server this script starts, one thread
per segment, without a read-rate limit:

* snapshot: ``scan_segment`` in batches of ``--max-items``, each resumed from the previous batch's
  cursor (kept as text, as the lease table keeps it), building the ``ItemChange`` values;
* bare boto3: ``client.scan(Segment=..., TotalSegments=...)`` page after page with
  ``ExclusiveStartKey``, keeping the raw items.

The figure compared is the client's CPU time per item: this process's CPU time (all its threads;
the moto server runs in a process of its own) over the items read. Wall time is shown but not
compared: moto answers each Scan call by walking the whole table, so the server's time per call
grows with the table, not with the page, and everything shares the machine's cores, so wall time
moves with the load and with the number of calls. CPU time is what the code of each side costs,
whatever else runs. The sides alternate, ``--repeats`` times each; the table shows the median and
the spread (min-max) of each, the moto server's CPU time next to it, and the ratio of the medians.
The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import psutil
from botocore.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import (
    Segment,
    SegmentCursor,
    describe_table,
    scan_segment,
)
from tests.emulators.servers import AWS_KEY, REGION, start_moto

TABLE = "snapshot-bench"
BARE = "bare boto3 parallel scan"
SNAPSHOT = "scan_segment (snapshot)"


def client(port: int, segments: int) -> Any:
    return boto3.client(
        "dynamodb",
        region_name=REGION,
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id=AWS_KEY,
        aws_secret_access_key=AWS_KEY,
        # moto walks the whole table for each Scan: on a loaded machine an answer takes minutes.
        config=Config(max_pool_connections=max(10, segments), read_timeout=900),
    )


def fill(dynamodb: Any, items: int) -> None:
    dynamodb.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    for start in range(0, items, 25):
        requests = [
            {
                "PutRequest": {
                    "Item": {
                        "pk": {"S": f"customer#{i % 1000}"},
                        "sk": {"N": str(i)},
                        "status": {"S": ("NEW", "PAID", "SHIPPED")[i % 3]},
                        "amount": {"N": f"{i}.{i % 100:02d}"},
                        "address": {"M": {"city": {"S": "Zürich"}, "zip": {"N": "8001"}}},
                        "note": {"S": "leave at door " * 4},
                    }
                }
            }
            for i in range(start, min(items, start + 25))
        ]
        left = dynamodb.batch_write_item(RequestItems={TABLE: requests}).get("UnprocessedItems")
        if left:
            raise RuntimeError(f"moto left items unwritten: {left}")


def bare_segment(dynamodb: Any, number: int, total: int) -> int:
    items: list[Any] = []
    request: dict[str, Any] = {"TableName": TABLE, "Segment": number, "TotalSegments": total}
    while True:
        page = dynamodb.scan(**request)
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return len(items)
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def snapshot_segment(dynamodb: Any, number: int, total: int, max_items: int) -> int:
    table = describe_table(dynamodb, TABLE)
    segment, cursor, read = Segment(0, number, total), None, 0
    while True:
        batch = scan_segment(dynamodb, table, segment, cursor, max_items, None)
        read += len(batch.changes)
        if batch.done:
            return read
        cursor = SegmentCursor.from_text(batch.cursor.to_text()) if batch.cursor else None


@dataclass(frozen=True)
class Run:
    """One side's read of the whole table: items, wall seconds, this process's and moto's CPU seconds."""

    items: int
    wall: float
    cpu: float
    server_cpu: float


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def timed(work: Any, segments: int, server: psutil.Process) -> Run:
    server_before, cpu_before, started = cpu_seconds(server), time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(max_workers=segments) as pool:
        counts = list(pool.map(work, range(segments)))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_before
    return Run(sum(counts), wall, cpu, cpu_seconds(server) - server_before)


def spread(values: list[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--max-items", type=int, default=5000, help="items per segment per batch (snapshot side)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work_dir = Path(tempfile.mkdtemp(prefix="snapshot-bench-"))
    server, port = start_moto(work_dir)
    load_before = os.getloadavg()
    try:
        dynamodb = client(port, args.segments)
        fill(dynamodb, args.items)
        moto = psutil.Process(server.process.pid)
        sides = {
            BARE: lambda n: bare_segment(dynamodb, n, args.segments),
            SNAPSHOT: lambda n: snapshot_segment(dynamodb, n, args.segments, args.max_items),
        }
        for work in sides.values():  # warm-up: imports, connections, the first describe
            timed(work, args.segments, moto)
        runs: dict[str, list[Run]] = {name: [] for name in sides}
        for _ in range(args.repeats):
            for name, work in sides.items():
                run = timed(work, args.segments, moto)
                if run.items != args.items:
                    raise RuntimeError(f"{name} read {run.items} items of {args.items}")
                runs[name].append(run)
    finally:
        server.stop()
    load_after = os.getloadavg()

    print(
        f"\nSnapshot Scan, client cost: {args.items} items, {args.segments} segments, one thread each, "
        f"no rate limit (moto server); {args.repeats} runs per side, alternating, after a warm-up"
    )
    print(
        f"{os.cpu_count()} cores; load average (1, 5 min) {load_before[0]:.2f}, {load_before[1]:.2f} before, "
        f"{load_after[0]:.2f}, {load_after[1]:.2f} after\n"
    )
    header = (
        f"{'reader':<26} {'client CPU us/item':>18} {'(min-max)':>12} {'x bare':>7} "
        f"{'wall s':>7} {'(min-max)':>11} {'moto CPU s':>10}"
    )
    print(header)
    print("-" * len(header))
    per_item = {name: [r.cpu / r.items * 1e6 for r in side] for name, side in runs.items()}
    base = statistics.median(per_item[BARE])
    for name, side in runs.items():
        median = statistics.median(per_item[name])
        walls, server_cpu = [r.wall for r in side], statistics.median(r.server_cpu for r in side)
        print(
            f"{name:<26} {median:>18.1f} {spread(per_item[name]):>12} {median / base:>7.2f} "
            f"{statistics.median(walls):>7.2f} {spread(walls):>11} {server_cpu:>10.1f}"
        )
    ratio = base / statistics.median(per_item[SNAPSHOT])
    print(f"\nitems per client CPU second, snapshot / bare boto3 (medians): {ratio:.2f}x  (target >= 0.8x)")
    print(
        f"(snapshot side: batches of {args.max_items} items per segment, resumed from text cursors; "
        "moto CPU: the server's, for the emulator's share, not compared)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
