"""Staged DynamoDB rows, written as Parquet, loaded by COPY and read back exactly (fakesnow server).

What this does not cover: fakesnow keeps a VARIANT as DuckDB JSON, so that Snowflake parses a
JSON number of up to 38 digits as fixed-point is taken from Snowflake's documentation, not shown
here; the values are compared as the JSON text the connector reads back.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_kinesis_snowflake.core.load.dynamodb_rows import KeyAttribute, Layout, packed_rows, table_columns
from airflow_kinesis_snowflake.core.sources.dynamodb.model import EventName, Item, ItemChange, Version
from tests.conftest import query, unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration

KEYS = (KeyAttribute("pk", "S"), KeyAttribute("sk", "N"))
AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
THIRTY_EIGHT = "-12345678901234567890123456789012345678"
# 37 digits, 17 of them after the point: a double would keep 17 in all.
FRACTION = "-7047450285813637669.56736289691636857"


def test_packed_rows_load_through_copy_and_read_back_exactly(emulators: Emulators, tmp_path: Path) -> None:
    keys: Item = {"pk": {"S": "user#1"}, "sk": {"N": "1.50"}}
    image: Item = {
        **keys,
        "big": {"N": THIRTY_EIGHT},
        "fraction": {"N": FRACTION},
        "huge": {"N": "1E+125"},
        "tiny": {"N": "1E-130"},
        "doc": {"M": {"l": {"L": [{"N": "0.10"}, {"NULL": True}, {"B": b"\x00\xff"}]}}},
        "tags": {"NS": ["10", "9"]},
    }
    changes = [
        ItemChange("orders", keys, image, EventName.INSERT, Version.of_stream(0, "1" * 21), "e1", "s-1", AT),
        ItemChange("orders", keys, None, EventName.REMOVE, Version.of_stream(0, "2" * 21), "e2", "s-1", AT),
    ]
    path = tmp_path / "rows.parquet"
    pq.write_table(packed_rows(changes, KEYS), path)

    table = "ANALYTICS.RAW." + unique("DDB").replace("-", "_").upper()
    columns = table_columns(KEYS, Layout.PACKED, soft_deletes=True)
    names = [c.name for c in columns] + ["DYNAMODB_EVENT"]
    semi = {"DYNAMODBMETADATA", "ITEM"}
    select = ", ".join(f"PARSE_JSON($1:{n})" if n in semi else f"$1:{n}" for n in names)
    conn = emulators.snowflake_connect()
    try:
        cur = conn.cursor()
        cur.execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
        cur.execute("CREATE SCHEMA IF NOT EXISTS ANALYTICS.RAW")
        definitions = ", ".join(f"{c.name} {c.data_type}" for c in columns)
        cur.execute(f"CREATE TABLE {table} ({definitions}, DYNAMODB_EVENT VARCHAR)")
        stage = table + "_STAGE"
        cur.execute(f"CREATE STAGE {stage}")
        cur.execute(f"PUT 'file://{path}' @{stage}/b1/ AUTO_COMPRESS=FALSE")
        loaded = cur.execute(
            f"COPY INTO {table} ({', '.join(names)}) FROM (SELECT {select} FROM @{stage}/b1/) "
            "FILE_FORMAT = (TYPE = PARQUET) ON_ERROR = ABORT_STATEMENT"
        ).fetchall()
        assert sum(int(r[3]) for r in loaded) == 2
    finally:
        conn.close()

    rows = query(
        emulators,
        f"SELECT PK, SK, DYNAMODB_VERSION, DYNAMODB_EVENT, DYNAMODB_DELETED, DYNAMODB_DELETED_AT, "
        f"DYNAMODBMETADATA, ITEM FROM {table} ORDER BY DYNAMODB_VERSION",
    )
    put, removal = rows
    assert put[:5] == ("user#1", "1.5", changes[0].version.to_text(), "INSERT", False)
    item = json.loads(put[7], parse_float=Decimal, parse_int=Decimal)
    assert item == {
        "pk": "user#1",
        "sk": Decimal("1.5"),
        "big": Decimal(THIRTY_EIGHT),
        "fraction": Decimal(FRACTION),
        "huge": "1E+125",
        "tiny": "1E-130",
        "doc": {"l": [Decimal("0.1"), None, "AP8="]},
        "tags": [Decimal(9), Decimal(10)],
    }
    assert json.loads(put[6])["eventID"] == "e1" and json.loads(put[6])["sequenceNumber"] == "1" * 21
    assert removal[:5] == ("user#1", "1.5", changes[1].version.to_text(), "REMOVE", True)
    assert removal[5] == AT and removal[7] is None
