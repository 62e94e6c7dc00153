"""DynamoDB requests per micro-batch, by shard count and record count, and by the table's history.

Runs one batch's lease protocol for real against a moto server (sync the shards, take the
leases, renew them while the shards are read with GetRecords, checkpoint, release, delete the
worker item) and counts every DynamoDB request the lease table makes. The figures to watch:
requests grow with shards, not with records, and stay at a handful per shard; and a batch costs
the same requests, pages and items read whether the table holds one earlier worker item or
100,000 (a year of ``*/5`` runs whose items were never deleted), because a batch reads the
leases by key instead of scanning the table.

    .venv/bin/python benchmarks/lease_cost.py [--records 1000 100000] [--shards 1 4 16]
        [--history 1 100000] [--history-shards 4]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_kinesis_snowflake.core.model import InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import eligible_leases, plan_ranges
from airflow_kinesis_snowflake.core.sources.readers import read_shard_range
from airflow_kinesis_snowflake.core.sources.shards import list_shards
from airflow_kinesis_snowflake.core.state.dynamodb import DynamoTable
from airflow_kinesis_snowflake.core.state.leases import LeaseTable, worker_item
from airflow_kinesis_snowflake.core.state.renewal import LeaseKeeper
from tests.emulators.servers import local_emulators


def put_records(kinesis: Any, stream: str, count: int) -> None:
    body = json.dumps({"id": 0, "payload": "x" * 200}).encode()
    for start in range(0, count, 500):
        n = min(500, count - start)
        kinesis.put_records(
            StreamName=stream, Records=[{"Data": body, "PartitionKey": f"k{start + i}"} for i in range(n)]
        )


# Reads that return items, and where their responses hold them.
READS = {
    "GetItem": lambda r: int("Item" in r),
    "BatchGetItem": lambda r: sum(len(v) for v in r.get("Responses", {}).values()),
    "Scan": lambda r: len(r.get("Items", [])),
    "Query": lambda r: len(r.get("Items", [])),
}


def count_reads(dynamodb: Any) -> Counter[str]:
    """Count, on ``dynamodb``'s own client, the pages (responses of reads) and the items they returned."""
    reads: Counter[str] = Counter()

    def after(model: Any, parsed: dict[str, Any], **_: Any) -> None:
        if model.name in READS:
            reads.update({"pages": 1, "items": READS[model.name](parsed)})

    dynamodb.meta.events.register("after-call.dynamodb", after)
    return reads


def one_batch(kinesis: Any, dynamodb: Any, stream: str, app: str) -> tuple[Counter[str], int]:
    """The lease side of one micro-batch; returns DynamoDB requests by operation and records read.

    ``dynamodb`` must be a client of its own: every request it makes is counted.
    """
    calls: Counter[str] = Counter()
    dynamodb.meta.events.register("before-call.dynamodb", lambda model, **_: calls.update([model.name]))
    table = LeaseTable(dynamodb, app)
    leases = table.sync_shards(list_shards(kinesis, stream), StartPosition(InitialPosition.TRIM_HORIZON))
    held = [h for lease in eligible_leases(leases, 0) if (h := table.take(lease, "bench", 300)) is not None]
    keeper = LeaseKeeper(table, "bench", 300)
    records = 0
    cutoff = datetime.now(UTC) + timedelta(hours=1)
    with keeper.keep(held):
        results = {
            r.shard_id: read_shard_range(
                kinesis, stream, r, cutoff=cutoff, max_records_per_call=10000, sleep=lambda _: None
            )
            for r in plan_ranges(held, max_records_per_shard=1_000_000)
        }
    for lease in keeper.leases:
        read = results[lease.shard_id]
        records += len(read.records)
        moved = table.checkpoint(lease, read.last) if read.records else lease
        table.release(moved)
    table.stop_heartbeat("bench")
    return calls, records


def write_history(dynamodb: Any, app: str, count: int) -> float:
    """Write ``count`` worker items of earlier tries (BatchWriteItem, 25 a request); returns seconds taken."""
    started = time.monotonic()
    now = time.time()
    requests = [{"PutRequest": {"Item": worker_item(f"old-run-{i}/try-1/0", 300, now)}} for i in range(count)]
    left = DynamoTable(dynamodb, app, "lease_key").batch_write(requests)
    if left:
        raise RuntimeError(f"{left} worker items were not written")
    return time.monotonic() - started


