"""build_batch equals the per-record path, record for record, on hand-picked and generated batches."""

from __future__ import annotations

import hashlib
import json
import random
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import aws_kinesis_agg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from aws_kinesis_agg import aggregator, messages_pb2  # aggregator first: it makes the messages importable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_kinesis_snowflake.core.load.evolution import can_have_column
from airflow_kinesis_snowflake.core.load.pipe import pipe_batch
from airflow_kinesis_snowflake.core.load.schema import FAILURE_SCHEMA, METADATA_TYPE, ColumnMap, HeldBack, TableColumn
from airflow_kinesis_snowflake.core.load.transform import (
    Batch,
    BatchFiles,
    build_batch,
    build_batch_reference,
    chunks_of,
    failure_table,
    metadata_array,
)
from airflow_kinesis_snowflake.core.sources.records import (
    DeadLetter,
    KinesisRecord,
    deaggregate,
    kinesis_metadata,
    user_records,
)

SHARD = "shardId-000000000001"
STREAM = "orders"
AWS_SEQ = 49590338271490256608559692538361571095921575989136588898

COLUMNS = ColumnMap(
    [
        TableColumn("ID", "NUMBER(38,0)", numeric_precision=38),
        TableColumn("QTY", "NUMBER(5,0)", numeric_precision=5),
        TableColumn("COUNT", "INTEGER"),
        TableColumn("AMOUNT", "NUMBER(10,2)", numeric_scale=2, numeric_precision=10),
        TableColumn("TOTAL", "NUMBER(38,4)", numeric_scale=4, numeric_precision=38),
        TableColumn("RATIO", "FLOAT"),
        TableColumn("ACTIVE", "BOOLEAN"),
        TableColumn("NAME", "VARCHAR(16777216)"),
        TableColumn("CODE", "VARCHAR(4)", max_length=4),
        TableColumn("STRASSE", "VARCHAR"),  # "Straße" casefolds to it
        TableColumn("CREATED_AT", "TIMESTAMP_TZ(9)"),
        TableColumn("DAY", "DATE"),
        TableColumn("AT", "TIME"),  # no conversion of its own: text
        TableColumn("PAYLOAD", "VARIANT"),
        TableColumn("ATTRS", "OBJECT"),
        TableColumn("TAGS", "ARRAY"),
        TableColumn("KINESISMETADATA", "OBJECT"),  # never mapped from a payload
    ]
)
KEYS = [c.name for c in COLUMNS.columns] + ["Straße", "KinesisMetadata", "unknown", "extra_field"]

ARRIVAL = datetime(2026, 1, 31, 12, 0, 0, 250000, tzinfo=UTC)


def _record(i: int, data: bytes, *, error: str | None = None, arrival: datetime = ARRIVAL) -> KinesisRecord:
    return KinesisRecord(SHARD, str(AWS_SEQ + i), 0, f"pk-{i}", arrival, data, error)


def _records(payloads: list[bytes]) -> list[KinesisRecord]:
    return [_record(i, p) for i, p in enumerate(payloads)]


def _without_nan(table: pa.Table) -> pa.Table:
    # Arrow's equals() holds NaN unequal to itself; both paths store the same NaN.
    for i, column in enumerate(table.columns):
        if pa.types.is_floating(column.type):
            table = table.set_column(i, table.field(i), pc.if_else(pc.is_nan(column), -1.25e300, column))
    return table


def _dead(batch: Batch) -> list[tuple[str, int, str, str | None]]:
    return [(d.record.sequence_number, d.record.sub_sequence_number, d.error, d.column) for d in batch.dead_letters]


def assert_same(records: list[KinesisRecord], columns: ColumnMap = COLUMNS, block_records: int = 4096) -> Batch:
    fast = build_batch(records, STREAM, columns, block_records=block_records)
    reference = build_batch_reference(records, STREAM, columns)
    assert fast.rows.schema == columns.arrow_schema()
    assert reference.rows.schema == columns.arrow_schema()
    assert _without_nan(fast.rows).equals(_without_nan(reference.rows)), (
        f"rows differ:\nfast:      {fast.rows.to_pylist()}\nreference: {reference.rows.to_pylist()}"
    )
    # Dead letters are the same records, in order, with the same reason word for word.
    assert _dead(fast) == _dead(reference)
    assert [d.record for d in fast.dead_letters] == [d.record for d in reference.dead_letters]
    return fast


# -- hand-picked cases ----------------------------------------------------------------------------


def test_empty_batch() -> None:
    batch = assert_same([])
    assert batch.rows.num_rows == 0
    assert batch.dead_letters == []


def test_rows_and_metadata_of_plain_records() -> None:
    batch = assert_same(
        _records(
            [
                b'{"id": 1, "name": "a", "amount": 19.99, "payload": {"b": [1, 2.5, null], "a": "x"}}',
                b'{"ID": 2, "Name": "b", "active": true, "created_at": "2026-01-31T12:00:00Z", "day": "2026-02-01"}',
            ]
        )
    )
    rows = batch.rows.to_pylist()
    assert [r["ID"] for r in rows] == [1, 2]
    assert rows[0]["AMOUNT"] == Decimal("19.99")
    assert rows[0]["PAYLOAD"] == '{"b":[1,2.5,null],"a":"x"}'
    assert rows[1]["CREATED_AT"] == datetime(2026, 1, 31, 12, tzinfo=UTC)
    assert rows[0]["KINESISMETADATA"]["sequenceNumber"] == str(AWS_SEQ)


