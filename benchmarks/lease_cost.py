"""DynamoDB requests per micro-batch, by shard count and record count.

Runs one batch's lease protocol for real against a moto server (sync the shards, take the
leases, renew them while the shards are read with GetRecords, checkpoint, release) and counts
every DynamoDB request the lease table makes. The figure to watch: requests grow with shards,
not with records, and stay at a handful per shard.

    .venv/bin/python benchmarks/lease_cost.py [--records 1000 100000] [--shards 1 4 16]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_kinesis_snowflake.core.model import InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import eligible_leases, plan_ranges
from airflow_kinesis_snowflake.core.sources.readers import read_shard_range
from airflow_kinesis_snowflake.core.sources.shards import list_shards
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.core.state.renewal import LeaseKeeper
from tests.emulators.servers import local_emulators


def put_records(kinesis: Any, stream: str, count: int) -> None:
    body = json.dumps({"id": 0, "payload": "x" * 200}).encode()
    for start in range(0, count, 500):
        n = min(500, count - start)
        kinesis.put_records(
            StreamName=stream, Records=[{"Data": body, "PartitionKey": f"k{start + i}"} for i in range(n)]
        )


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 4, 16])
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