def history(emulators: Any, sizes: list[int], shards: int) -> list[tuple[int, float, Counter[str], Counter[str], int]]:
    """Per history size: seconds to write it, a steady batch's requests and reads, and a full scan's pages."""
    kinesis, dynamodb = emulators.boto3_client("kinesis"), emulators.boto3_client("dynamodb")
    rows = []
    for size in sizes:
        stream = app = f"history-{shards}-{size}"
        kinesis.create_stream(StreamName=stream, ShardCount=shards)
        kinesis.get_waiter("stream_exists").wait(StreamName=stream)
        put_records(kinesis, stream, 1000)
        LeaseTable(dynamodb, app).create(stream_name=stream, application_name=app)
        one_batch(kinesis, emulators.boto3_client("dynamodb"), stream, app)  # creates the leases
        seconds = write_history(dynamodb, app, size)
        put_records(kinesis, stream, 100)
        counted = emulators.boto3_client("dynamodb")
        reads = count_reads(counted)
        steady, _ = one_batch(kinesis, counted, stream, app)
        scanning = emulators.boto3_client("dynamodb")
        scan_reads = count_reads(scanning)
        LeaseTable(scanning, app).leases()  # what a batch read before: the maintenance paths still do
        rows.append((size, seconds, steady, reads, scan_reads["pages"]))
    return rows


def print_history(rows: list[tuple[int, float, Counter[str], Counter[str], int]], shards: int) -> None:
    print(f"\nA steady batch ({shards} shards) against a table holding earlier worker items (moto server)\n")
    header = (
        f"{'worker items':>12} {'write s':>8} {'requests':>9} {'pages':>6} {'items read':>11} "
        f"{'full-scan pages':>16}  requests by operation"
    )
    print(header)
    print("-" * len(header))
    for size, seconds, steady, reads, scan_pages in rows:
        ops = ", ".join(f"{k} {v}" for k, v in sorted(steady.items()))
        print(
            f"{size:>12} {seconds:>8.1f} {sum(steady.values()):>9} {reads['pages']:>6} {reads['items']:>11} "
            f"{scan_pages:>16}  {ops}"
        )
    (lo, _, lo_calls, lo_reads, _), (hi, _, hi_calls, hi_reads, _) = rows[0], rows[-1]
    print(f"\nratio, {hi} / {lo} earlier worker items (1.00 means independent of the table's history):")
    for name, a, b in (
        ("requests", sum(hi_calls.values()), sum(lo_calls.values())),
        ("pages", hi_reads["pages"], lo_reads["pages"]),
        ("items read", hi_reads["items"], lo_reads["items"]),
    ):
        print(f"  {name:<10} {a}/{b} = {a / b:.2f}")
    print("  (full-scan pages: what reading the leases with a Scan costs; only maintenance paths scan now)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--history", type=int, nargs="+", default=[1, 100_000], help="earlier worker items")
    parser.add_argument("--history-shards", type=int, default=4)
    args = parser.parse_args()
    rows = []
    with local_emulators(Path(tempfile.mkdtemp(prefix="lease-cost-"))) as emulators:
        kinesis, dynamodb = emulators.boto3_client("kinesis"), emulators.boto3_client("dynamodb")
        count_client = lambda: emulators.boto3_client("dynamodb")  # noqa: E731 - a fresh, counted client
        for shards in args.shards:
            for count in args.records:
                stream = app = f"cost-{shards}-{count}"
                kinesis.create_stream(StreamName=stream, ShardCount=shards)
                kinesis.get_waiter("stream_exists").wait(StreamName=stream)
                put_records(kinesis, stream, count)
                LeaseTable(dynamodb, app).create(stream_name=stream, application_name=app)
                first, read = one_batch(kinesis, count_client(), stream, app)
                put_records(kinesis, stream, count // 10)
                steady, _ = one_batch(kinesis, count_client(), stream, app)
                rows.append((shards, count, read, first, steady))
        history_rows = history(emulators, args.history, args.history_shards)

    print("\nDynamoDB requests per micro-batch (moto server; one batch reading the backlog, then a steady one)\n")
    header = f"{'shards':>6} {'records':>8} {'read':>8} {'first':>6} {'steady':>7} {'/shard':>7}  steady by operation"
    print(header)
    print("-" * len(header))
    for shards, count, read, first, steady in rows:
        ops = ", ".join(f"{k} {v}" for k, v in sorted(steady.items()))
        total, steady_total = sum(first.values()), sum(steady.values())
        print(f"{shards:>6} {count:>8} {read:>8} {total:>6} {steady_total:>7} {steady_total / shards:>7.1f}  {ops}")
    by_records = {(s, c): sum(st.values()) for s, c, _, _, st in rows}
    print("\nratio of steady requests, most records / fewest records, per shard count:")
    for shards in args.shards:
        counts = sorted(c for s, c in by_records if s == shards)
        lo, hi = by_records[(shards, counts[0])], by_records[(shards, counts[-1])]
        print(f"  {shards:>2} shards: {hi}/{lo} = {hi / lo:.2f}  (1.00 means independent of record count)")
    print_history(history_rows, args.history_shards)
    return 0


if __name__ == "__main__":
    sys.exit(main())