@pytest.mark.parametrize(
    "payload",
    [
        # keys differing only by case, on one column: a dead letter naming them, even when one is null
        b'{"id": 1, "ID": 2}',
        b'{"Id": null, "ID": 5}',
        b'{"NAME": "first", "name": "second", "Name": "third"}',
        b'{"id": 1, "id": 2}',  # an exact duplicate: json keeps the last value, at the first place
        b'{"Id": 1, "ID": 2, "Id": 3}',
        b'{"Stra\xc3\x9fe": "casefolded", "strasse": "later"}',
        b'{"unknown": 1, "UNKNOWN": 2, "id": 3}',  # no column: ignored, as any unknown key
        # keys with no column, and the metadata column, are ignored
        b'{"unknown": [1, 2], "KINESISMETADATA": {"stream": "forged"}, "kinesisMetadata": 1, "id": 3}',
        b"{}",
        b'{"id": null, "name": null, "payload": null}',
        # numbers as strings, whole floats, and text for every column type
        b'{"id": "12", "qty": 1.0, "count": " 7 ", "amount": "3.14159", "total": 12, "ratio": "1e3"}',
        b'{"id": "1_000", "ratio": "nan", "active": "TRUE", "code": 1234, "name": false, "at": 12.5}',
        b'{"created_at": "2026-01-31T12:00:00.123456+05:30", "day": "2026-02-01", "at": "12:00"}',
        b'{"created_at": "2026-01-31 12:00:00", "day": "20260201"}',
        b'{"payload": "text", "attrs": 1.5, "tags": true, "name": "\xe2\x82\xac \xf0\x9f\x98\x80 caf\xc3\xa9"}',
        b'{"payload": {"nested": {"deeper": [1, {"x": null}], "u": "\\u00e9\\ud83d\\ude00"}}, "tags": []}',
        # floats whose orjson text differs from repr(), in VARIANT and as text
        b'{"payload": [1e-05, 5.5e-05, 0.0001, 1e16, 1e22, -0.0, 1.5e-07, 123456789.123], "name": 1e16}',
        b'{"payload": {"a": 1E2, "b": 0.1e1, "c": 2.5e-5}, "ratio": 1e-5, "amount": 1e-05}',
        b'{"payload": 1e16, "attrs": {"x": 1.5e-07}, "tags": [1e22, 2.0]}',
        b'{"payload": 5e-05}',
        b'{"attrs": {"x": 1.5e-07}}',
        b'{"tags": [2.5e-300, 1e-5]}',
        b'{"payload": [1e16, 1.5e300]}',
        # a string that only looks like an exponent costs speed, not correctness
        b'{"payload": "10e5 and 0.00001 and 1.0E3", "attrs": {"k": "0e1"}}',
        # integers beyond 64 bits, where orjson would give floats
        b'{"payload": 123456789012345678901234567890, "name": -99999999999999999999}',
        b'{"ratio": 18446744073709551616, "total": 12345678901234567890123}',
        b'{"note": "a 20-digit string 12345678901234567890 in a key nobody maps", "id": 1}',
        b'{"payload": {"big": 18446744073709551615, "small": -9223372036854775808}, "ratio": 18446744073709551615}',
        b'{"tags": [-9223372036854775809], "attrs": {"x": 99999999999999999999}}',
        b'{"amount": 18446744073709551616}',
        b'{"total": 18446744073709551616, "id": 2}',
        b'{"code": 18446744073709551616}',
        b'{"name": -9223372036854775809}',
        b'{"active": 18446744073709551616}',
        b'{"payload": 1e19, "name": 1e19}',
        b'{"amount": 0.125, "total": 0.00005}',
        b'{"payload": "price 3e+5 and 1e-7 as text", "attrs": {"k": "x.0000y", "n": 1.5}}',
        # values that do not fit their column
        b'{"id": "abc"}',
        b'{"active": {"a": 1}}',
        b'{"id": 9223372036854775808}',
        b'{"id": 18446744073709551615}',
        b'{"qty": 123456}',
        b'{"id": 1.5}',
        b'{"id": true}',
        b'{"code": "toolong"}',
        b'{"amount": 123456789.5}',
        b'{"amount": 99999999.999}',
        b'{"total": "1e30"}',
        b'{"total": 1234567890123456789012345678901234.5}',
        b'{"ratio": "fast"}',
        b'{"name": {"nested": 1}}',
        b'{"created_at": "yesterday"}',
        b'{"created_at": 1700000000}',
        b'{"day": "2026-02-30"}',
        b'{"id": "1e999999999"}',
        b'{"qty": "1e999999999"}',
        b'{"payload": "\\ud800"}',
        b'{"name": "lone \\udc00 surrogate"}',
        b'{"unknown": "\\ud800", "id": 4}',
        # the first bad value in document order names the reason
        b'{"name": {"x": 1}, "id": "abc"}',
        b'{"id": "abc", "name": {"x": 1}}',
        # not UTF-8, not JSON, not an object
        b"\xff\xfe{}",
        b'{"name": "caf\xe9"}',
        b'{"name": "\xed\xa0\x80"}',
        b"\xef\xbb\xbf{}",
        b"",
        b"   ",
        b"not json",
        b'{"id": 1,}',
        b"{'id': 1}",
        b'{"id": 01}',
        b'{"id": 1} {"id": 2}',
        b'{"id": 1}\n{"id": 2}',
        b"[1, 2]",
        b'[{"id": 1}]',
        b'"text"',
        b"42",
        b"null",
        b"true",
        # accepted by Python's json, not by orjson
        b'{"ratio": NaN, "id": 1}',
        b'{"ratio": -Infinity}',
        b'{"ratio": 1e400, "payload": [1e400]}',
        b'{"payload": ' + b"7" * 5000 + b"}",
        # line breaks: fine between tokens, invalid raw inside a string
        b'{\n  "id": 7,\r\n  "name": "pretty"\n}\n',
        b'{"name": "line\nbreak"}',
        b'{"name": "tab\there"}',
        b'{"name": "escaped\\nbreak\\r\\t"}',
        # deep nesting
        b'{"payload": ' + b"[" * 300 + b"]" * 300 + b"}",
        b'{"payload": ' + b"[" * 600 + b"]" * 600 + b"}",
        b'{"payload": ' + b"[" * 1000 + b"]" * 1000 + b"}",  # within orjson's limit, beyond json's
        b'{"unknown": ' + b"[" * 1000 + b"]" * 1000 + b', "id": 1}',
        b'{"payload": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    ],
)
def test_one_payload_alone_and_among_good_records(payload: bytes) -> None:
    assert_same(_records([payload]))
    good = b'{"id": 1, "name": "x", "payload": {"k": [1, 2]}, "amount": 1.5, "created_at": "2026-01-31T00:00:00Z"}'
    assert_same(_records([good, payload, good, good, payload, good]), block_records=2)


def test_records_with_an_error_are_dead_letters_with_that_error() -> None:
    records = [
        _record(0, b'{"id": 1}'),
        _record(1, b'{"id": 2}', error="corrupt KPL aggregate: 1 of 3 user records could be read"),
        _record(2, b'{"id": 3}'),
    ]
    batch = assert_same(records)
    assert [r["ID"] for r in batch.rows.to_pylist()] == [1, 3]
    assert _dead(batch) == [(str(AWS_SEQ + 1), 0, "corrupt KPL aggregate: 1 of 3 user records could be read", None)]


def test_rows_keep_record_order_across_key_orders_and_fallbacks() -> None:
    payloads = [
        b'{"id": 0, "name": "a"}',
        b'{"name": "b", "id": 1}',
        b'{"ID": 2}',
        b'{"id": "3"}',  # a string: converted value by value
        b'{"id": 4, "unknown": 1}',
        b'{"ratio": NaN, "id": 5}',  # parsed by the per-record path
        b'{"id": 6, "name": "g"}',
    ]
    batch = assert_same(_records(payloads * 3), block_records=4)
    assert [r["ID"] for r in batch.rows.to_pylist()] == [0, 1, 2, 3, 4, 5, 6] * 3


def test_integers_of_up_to_38_digits_land_exactly_in_number_38_0_columns() -> None:
    columns = ColumnMap(
        [
            TableColumn("ID", "NUMBER(38,0)", numeric_precision=38),
            TableColumn("COUNT", "INTEGER"),  # a synonym of NUMBER(38,0)
            TableColumn("WIDE", "NUMBER(20,0)", numeric_precision=20),
            TableColumn("TOTAL", "NUMBER(38,2)", numeric_scale=2, numeric_precision=38),
        ]
    )
    largest = 10**38 - 1
    payloads = [
        b'{"id": 12345678901234567890123456789012345678, "count": -99999999999999999999999999999999999999}',
        b'{"id": 9223372036854775808, "count": 18446744073709551616, "wide": 99999999999999999999}',
        b'{"id": 1, "count": 2, "wide": 3, "total": 123456789012345678901234567890123456}',
        b'{"id": "99999999999999999999999999999999999999", "count": 1e37, "wide": -12345678901234567890}',
        # beyond what the column holds: dead letters naming the column
        b'{"id": 123456789012345678901234567890123456789}',
        b'{"count": -100000000000000000000000000000000000000}',
        b'{"wide": 100000000000000000000}',
        b'{"total": 1234567890123456789012345678901234567}',
        b'{"id": 1.5}',
    ]
    # alone (the per-record path decides each) and many at once (the bulk path's columns)
    batch = assert_same(_records(payloads), columns)
    assert_same(_records(payloads * 50), columns, block_records=64)

    assert batch.rows.column("ID").to_pylist() == [12345678901234567890123456789012345678, 2**63, 1, largest]
    assert batch.rows.column("COUNT").to_pylist() == [-largest, 2**64, 2, 10**37]
    assert batch.rows.column("WIDE").to_pylist() == [None, 10**20 - 1, 3, -12345678901234567890]
    assert batch.rows.column("TOTAL").to_pylist()[2] == Decimal("123456789012345678901234567890123456.00")
    assert [(d.column, d.error) for d in batch.dead_letters] == [
        ("ID", "column ID: number 123456789012345678901234567890123456789 has too many digits for NUMBER(38,0)"),
        ("COUNT", "column COUNT: number -100000000000000000000000000000000000000 has too many digits for NUMBER(38,0)"),
        ("WIDE", "column WIDE: number 100000000000000000000 has too many digits for NUMBER(20,0)"),
        ("TOTAL", "column TOTAL: number 1234567890123456789012345678901234567 has too many digits for NUMBER(38,2)"),
        ("ID", "column ID: expected a whole number for NUMBER, got 1.5"),
    ]


HOLDING_BACK = ColumnMap(COLUMNS.columns, HeldBack("the cap on new columns", can_have_column))


def test_records_with_a_value_for_a_key_held_back_are_dead_letters_kept_whole() -> None:
    many = {f"new{i}": i for i in range(12)}
    payloads = [
        b'{"id": 1, "name": "a"}',
        b'{"id": 2, "unknown": 1}',
        b'{"id": 3, "unknown": null, "Unknown": 5}',  # every spelling counts: 5 has no column
        b'{"id": 4, "": 1, "kinesisMetadata": {"x": 1}, "Stra\u00dfe": "x"}',  # no column can take these
        b'{"extra_field": "x", "unknown": [1], "id": "not a number"}',  # held back first, whatever else
        json.dumps({"id": 6, **many}).encode(),
        b'{"id": 7, "name": "g"}',
    ]
    batch = assert_same(_records(payloads), HOLDING_BACK)
    assert_same(_records(payloads * 20), HOLDING_BACK, block_records=7)

    assert batch.rows.column("ID").to_pylist() == [1, 4, 7]
    kept = "The record is kept whole here rather than loaded without these values"
    assert [(d.record.data, d.error, d.column) for d in batch.dead_letters] == [
        (payloads[1], f'no column for key "unknown": the cap on new columns. {kept}', None),
        (payloads[2], f'no column for key "Unknown": the cap on new columns. {kept}', None),
        (payloads[4], f'no column for keys "extra_field", "unknown": the cap on new columns. {kept}', None),
        (
            payloads[5],
            "no column for keys " + ", ".join(f'"new{i}"' for i in range(10)) + f" and 2 more: the cap on new columns. "
            f"{kept}",
            None,
        ),
    ]


def test_records_with_keys_differing_only_by_case_are_dead_letters_naming_both_keys_and_the_column() -> None:
    """Neither value is loaded in place of the other: the record is kept whole, with the reason, on both paths."""
    columns = ColumnMap([TableColumn("ID", "NUMBER(38,0)"), TableColumn("NAME", "VARCHAR")])
    payloads = [
        b'{"id": 0, "name": "a"}',
        b'{"id": null, "ID": 5}',
        b'{"id": 1, "ID": 2}',
        b'{"name": "b", "Name": null, "id": 3, "ID": 4, "iD": 6}',
        b'{"ID": 7, "name": "c"}',
    ]
    batch = assert_same(_records(payloads), columns)
    # Many of each, so that the bulk path converts the good key orders as a whole.
    many = assert_same(_records(payloads * 40), columns, block_records=16)

    assert batch.rows.column("ID").to_pylist() == [0, 7]
    rename = "rename one in the producer"
    assert [(d.record.data, d.error, d.column) for d in batch.dead_letters] == [
        (payloads[1], f'keys "id" and "ID" both map to column ID; {rename}', "ID"),
        (payloads[2], f'keys "id" and "ID" both map to column ID; {rename}', "ID"),
        (
            payloads[3],
            'keys "name" and "Name" both map to column NAME; keys "id", "ID" and "iD" all map to column ID; '
            "rename them in the producer so that no two differ only by case",
            "NAME",
        ),
    ]
    assert many.rows.num_rows == 80
    assert len(many.dead_letters) == 120
    # Kept in the parse-failure table like any dead letter: the payload, the reason and the column.
    failures = failure_table(batch.dead_letters, STREAM).to_pylist()
    assert [(f["ERROR_MESSAGE"], f["ERROR_COLUMN"]) for f in failures[:1]] == [
        (f'keys "id" and "ID" both map to column ID; {rename}', "ID")
    ]


def test_keys_equal_exactly_are_one_key_whose_last_value_loads_on_both_paths() -> None:
    """Duplicate keys in the text are one key to the JSON parser (orjson as json), which keeps the last value."""
    payloads = [b'{"id": 1, "name": "a", "id": 2}', b'{"name": "b", "name": "c", "id": 3}']
    batch = assert_same(_records(payloads * 20), block_records=8)

    assert batch.dead_letters == []
    assert batch.rows.column("ID").to_pylist()[:2] == [2, 3]
    assert batch.rows.column("NAME").to_pylist()[:2] == ["a", "c"]


def test_columns_that_differ_only_by_case_resolve_as_the_column_map_does() -> None:
    columns = ColumnMap(
        [TableColumn("id", "VARCHAR"), TableColumn("ID", "NUMBER(38,0)"), TableColumn("Name", "VARCHAR")]
    )
    assert_same(_records([b'{"id": 1, "name": "n"}', b'{"Id": "2"}', b'{"ID": "x"}']), columns)


def test_records_leaving_a_not_null_column_empty_are_dead_letters() -> None:
    columns = ColumnMap(
        [
            TableColumn("ID", "NUMBER(38,0)", numeric_precision=38, nullable=False),
            TableColumn("NAME", "VARCHAR", nullable=False),
            TableColumn("NOTE", "VARCHAR"),
        ]
    )
    payloads = [
        b'{"id": 1, "name": "a"}',
        b'{"id": 2}',  # no NAME
        b'{"id": 3, "name": null, "note": "x"}',  # NAME null
        b'{"name": "d", "note": "no id"}',
        b'{"id": "x", "name": "e"}',  # a bad value names its column first
        b'{"ID": 6, "NAME": "f"}',
    ]
    batch = assert_same(_records(payloads), columns)
    assert batch.rows.column("ID").to_pylist() == [1, 6]
    assert [(d.column, d.error) for d in batch.dead_letters] == [
        ("NAME", "column NAME: no value for a NOT NULL column (the key is missing or null)"),
        ("NAME", "column NAME: no value for a NOT NULL column (the key is missing or null)"),
        ("ID", "column ID: no value for a NOT NULL column (the key is missing or null)"),
        ("ID", "column ID: expected a whole number for NUMBER, got 'x'"),
    ]
    # A NOT NULL column that no key can reach (shadowed by another spelling) takes no row at all.
    shadowed = ColumnMap([TableColumn("id", "VARCHAR", nullable=False), TableColumn("ID", "NUMBER(38,0)")])
    assert assert_same(_records([b'{"id": 1}', b'{"ID": 2}']), shadowed).rows.num_rows == 0


def test_columns_with_the_same_name_twice() -> None:
    columns = ColumnMap([TableColumn("ID", "NUMBER(38,0)"), TableColumn("ID", "NUMBER(38,0)")])
    batch = assert_same(_records([b'{"id": 1}', b'{"id": "x"}']), columns)
    assert batch.rows.column(1).to_pylist() == [1]


def test_a_table_of_only_the_metadata_column() -> None:
    assert_same(_records([b'{"id": 1}', b"[]"]), ColumnMap([TableColumn("KINESISMETADATA", "OBJECT")]))


def test_arrival_times_in_other_zones_and_without_microseconds() -> None:
    zones = [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
    records = [
        _record(i, b'{"id": %d}' % i, arrival=datetime(2026, 3, 1, 0, 30, i % 2 * 7, tzinfo=zones[i % 3]))
        for i in range(9)
    ]
    assert_same(records)


@pytest.mark.parametrize("sequence", ["7", "0", "007", "1" * 129, "0" + "1" * 129, "1" * 140])
def test_sharded_sequence_numbers_as_the_function_makes_them(sequence: str) -> None:
    record = KinesisRecord(SHARD, sequence, 12, "pk", ARRIVAL, b'{"id": 1}')
    assert metadata_array([record], STREAM).to_pylist() == [kinesis_metadata(STREAM, record)]
    assert_same([record])


def test_an_invalid_sequence_number_fails_both_paths_alike() -> None:
    record = KinesisRecord(SHARD, "12a", 0, "pk", ARRIVAL, b'{"id": 1}')
    with pytest.raises(ValueError, match="not a Kinesis sequence number"):
        build_batch_reference([record], STREAM, COLUMNS)
    with pytest.raises(ValueError, match="not a Kinesis sequence number"):
        build_batch([record], STREAM, COLUMNS)


def test_metadata_array_fits_the_metadata_type() -> None:
    records = _records([b"{}", b"{}"])
    array = metadata_array(records, STREAM)
    assert array.type == METADATA_TYPE
    assert array.to_pylist() == [kinesis_metadata(STREAM, r) for r in records]


def test_failure_table_holds_payload_reason_column_and_metadata() -> None:
    records = _records([b"\xff not json", b"[1]", b'{"id": 1, "Qty": "many"}', b'{"active": 1}'])
    batch = build_batch(records, STREAM, COLUMNS)
    table = failure_table(batch.dead_letters, STREAM)
    assert table.schema == FAILURE_SCHEMA
    assert table.column("RECORD_CONTENT_BASE64").to_pylist() == [
        "/yBub3QganNvbg==",
        "WzFd",
        "eyJpZCI6IDEsICJRdHkiOiAibWFueSJ9",
        "eyJhY3RpdmUiOiAxfQ==",
    ]
    assert table.column("ERROR_MESSAGE").to_pylist() == [
        "invalid UTF-8 at byte 0",
        "top level is a JSON array, not an object",
        "column QTY: expected a whole number for NUMBER, got 'many'",
        "column ACTIVE: expected a boolean, got int",
    ]
    # Payloads that could not be used name no column; values that did not fit name theirs.
    assert table.column("ERROR_COLUMN").to_pylist() == [None, None, "QTY", "ACTIVE"]
    assert table.column("KINESISMETADATA").to_pylist() == [kinesis_metadata(STREAM, r) for r in records]
    assert failure_table([], STREAM).schema == FAILURE_SCHEMA


# -- KPL aggregates through user_records ----------------------------------------------------------


def _api_record(sequence: int, data: bytes, partition_key: str, arrival: datetime = ARRIVAL) -> dict[str, Any]:
    return {
        "SequenceNumber": str(sequence),
        "ApproximateArrivalTimestamp": arrival,
        "Data": data,
        "PartitionKey": partition_key,
    }


def _aggregate(payloads: list[bytes]) -> bytes:
    packer = aggregator.RecordAggregator()
    for i, payload in enumerate(payloads):
        assert packer.add_user_record(f"user-{i}", payload) is None
    aggregated = packer.clear_and_get()
    assert aggregated is not None
    return bytes(aggregated.get_contents()[2])


def _corrupt_aggregate() -> bytes:
    message = messages_pb2.AggregatedRecord()
    message.partition_key_table.append("pk")
    entry = message.records.add()
    entry.partition_key_index = 5  # no such partition key
    entry.data = b'{"id": 1}'
    body = message.SerializeToString()
    return bytes(aws_kinesis_agg.MAGIC + body + hashlib.md5(body).digest())


def test_kpl_aggregates_and_plain_records() -> None:
    rng = random.Random(7)
    api: list[dict[str, Any]] = []
    for n in range(40):
        arrival = ARRIVAL + timedelta(milliseconds=n)
        if n % 3 == 0:
            api.append(_api_record(AWS_SEQ + n, _payload_from(rng), f"plain-{n}", arrival))
        elif n == 20:
            api.append(_api_record(AWS_SEQ + n, _corrupt_aggregate(), "corrupt", arrival))
        else:
            payloads = [_payload_from(rng) for _ in range(rng.randint(1, 12))]
            api.append(_api_record(AWS_SEQ + n, _aggregate(payloads), f"agg-{n}", arrival))
    records = list(user_records(SHARD, api))
    assert any(r.sub_sequence_number > 0 for r in records)
    assert any(r.error for r in records)
    batch = assert_same(records, block_records=16)
    assert batch.rows.num_rows > 100


def _aggregate_message(users: list[tuple[int, int | None, bytes]], keys: list[str], hash_keys: list[str]) -> bytes:
    """A KPL aggregate written by hand: (partition key index, explicit hash key index, data) per user record."""
    message = messages_pb2.AggregatedRecord()
    message.partition_key_table.extend(keys)
    message.explicit_hash_key_table.extend(hash_keys)
    for key_index, hash_key_index, data in users:
        entry = message.records.add()
        entry.partition_key_index = key_index
        if hash_key_index is not None:
            entry.explicit_hash_key_index = hash_key_index
        entry.data = data
    body = message.SerializeToString()
    return bytes(aws_kinesis_agg.MAGIC + body + hashlib.md5(body).digest())


def test_deaggregate_equals_user_records() -> None:
    rng = random.Random(11)
    with_hash_keys = aggregator.RecordAggregator()
    for i in range(5):
        with_hash_keys.add_user_record(f"k{i}", b'{"id": %d}' % i, explicit_hash_key=str(10**30 + i))
    aggregated = with_hash_keys.clear_and_get()
    assert aggregated is not None
    good = _aggregate([b'{"id": 1}', b"[]", b"\xff"])
    datas = [
        b'{"id": 1}',
        b"",
        aws_kinesis_agg.MAGIC,  # the magic and nothing else
        aws_kinesis_agg.MAGIC + b"\x00" * 16,
        good,
        bytes(aggregated.get_contents()[2]),
        good[:-1] + bytes([good[-1] ^ 1]),  # bad digest: a plain record
        aws_kinesis_agg.MAGIC + b"garbage" + hashlib.md5(b"garbage").digest(),  # not a message
        _corrupt_aggregate(),  # partition key index out of range: an error record
        _aggregate_message([(0, 3, b"{}")], ["pk"], ["1"]),  # hash key index out of range
        _aggregate_message([(0, 0, b"{}")], ["pk"], []),  # a hash key index but no table: fine
        _aggregate_message([], ["pk"], []),  # no user records at all
        _aggregate_message([(1, None, b"a"), (0, None, b"b")], ["pk0", "pk1"], []),
        _aggregate([_payload_from(rng) for _ in range(30)]),
    ]
    arrivals: list[Any] = [
        ARRIVAL,
        datetime(2026, 1, 31, 12),
        1769860800.25,
        ARRIVAL.astimezone(timezone(timedelta(hours=9))),
    ]
    api = [_api_record(AWS_SEQ + i, data, f"api-{i}", arrivals[i % len(arrivals)]) for i, data in enumerate(datas)]
    expected = list(user_records(SHARD, api))
    assert deaggregate(SHARD, api) == expected
    assert any(r.error for r in expected) and any(r.sub_sequence_number > 0 for r in expected)
    for raw in api:  # one at a time too
        assert deaggregate(SHARD, [raw]) == list(user_records(SHARD, [raw]))
    assert deaggregate(SHARD, []) == []


# -- generated batches ----------------------------------------------------------------------------


def _recase(name: str, bits: int) -> str:
    return "".join(ch.upper() if bits >> (i % 16) & 1 else ch.lower() for i, ch in enumerate(name))


_TRICKY_STRINGS = [
    "12",
    "-7",
    "1.0",
    " 7 ",
    "1e3",
    "1_000",
    "0e50",
    "١٢",
    "true",
    "FALSE",
    "abc",
    "",
    "NaN",
    "inf",
    "12345",
    "2026-01-31T12:00:00Z",
    "2026-01-31T12:00:00.123456+05:30",
    "2026-01-31T12:00:00",
    "2026-01-31",
    "2026-13-01",
    "12:00:00",
    "12345678901234567890123",
    "x\ny",
    'quote " and \\ backslash',
    "\x00\x1f\x7f\u2028\ufeff",
    "café €",
    "😀",
]
_TRICKY_FLOATS = [1.0, -0.0, 0.5, 19.99, 0.125, 1e-5, 5.5e-5, 0.0001, 1e15, 1e16, 1e22, 1.5e-7, 2.0**60, 123456789.123]
_INT_EDGES = [0, -1, 99999, 100000, -100000, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1000, 1000),
    st.integers(-(2**70), 2**70),
    st.sampled_from(_INT_EDGES),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(_TRICKY_FLOATS),
    st.decimals(places=3, min_value=-(10**9), max_value=10**9).map(float),
    st.text(max_size=12),
    st.sampled_from(_TRICKY_STRINGS),
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=10,
)
_ZONES = st.sampled_from([None, UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))])
# Values that usually fit each column, so that most records take the bulk path.
_FITTING: dict[str, st.SearchStrategy[Any]] = {
    "ID": st.integers(-(2**63), 2**63 - 1),
    "QTY": st.integers(-99999, 99999),
    "COUNT": st.integers(-1000, 1000) | st.sampled_from(_INT_EDGES),
    "AMOUNT": st.decimals(places=2, min_value=-(10**7), max_value=10**7).map(float) | st.integers(-(10**7), 10**7),
    "TOTAL": st.floats(-1e30, 1e30) | st.integers(-(2**63), 2**63 - 1),
    "RATIO": st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**63), 2**64 - 1),
    "ACTIVE": st.booleans(),
    "NAME": st.text(max_size=30),
    "CODE": st.text(max_size=5),
    "STRASSE": st.text(max_size=5),
    "CREATED_AT": st.builds(
        lambda moment, zulu: moment.isoformat().replace("+00:00", "Z" if zulu else "+00:00"),
        st.datetimes(timezones=_ZONES),
        st.booleans(),
    ),
    "DAY": st.dates().map(str),
    "AT": st.times().map(str),
    "PAYLOAD": json_values,
    "ATTRS": st.dictionaries(st.text(max_size=6), json_values, max_size=4),
    "TAGS": st.lists(json_values, max_size=4),
}


