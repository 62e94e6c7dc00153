"""Loading one batch's rows: Parquet + PUT + COPY INTO (the project's path) against row INSERTs.

    .venv/bin/python benchmarks/write.py [--rows N] [--repeats R]

Both paths load the same rows, built by ``build_batch`` from generated JSON records, into the same
table of a local fakesnow server, through the real snowflake-connector-python:

* stage + COPY: write the batch as Parquet, ``SnowflakeSink.put_file`` it to the stage, and
  ``SnowflakeSink.commit_batch``: COPY INTO plus the ledger update, in one transaction;
* INSERT: ``executemany`` of ``INSERT ... VALUES`` over the same rows in one transaction (the
  connector sends them as multi-row INSERT statements).

fakesnow is an emulator (DuckDB behind Snowflake's wire protocol), so the figures compare the two
code paths on one machine, not what Snowflake itself would do.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_kinesis_snowflake.core.load.schema import ColumnMap, TableColumn
from airflow_kinesis_snowflake.core.load.snowflake_sink import ROWS_DIR, SnowflakeSink, quote_identifier
from airflow_kinesis_snowflake.core.load.transform import build_batch
from airflow_kinesis_snowflake.core.model import Checkpoint, Destination
from airflow_kinesis_snowflake.core.sources.records import KinesisRecord
from tests.emulators.servers import SNOWFLAKE_DATABASE, SNOWFLAKE_SCHEMA, Emulators, start_fakesnow

SHARD = "shardId-000000000000"
STREAM = "orders"
COPY_TABLE, INSERT_TABLE = "ORDERS_BY_COPY", "ORDERS_BY_INSERT"
COLUMNS = ColumnMap(
    [
        TableColumn("ORDER_ID", "NUMBER(38,0)", numeric_precision=38),
        TableColumn("CUSTOMER_ID", "NUMBER(38,0)", numeric_precision=38),
        TableColumn("STATUS", "VARCHAR(16)", max_length=16),
        TableColumn("AMOUNT", "NUMBER(12,2)", numeric_precision=12, numeric_scale=2),
        TableColumn("IS_GIFT", "BOOLEAN"),
        TableColumn("CREATED_AT", "TIMESTAMP_TZ"),
        TableColumn("NOTE", "VARCHAR"),
        TableColumn("DISCOUNT", "FLOAT"),
        TableColumn("ADDRESS", "VARIANT"),
        TableColumn("KINESISMETADATA", "OBJECT"),
    ]
)
COLUMNS_SQL = (
    "ORDER_ID NUMBER(38,0), CUSTOMER_ID NUMBER(38,0), STATUS VARCHAR(16), AMOUNT NUMBER(12,2), "
    "IS_GIFT BOOLEAN, CREATED_AT TIMESTAMP_TZ, NOTE VARCHAR, DISCOUNT FLOAT, ADDRESS VARIANT, "
    "KINESISMETADATA OBJECT"
)


def records(n: int, seed: int = 1) -> list[KinesisRecord]:
    rng = random.Random(seed)
    arrival = datetime(2026, 1, 31, 12, tzinfo=UTC)
    out = []
    for i in range(n):
        body = {
            "order_id": i,
            "customer_id": rng.randint(1, 10**9),
            "status": rng.choice(["NEW", "PAID", "SHIPPED"]),
            "amount": round(rng.uniform(1, 5000), 2),
            "is_gift": rng.random() < 0.1,
            "created_at": f"2026-01-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z",
            "note": " ".join(rng.choice(["fragile", "leave at door", "gift wrap", "café"]) for _ in range(8)),
            "discount": rng.random() / 4,
            "address": {"city": rng.choice(["Berlin", "Zürich"]), "geo": {"lat": rng.uniform(-90, 90)}},
        }
        sequence = str(49590338271490256608559692538361571095921575989136588898 + i)
        out.append(
            KinesisRecord(SHARD, sequence, 0, f"pk-{i}", arrival + timedelta(milliseconds=i), json.dumps(body).encode())
        )
    return out


def insert_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """The batch's rows as connector parameters: JSON text for VARIANT and OBJECT columns."""
    rows = []
    for row in table.to_pylist():
        values = []
        for name, value in row.items():
            if name == "KINESISMETADATA":
                values.append(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
            elif isinstance(value, datetime):
                values.append(value.isoformat())
            else:
                values.append(value)
        rows.append(tuple(values))
    return rows


def timed(run: Callable[[], None]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000, help="rows per load (default 4000)")
    parser.add_argument("--repeats", type=int, default=3, help="loads per path; the best counts")
    args = parser.parse_args(argv)

    batch = build_batch(records(args.rows), STREAM, COLUMNS)
    assert not batch.dead_letters and batch.rows.num_rows == args.rows
    parameters = insert_rows(batch.rows)

    with tempfile.TemporaryDirectory(prefix="write-benchmark-") as tmp:
        work = Path(tmp)
        server, port = start_fakesnow(work)
        try:
            emulators = Emulators(moto_port=0, fakesnow_port=port, work_dir=work)
            conn = emulators.snowflake_connect()
            cur = conn.cursor()
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {SNOWFLAKE_DATABASE}")
            cur.execute(f"CREATE SCHEMA IF NOT EXISTS {SNOWFLAKE_DATABASE}.{SNOWFLAKE_SCHEMA}")
            sink = SnowflakeSink(conn, Destination(SNOWFLAKE_DATABASE, SNOWFLAKE_SCHEMA, COPY_TABLE))
            inserted = SnowflakeSink(conn, Destination(SNOWFLAKE_DATABASE, SNOWFLAKE_SCHEMA, INSERT_TABLE)).table
            for table in (sink.table, inserted):
                cur.execute(f"CREATE TABLE {table} ({COLUMNS_SQL})")
            sink.ensure_support_objects()
            names = ", ".join(quote_identifier(f.name) for f in batch.rows.schema)
            insert = f"INSERT INTO {inserted} ({names}) VALUES ({', '.join(['%s'] * batch.rows.num_columns)})"

            def count(table: str) -> int:
                return int(cur.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])

            def stage_and_copy() -> None:
                # A fresh application and stage directory each time: the ledger starts empty and
                # COPY does not skip a file it loaded before.
                batch_id = uuid.uuid4().hex[:12]
                stage_dir = f"bench/{batch_id}"
                path = work / f"{batch_id}.parquet"
                pq.write_table(batch.rows, path)
                sink.put_file(path, f"{stage_dir}/{ROWS_DIR}")
                result = sink.commit_batch(
                    application_name=f"bench-{batch_id}",
                    generation_id="g",
                    batch_id=batch_id,
                    stage_dir=stage_dir,
                    starts={SHARD: None},
                    ends={SHARD: Checkpoint(batch.rows.column("KINESISMETADATA")[-1]["sequenceNumber"].as_py())},
                    rows=batch.rows.num_rows,
                    failures=0,
                    columns=COLUMNS.columns,
                )
                assert result.rows_loaded == batch.rows.num_rows

            def row_inserts() -> None:
                cur.execute("BEGIN")
                cur.executemany(insert, parameters)
                cur.execute("COMMIT")

            results: dict[str, float] = {}
            paths = [("stage + COPY", stage_and_copy, sink.table), ("INSERT (executemany)", row_inserts, inserted)]
            for name, run, table in paths:
                best = float("inf")
                for _ in range(args.repeats):
                    before = count(table)
                    best = min(best, timed(run))
                    assert count(table) - before == batch.rows.num_rows, f"{name} did not load every row"
                results[name] = best
            # The same rows either way, the semi-structured columns compared as text.
            compared = ", ".join(
                f"{n}::VARCHAR" if n in ("ADDRESS", "KINESISMETADATA") else n for n in batch.rows.schema.names
            )
            differing = cur.execute(
                f"SELECT COUNT(*) FROM ((SELECT {compared} FROM {sink.table} EXCEPT SELECT {compared} FROM {inserted}) "
                f"UNION ALL (SELECT {compared} FROM {inserted} EXCEPT SELECT {compared} FROM {sink.table}))"
            ).fetchone()[0]
            conn.close()
        finally:
            server.stop()

    print(
        f"write path: {args.rows:,} rows of {batch.rows.num_columns} columns (VARIANT and OBJECT "
        f"included), best of {args.repeats}, into a local fakesnow server over HTTP"
    )
    print("fakesnow is an emulator: these figures compare the two paths, not Snowflake itself\n")
    width = max(len(name) for name in results)
    print(f"{'path':<{width}}  {'seconds':>8}  {'rows/s':>10}")
    for name, seconds in results.items():
        print(f"{name:<{width}}  {seconds:8.3f}  {args.rows / seconds:10,.0f}")
    ratio = results["INSERT (executemany)"] / results["stage + COPY"]
    print(f"\nstage + COPY is {ratio:.1f}x the rate of row INSERTs here")
    print(f"rows that differ between the two tables: {differing}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
