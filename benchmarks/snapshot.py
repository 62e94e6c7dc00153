"""The snapshot's Scan throughput: ``scan_segment`` against a bare boto3 parallel scan, same table, same segments.

    .venv/bin/python benchmarks/snapshot.py [--items 20000] [--segments 4] [--max-items 5000] [--repeats 2]

Both sides read every segment of the same table on a moto server this script starts, one thread
per segment, without a read-rate limit:

* snapshot: ``scan_segment`` in batches of ``--max-items``, each resumed from the previous batch's
  cursor (kept as text, as the lease table keeps it), building the ``ItemChange`` values;
* bare boto3: ``client.scan(Segment=..., TotalSegments=...)`` page after page with
  ``ExclusiveStartKey``, keeping the raw items.

Each side is timed from the first request to the last answer, over ``--repeats`` runs taken in
turn; the table shows the best of each and the ratio (target >= 0.8x). moto is an emulator: the
figures compare the two code paths on one machine, not what DynamoDB would serve. moto answers
each Scan call by walking the whole table, so a smaller ``--max-items`` (more, shorter pages than
the bare scan's 1 MB pages) costs the snapshot side more than it would on DynamoDB, where a page
costs what it returns: with 20,000 items and 4 segments, 5000 measured 0.95x and 1000 0.78x.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
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


def client(port: int, segments: int) -> Any:
    return boto3.client(
        "dynamodb",
        region_name=REGION,
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id=AWS_KEY,
        aws_secret_access_key=AWS_KEY,
        config=Config(max_pool_connections=max(10, segments)),
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


def timed(work: Any, segments: int) -> tuple[int, float]:
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=segments) as pool:
        counts = list(pool.map(work, range(segments)))
    return sum(counts), time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--max-items", type=int, default=5000, help="items per segment per batch (snapshot side)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    work_dir = Path(tempfile.mkdtemp(prefix="snapshot-bench-"))
    server, port = start_moto(work_dir)
    try:
        dynamodb = client(port, args.segments)
        fill(dynamodb, args.items)
        best: dict[str, tuple[int, float]] = {}
        sides = {
            "bare boto3 parallel scan": lambda n: bare_segment(dynamodb, n, args.segments),
            "scan_segment (snapshot)": lambda n: snapshot_segment(dynamodb, n, args.segments, args.max_items),
        }
        for _ in range(args.repeats):
            for name, work in sides.items():
                count, seconds = timed(work, args.segments)
                if count != args.items:
                    raise RuntimeError(f"{name} read {count} items of {args.items}")
                if name not in best or seconds < best[name][1]:
                    best[name] = (count, seconds)
    finally:
        server.stop()

    print(
        f"\nSnapshot Scan throughput: {args.items} items, {args.segments} segments, one thread each, "
        f"no rate limit (moto server; best of {args.repeats})\n"
    )
    header = f"{'reader':<26} {'items':>8} {'seconds':>8} {'items/s':>9}"
    print(header)
    print("-" * len(header))
    for name, (count, seconds) in best.items():
        print(f"{name:<26} {count:>8} {seconds:>8.2f} {count / seconds:>9.0f}")
    (bare_count, bare_s), (snap_count, snap_s) = best["bare boto3 parallel scan"], best["scan_segment (snapshot)"]
    ratio = (snap_count / snap_s) / (bare_count / bare_s)
    print(f"\nratio, snapshot / bare boto3 items/s: {ratio:.2f}x  (target >= 0.8x)")
    print(f"(snapshot side: batches of {args.max_items} items per segment, resumed from text cursors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