def _member(key: str, *, clean: bool) -> st.SearchStrategy[tuple[str, Any]]:
    fitting = _FITTING.get(key.upper(), json_values)
    values = fitting if clean else st.one_of(fitting, fitting, json_values)
    return st.tuples(st.integers(0, 2**16).map(lambda bits: _recase(key, bits)), values)


clean_members = st.lists(st.sampled_from(KEYS).flatmap(lambda k: _member(k, clean=True)), max_size=12)
members = st.lists(st.sampled_from(KEYS).flatmap(lambda k: _member(k, clean=False)), max_size=12)


def _object_text(pairs: list[tuple[str, Any]], *, pretty: bool, ascii_only: bool) -> str:
    # Written by hand so that duplicate keys survive.
    sep, indent = (",\n  ", "\n  ") if pretty else (", ", "")
    body = sep.join(
        f"{json.dumps(k, ensure_ascii=ascii_only)}: {json.dumps(v, ensure_ascii=ascii_only)}" for k, v in pairs
    )
    return "{" + indent + body + ("\n" if pretty else "") + "}"


_BROKEN = [
    b"",
    b" \n",
    b"[1, 2]",
    b'"x"',
    b"5",
    b"null",
    b'{"id": 1} {"id": 2}',
    b"\xef\xbb\xbf{}",
    b'{"ratio": NaN}',
    b'{"name": "a\nb"}',
    b'{"payload": "\\ud800"}',
    b'{"id": 1,}',
    b"{",
    b"\xff",
]


@st.composite
def payloads(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 24))
    if kind == 0:
        return draw(st.sampled_from(_BROKEN))
    if kind == 1:
        return draw(st.binary(max_size=16))
    pairs = draw(clean_members if kind % 2 else members)
    text = _object_text(pairs, pretty=draw(st.booleans()), ascii_only=draw(st.booleans()))
    data = text.encode("utf-8", "surrogatepass")
    if kind == 2 and data:  # one byte changed, inserted or removed
        at = draw(st.integers(0, len(data) - 1))
        byte = bytes([draw(st.integers(0, 255))])
        data = draw(
            st.sampled_from(
                [data[:at] + byte + data[at + 1 :], data[:at] + byte + data[at:], data[:at] + data[at + 1 :]]
            )
        )
    if kind == 3:
        data = json.dumps([json.loads(text)] if draw(st.booleans()) else draw(json_values)).encode()
    return data


@st.composite
def record_batches(draw: st.DrawFn) -> list[KinesisRecord]:
    bodies = draw(st.lists(payloads(), max_size=40))
    zones = [UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-3, minutes=-30))]
    records = []
    for i, body in enumerate(bodies):
        arrival = ARRIVAL + timedelta(microseconds=draw(st.sampled_from([0, 1, 999999, 10**6]))) * i
        error = "corrupt KPL aggregate: 0 of 2 user records could be read" if draw(st.integers(0, 15)) == 0 else None
        records.append(
            KinesisRecord(
                SHARD,
                str(AWS_SEQ + i),
                draw(st.integers(0, 3)),
                f"pk-{i}",
                arrival.astimezone(zones[i % 3]),
                body,
                error,
            )
        )
    return records


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(record_batches(), st.sampled_from([1, 3, 4096]), st.booleans())
def test_generated_batches_equal_the_per_record_path(
    records: list[KinesisRecord], block_records: int, holding_back: bool
) -> None:
    assert_same(records, HOLDING_BACK if holding_back else COLUMNS, block_records=block_records)


def _payload_from(rng: random.Random) -> bytes:
    """A realistic order, sometimes with a twist."""
    body: dict[str, Any] = {
        "id": rng.randint(1, 10**9),
        "name": rng.choice(["Ann", "Bo", "Café Ünïcode", "😀"]),
        "amount": round(rng.uniform(0, 10**6), rng.choice([0, 1, 2])),
        "ratio": rng.random(),
        "active": rng.random() < 0.5,
        "created_at": f"2026-01-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00.{rng.randint(0, 999999):06d}Z",
        "day": f"2026-02-{rng.randint(1, 28):02d}",
        "payload": {"items": [{"sku": f"s{rng.randint(1, 99)}", "n": rng.randint(1, 5)}], "w": rng.random()},
        "tags": ["a", "b"][: rng.randint(0, 2)],
    }
    twist = rng.randint(0, 12)
    if twist == 0:
        body["ID"] = "shadowed"
    elif twist == 1:
        body["amount"] = str(body["amount"])
    elif twist == 2:
        body["qty"] = 10**7
    elif twist == 3:
        return b"not json"
    elif twist == 4:
        del body["name"]
    elif twist == 5:
        body = dict(reversed(list(body.items())))
    elif twist == 6:
        return json.dumps(body, indent=2).encode()
    return json.dumps(body, ensure_ascii=rng.random() < 0.5).encode()


@pytest.mark.parametrize("seed", range(3))
def test_large_realistic_batches(seed: int) -> None:
    rng = random.Random(seed)
    records = [_record(i, _payload_from(rng)) for i in range(3000)]
    batch = assert_same(records, block_records=1000)
    assert batch.rows.num_rows > 2000
    assert batch.dead_letters


def test_dead_letters_are_dead_letter_objects() -> None:
    batch = build_batch(_records([b"[]"]), STREAM, COLUMNS)
    assert all(isinstance(d, DeadLetter) for d in batch.dead_letters)


# -- Arrow's parsing and formatting where it stands in for Python's --------------------------------


@pytest.mark.parametrize(
    "created_at",
    [
        "2026-01-31T12:00:00Z",
        "2026-01-31T12:00:00.5Z",
        "2026-01-31T12:00:00.1234-00:00",
        "2026-01-31T12:00:00.1234567Z",  # seven digits: fromisoformat truncates, Arrow refuses
        "2026-01-31T12:00:00+00:60",  # fromisoformat takes minutes of 60 and more, Arrow does not
        "2026-01-31T12:00:00-23:59",
        "2026-01-31T12:00:00+24:00",
        "2026-01-31T24:00:00Z",
        "2026-01-31T23:59:60Z",
        "2024-02-29T00:00:00Z",
        "2100-02-29T00:00:00Z",
        "0000-01-01T00:00:00Z",  # Arrow reads year 0, datetime has none
        "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
        "9999-12-31T23:59:59-01:00",  # after year 9999 in UTC
        "2026-01-31T12:00:00",  # no zone: UTC, as coerce makes it
        "2026-01-31 12:00:00Z",
        "\uff12\uff10\uff12\uff16-01-31T12:00:00Z",  # digits, not ASCII ones
    ],
)
def test_timestamps_alone_and_among_others(created_at: str) -> None:
    among = ["2026-01-31T12:00:00.123456Z", created_at, "2026-01-31T13:00:00+05:30"]
    for texts in ([created_at], among, [created_at] * 3):
        assert_same(_records([json.dumps({"created_at": t, "id": i}).encode() for i, t in enumerate(texts)]))


@pytest.mark.parametrize(
    "day", ["2026-02-01", "2024-02-29", "2100-02-29", "0000-01-01", "0001-01-01", "20260201", "2026-2-1"]
)
def test_dates_alone_and_among_others(day: str) -> None:
    for texts in ([day], ["2026-02-01", day, None]):
        assert_same(_records([json.dumps({"day": t, "id": i}).encode() for i, t in enumerate(texts)]))


def test_arrival_times_of_aggregates_naive_ones_and_whole_seconds() -> None:
    shared = datetime(2026, 3, 1, 0, 30, 5, tzinfo=timezone(timedelta(hours=-8)))
    arrivals = [
        shared,
        shared,
        ARRIVAL,
        datetime(2026, 3, 1),
        datetime(2026, 3, 1),
        shared,
        ARRIVAL.replace(microsecond=0),
    ]
    assert_same([_record(i, b'{"id": %d}' % i, arrival=a) for i, a in enumerate(arrivals)])


def test_an_arrival_beyond_the_datetime_range_in_utc_fails_both_paths_alike() -> None:
    record = _record(0, b'{"id": 1}', arrival=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))))
    with pytest.raises(OverflowError):
        build_batch_reference([record], STREAM, COLUMNS)
    with pytest.raises(OverflowError):
        build_batch([record], STREAM, COLUMNS)


def test_sequence_numbers_of_different_lengths_in_one_batch() -> None:
    sequences = ["7", str(AWS_SEQ), "1" * 129, "0042", str(AWS_SEQ + 1)]
    records = [KinesisRecord(SHARD, s, i, "pk", ARRIVAL, b'{"id": 1}') for i, s in enumerate(sequences)]
    assert_same(records)
    same_length = [KinesisRecord(SHARD, str(AWS_SEQ + i), i, "pk", ARRIVAL, b'{"id": 1}') for i in range(5)]
    assert_same(same_length)


# -- staged chunk by chunk ------------------------------------------------------------------------


def _realistic(seed: int, count: int) -> list[KinesisRecord]:
    rng = random.Random(seed)
    records = [_record(i, _payload_from(rng)) for i in range(count)]
    records[count // 2] = _record(count // 2, b"aggregate", error="the KPL aggregate could not be de-aggregated")
    return records


def _staged(records: list[KinesisRecord], directory: Path, chunk_bytes: int, columns: ColumnMap | None) -> BatchFiles:
    with BatchFiles(directory, "shard-batch", STREAM, columns) as files:
        for chunk in chunks_of(records, chunk_bytes):
            files.add(chunk)
    return files


@pytest.mark.parametrize("chunk_bytes", [1, 3_000, 10**9])
def test_a_range_staged_chunk_by_chunk_holds_the_rows_and_dead_letters_of_the_range_built_at_once(
    tmp_path: Path, chunk_bytes: int
) -> None:
    records = _realistic(chunk_bytes, 160)
    whole = build_batch(records, STREAM, COLUMNS)
    assert whole.rows.num_rows > 80 and len(whole.dead_letters) > 3

    files = _staged(records, tmp_path, chunk_bytes, COLUMNS)

    rows = pq.read_table(files.rows_path)
    assert rows.schema == COLUMNS.arrow_schema()
    assert _without_nan(rows.combine_chunks()).equals(_without_nan(whole.rows.combine_chunks()))
    assert pq.read_table(files.failures_path).equals(failure_table(whole.dead_letters, STREAM))
    assert (files.rows, files.dead_letters) == (whole.rows.num_rows, len(whole.dead_letters))


@pytest.mark.parametrize("chunk_bytes", [1, 5_000, 10**9])
def test_a_pipe_range_staged_chunk_by_chunk_holds_the_json_lines_of_the_range_built_at_once(
    tmp_path: Path, chunk_bytes: int
) -> None:
    records = _realistic(7, 300)
    whole = pipe_batch(records, STREAM)
    assert whole.rows and whole.dead_letters

    files = _staged(records, tmp_path, chunk_bytes, None)

    assert files.rows_path.read_bytes() == whole.lines
    assert pq.read_table(files.failures_path).equals(failure_table(whole.dead_letters, STREAM))
    assert (files.rows, files.dead_letters) == (whole.rows, len(whole.dead_letters))


def test_a_file_is_only_created_once_it_gets_a_row(tmp_path: Path) -> None:
    files = _staged(_records([b'{"id": 1, "name": "a"}', b'{"id": 2, "name": "b"}']), tmp_path, 1, COLUMNS)

    assert files.rows_path.exists() and pq.read_table(files.rows_path).num_rows == 2
    assert not files.failures_path.exists() and files.dead_letters == 0
    nothing = _staged([], tmp_path / "empty", 1, COLUMNS)
    assert (nothing.rows, nothing.dead_letters) == (0, 0)
    assert not (tmp_path / "empty").exists()


def test_chunks_end_at_the_record_that_reaches_the_chunk_size() -> None:
    records = _records([b"x" * size for size in (3, 4, 2, 1, 5, 9)])

    chunks = [[len(r.data) for r in chunk] for chunk in chunks_of(records, 6)]

    assert chunks == [[3, 4], [2, 1, 5], [9]]
    assert [len(c) for c in chunks_of(records, 10**9)] == [6]
    assert [len(c) for c in chunks_of(records, 1)] == [1] * 6
    assert list(chunks_of([], 6)) == []
