"""Column mapping, value coercion and the Arrow table staged for COPY INTO."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_kinesis_snowflake.core.load.schema import (
    METADATA_COLUMN,
    METADATA_TYPE,
    ColumnMap,
    ColumnValueError,
    HeldBack,
    KeysDifferingByCaseError,
    KeysWithoutColumnError,
    TableColumn,
    arrow_type,
    coerce,
)
from airflow_kinesis_snowflake.core.sources.records import KinesisRecord, kinesis_metadata, parse_payload

INT = TableColumn("QTY", "NUMBER(38,0)")
DEC = TableColumn("AMOUNT", "NUMBER(10,2)", numeric_scale=2)
FLT = TableColumn("RATIO", "FLOAT")
BOOL = TableColumn("ACTIVE", "BOOLEAN")
TEXT = TableColumn("NAME", "VARCHAR(16777216)")
TS = TableColumn("CREATED_AT", "TIMESTAMP_TZ(9)")
DAY = TableColumn("DAY", "DATE")
VARIANT = TableColumn("PAYLOAD", "VARIANT")
OBJ = TableColumn("ATTRS", "OBJECT")
ARR = TableColumn("TAGS", "ARRAY")

ALL_COLUMNS = [INT, DEC, FLT, BOOL, TEXT, TS, DAY, VARIANT, OBJ, ARR]


# -- arrow_type -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        # NUMBER(38,0) and its synonyms hold 38 digits: more than int64 can
        (INT, pa.decimal128(38, 0)),
        (TableColumn("N", "NUMBER", numeric_precision=38), pa.decimal128(38, 0)),
        (TableColumn("N", "NUMBER"), pa.decimal128(38, 0)),
        (TableColumn("N", "INTEGER"), pa.decimal128(38, 0)),
        (TableColumn("N", "bigint"), pa.decimal128(38, 0)),
        (TableColumn("N", "NUMBER", numeric_precision=19), pa.decimal128(38, 0)),
        # a declared precision that int64 holds
        (TableColumn("N", "NUMBER", numeric_precision=18), pa.int64()),
        (TableColumn("N", "NUMBER", numeric_precision=5), pa.int64()),
        (DEC, pa.decimal128(38, 2)),
        (FLT, pa.float64()),
        (TableColumn("D", "DOUBLE PRECISION"), pa.float64()),
        (BOOL, pa.bool_()),
        (TEXT, pa.string()),
        (TS, pa.timestamp("us", tz="UTC")),
        (TableColumn("T", "TIMESTAMP_NTZ"), pa.timestamp("us", tz="UTC")),
        (DAY, pa.date32()),
        (VARIANT, pa.string()),
        (OBJ, pa.string()),
        (ARR, pa.string()),
    ],
)
def test_arrow_type(column: TableColumn, expected: pa.DataType) -> None:
    assert arrow_type(column) == expected


# -- ColumnMap ------------------------------------------------------------------------------------


def test_keys_map_to_columns_case_insensitively() -> None:
    mapping = ColumnMap([TableColumn("ORDER_ID", "NUMBER(38,0)"), TableColumn("CustomerName", "VARCHAR")])

    row = mapping.map_record({"order_id": 7, "CUSTOMERNAME": "Ada"})

    assert row == {"ORDER_ID": 7, "CustomerName": "Ada"}


def test_unknown_keys_are_ignored() -> None:
    mapping = ColumnMap([TableColumn("ID", "NUMBER(38,0)")])

    assert mapping.map_record({"id": 1, "unexpected": {"deep": [1, 2]}, "other": "x"}) == {"ID": 1}
    assert mapping.map_record({"nothing": "known"}) == {}


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"id": None, "ID": 5}, 'keys "id" and "ID" both map to column ID; rename one in the producer'),
        ({"id": 1, "ID": 2}, 'keys "id" and "ID" both map to column ID; rename one in the producer'),
        ({"ID": 2, "id": 1}, 'keys "ID" and "id" both map to column ID; rename one in the producer'),
        ({"id": None, "Id": None}, 'keys "id" and "Id" both map to column ID; rename one in the producer'),
    ],
)
def test_two_keys_differing_only_by_case_refuse_the_record_naming_both_keys_and_the_column(
    obj: dict[str, Any], message: str
) -> None:
    """Loading one of the two values would lose the other: the record is a dead letter, whatever the values."""
    mapping = ColumnMap([TableColumn("ID", "NUMBER(38,0)"), TableColumn("NAME", "VARCHAR")])

    with pytest.raises(KeysDifferingByCaseError) as info:
        mapping.map_record({"name": "Ada", **obj})

    assert str(info.value) == message
    assert info.value.column == "ID"
    assert isinstance(info.value, ValueError)  # a dead letter, like a bad value


def test_every_column_and_spelling_in_a_collision_is_named() -> None:
    mapping = ColumnMap([TableColumn("ID", "NUMBER(38,0)"), TableColumn("Name", "VARCHAR")])

    with pytest.raises(KeysDifferingByCaseError) as info:
        mapping.map_record({"name": "a", "id": 1, "NAME": "b", "Id": 2, "ID": 3, "other": 4, "OTHER": 5})

    assert str(info.value) == (
        'keys "name" and "NAME" both map to column Name; keys "id", "Id" and "ID" all map to column ID; '
        "rename them in the producer so that no two differ only by case"
    )
    assert info.value.column == "Name"  # the first in the document
    assert info.value.collisions == {"Name": ("name", "NAME"), "ID": ("id", "Id", "ID")}


def test_keys_differing_only_by_case_without_a_column_are_ignored_like_any_unknown_key() -> None:
    mapping = ColumnMap([TableColumn("ID", "NUMBER(38,0)")])

    assert mapping.map_record({"id": 1, "color": "red", "COLOR": "blue"}) == {"ID": 1}


def test_keys_differing_by_case_are_refused_before_keys_held_back_and_bad_values() -> None:
    mapping = ColumnMap([TableColumn("ID", "NUMBER(38,0)")], HeldBack("the cap", lambda key: True))

    with pytest.raises(KeysDifferingByCaseError):
        mapping.map_record({"new": 1, "id": "not a number", "ID": 2})
    with pytest.raises(KeysWithoutColumnError, match=r'^no column for key "Unknown": the cap\.'):
        mapping.map_record({"id": 1, "unknown": None, "Unknown": 5})  # the spelling with a value counts


def test_keys_equal_exactly_are_one_key_and_the_parser_keeps_the_last_value() -> None:
    """Duplicate keys in the text ({"a": 1, "a": 2}) are not told apart: both parsers keep the last value."""
    data = b'{"id": 1, "name": "a", "id": 2}'
    mapping = ColumnMap([TableColumn("ID", "NUMBER(38,0)"), TableColumn("NAME", "VARCHAR")])

    assert parse_payload(data) == orjson.loads(data) == {"id": 2, "name": "a"}
    assert list(parse_payload(data)) == list(orjson.loads(data)) == ["id", "name"]  # at the first place
    assert mapping.map_record(parse_payload(data)) == {"ID": 2, "NAME": "a"}


def test_never_maps_onto_kinesismetadata() -> None:
    mapping = ColumnMap([TableColumn("ID", "NUMBER(38,0)"), TableColumn(METADATA_COLUMN, "OBJECT")])

    row = mapping.map_record({"id": 1, "kinesisMetadata": {"stream": "forged"}, "KINESISMETADATA": "forged"})

    assert row == {"ID": 1}
    assert [c.name for c in mapping.columns] == ["ID"]
    schema = mapping.arrow_schema()
    assert schema.names == ["ID", METADATA_COLUMN]
    assert schema.field(METADATA_COLUMN).type == METADATA_TYPE


def test_bad_value_error_names_the_column() -> None:
    mapping = ColumnMap([TableColumn("ID", "NUMBER(38,0)"), TableColumn("Name", "VARCHAR")])

    with pytest.raises(ColumnValueError, match=r"^column ID: expected a whole number") as info:
        mapping.map_record({"Name": "ok", "id": "abc"})
    assert "'abc'" in str(info.value)
    assert info.value.column == "ID"

    with pytest.raises(ColumnValueError, match=r"^column Name: expected a scalar") as info:
        mapping.map_record({"name": {"first": "Ada"}})
    assert info.value.column == "Name"


def test_a_not_null_column_without_a_value_names_the_column() -> None:
    mapping = ColumnMap([TableColumn("ID", "NUMBER(38,0)", nullable=False), TableColumn("NOTE", "VARCHAR")])
    assert mapping.map_record({"id": 1}) == {"ID": 1}
    for record in ({"note": "no id"}, {"ID": None, "note": "null id"}):
        with pytest.raises(ColumnValueError, match=r"^column ID: no value for a NOT NULL column") as info:
            mapping.map_record(record)
        assert info.value.column == "ID"


@pytest.mark.parametrize("payload", ['{"v": NaN}', '{"v": [1, Infinity]}', '{"v": {"x": -1e400}}'])
def test_semi_structured_values_snowflake_cannot_parse_are_refused(payload: str) -> None:
    # Python's json reads these; Snowflake's PARSE_JSON would fail the batch's COPY on them.
    mapping = ColumnMap([TableColumn("V", "VARIANT")])
    with pytest.raises(ColumnValueError, match=r"^column V: value holds NaN or an infinite number"):
        mapping.map_record(json.loads(payload))


def test_missing_keys_are_left_out_of_the_row() -> None:
    mapping = ColumnMap([TableColumn("ID", "NUMBER(38,0)"), TableColumn("NAME", "VARCHAR")])

    assert mapping.map_record({"id": 3}) == {"ID": 3}


# -- coerce ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("column", ALL_COLUMNS, ids=lambda c: c.data_type)
def test_null_stays_null(column: TableColumn) -> None:
    assert coerce(None, column) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (12, 12),
        ("12", 12),
        (" 12 ", 12),
        (1.0, 1),
        ("1.0", 1),
        (-5, -5),
        (0, 0),
        (2**63 - 1, 2**63 - 1),
        (-(2**63), -(2**63)),
        (1e18, 10**18),
        # beyond 64 bits, up to the 38 digits NUMBER(38,0) holds
        (2**63, 2**63),
        (-(2**63) - 1, -(2**63) - 1),
        ("99999999999999999999", 10**20 - 1),
        (1e19, 10**19),
        (10**38 - 1, 10**38 - 1),
        (-(10**38) + 1, -(10**38) + 1),
        ("12345678901234567890123456789012345678", 12345678901234567890123456789012345678),
        ("1e37", 10**37),
    ],
)
def test_number_38_0_accepts_whole_numbers_of_up_to_38_digits(value: Any, expected: int) -> None:
    result = coerce(value, INT)

    assert result == expected
    assert isinstance(result, Decimal)
    assert result.as_tuple().exponent == 0
    assert pa.array([result], arrow_type(INT)).to_pylist() == [expected]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (1.5, "expected a whole number"),
        ("1.5", "expected a whole number"),
        ("abc", "expected a whole number"),
        ("", "expected a whole number"),
        (True, "expected a whole number"),
        (False, "expected a whole number"),
        ({}, "expected a whole number"),
        ([1], "expected a whole number"),
        (10**38, r"too many digits for NUMBER\(38,0\)"),
        (-(10**38), r"too many digits for NUMBER\(38,0\)"),
        ("123456789012345678901234567890123456789", r"too many digits for NUMBER\(38,0\)"),
        (1e38, r"too many digits for NUMBER\(38,0\)"),
    ],
)
def test_number_38_0_rejects(value: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        coerce(value, INT)


NARROW = TableColumn("QTY", "NUMBER(18,0)", numeric_precision=18)


@pytest.mark.parametrize(("value", "expected"), [(12, 12), ("12", 12), (1.0, 1), (10**18 - 1, 10**18 - 1)])
def test_a_precision_int64_holds_is_written_as_int64(value: Any, expected: int) -> None:
    result = coerce(value, NARROW)

    assert arrow_type(NARROW) == pa.int64()
    assert result == expected
    assert type(result) is int


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (1.5, "expected a whole number"),
        (10**18, r"too many digits for NUMBER\(18,0\)"),
        (2**63, "out of range"),
        ("99999999999999999999", "out of range"),
    ],
)
def test_a_precision_int64_holds_rejects(value: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        coerce(value, NARROW)


@pytest.mark.parametrize("data_type", ["INTEGER", "BIGINT", "SMALLINT", "NUMBER"])
def test_integer_aliases_coerce_like_number_38_0(data_type: str) -> None:
    column = TableColumn("N", data_type)

    assert coerce("42", column) == 42
    with pytest.raises(ValueError):
        coerce(4.2, column)


def test_integer_rejects_infinity_as_value_error() -> None:
    mapping = ColumnMap([INT])
    record = parse_payload(b'{"qty": 1e400}')

    with pytest.raises(ValueError, match="column QTY"):
        mapping.map_record(record)


def test_integer_rejects_infinity_string_as_value_error() -> None:
    with pytest.raises(ValueError):
        coerce("Infinity", INT)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (12, Decimal("12.00")),
        ("12", Decimal("12.00")),
        (12.5, Decimal("12.50")),
        ("3.14159", Decimal("3.14")),
        ("-0.1", Decimal("-0.10")),
        (0.1, Decimal("0.10")),
    ],
)
def test_decimal_quantizes_to_scale(value: Any, expected: Decimal) -> None:
    result = coerce(value, DEC)

    assert result == expected
    assert isinstance(result, Decimal)
    assert result.as_tuple().exponent == -2


@pytest.mark.parametrize("value", [True, "abc", {}, [1.5], "Infinity"])
def test_decimal_rejects(value: Any) -> None:
    with pytest.raises(ValueError, match=r"expected a number|not a finite number"):
        coerce(value, DEC)


@pytest.mark.parametrize("payload", [b'{"amount": "NaN"}', b'{"amount": NaN}'])
def test_decimal_rejects_nan(payload: bytes) -> None:
    mapping = ColumnMap([DEC])

    with pytest.raises(ValueError, match="column AMOUNT"):
        mapping.map_record(parse_payload(payload))


def test_decimal_with_more_digits_than_the_default_context_holds() -> None:
    wide = TableColumn("TOTAL", "NUMBER(38,10)", numeric_scale=10, numeric_precision=38)

    assert coerce("12345678901234567890.5", wide) == Decimal("12345678901234567890.5000000000")
    assert coerce(1e20, wide) == Decimal("100000000000000000000.0000000000")


def test_decimal_that_rounds_beyond_its_precision_is_rejected() -> None:
    small = TableColumn("AMOUNT", "NUMBER(4,2)", numeric_scale=2, numeric_precision=4)

    assert coerce(99.994, small) == Decimal("99.99")
    with pytest.raises(ValueError, match=r"too many digits for NUMBER\(4,2\)"):
        coerce(99.999, small)


@pytest.mark.parametrize(
    "column", [INT, DEC, TableColumn("N", "NUMBER(38,4)", numeric_scale=4)], ids=lambda c: c.data_type
)
@pytest.mark.parametrize("value", ["1e999999999", "-1e999999999", 10**400], ids=["exp", "-exp", "10**400"])
def test_huge_numbers_are_rejected_quickly(column: TableColumn, value: Any) -> None:
    with pytest.raises(ValueError, match=r"out of range|too many digits"):
        coerce(value, column)


def test_zero_with_a_large_exponent_is_zero() -> None:
    assert coerce("0e50", INT) == 0
    assert coerce("0e50", DEC) == Decimal("0.00")


def test_float_rejects_an_int_beyond_the_float_range() -> None:
    with pytest.raises(ValueError, match="out of range for FLOAT"):
        coerce(10**400, FLT)


@pytest.mark.parametrize("column", [TEXT, VARIANT], ids=lambda c: c.data_type)
def test_lone_surrogate_is_rejected(column: TableColumn) -> None:
    # json.loads accepts "\ud800"; Arrow cannot store it, so the record must become a dead letter.
    with pytest.raises(ValueError, match="lone surrogate"):
        ColumnMap([column]).map_record(parse_payload(b'{"%s": "a\\ud800"}' % column.name.encode()))


@pytest.mark.parametrize(("value", "expected"), [(1, 1.0), (2.5, 2.5), ("2.5", 2.5), ("-1e3", -1000.0)])
def test_float(value: Any, expected: float) -> None:
    result = coerce(value, FLT)

    assert result == expected
    assert type(result) is float


@pytest.mark.parametrize("value", [True, "abc", {}, []])
def test_float_rejects(value: Any) -> None:
    with pytest.raises(ValueError, match="expected a number for FLOAT"):
        coerce(value, FLT)


@pytest.mark.parametrize(
    ("value", "expected"), [(True, True), (False, False), ("true", True), ("FALSE", False), ("True", True)]
)
def test_boolean(value: Any, expected: bool) -> None:
    assert coerce(value, BOOL) is expected


@pytest.mark.parametrize("value", [1, 0, "yes", "", {}, 1.0])
def test_boolean_rejects(value: Any) -> None:
    with pytest.raises(ValueError, match="expected a boolean"):
        coerce(value, BOOL)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("Ada", "Ada"), (12, "12"), (1.5, "1.5"), (True, "true"), (False, "false"), ("", ""), ("é", "é")],
)
def test_varchar_stringifies_scalars(value: Any, expected: str) -> None:
    assert coerce(value, TEXT) == expected


@pytest.mark.parametrize(("value", "kind"), [({"a": 1}, "dict"), ([1, 2], "list")])
def test_varchar_rejects_objects_and_arrays(value: Any, kind: str) -> None:
    with pytest.raises(ValueError, match=f"expected a scalar for VARCHAR, got a JSON {kind}"):
        coerce(value, TEXT)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-31T12:30:00Z", datetime(2026, 1, 31, 12, 30, tzinfo=UTC)),
        ("2026-01-31T12:30:00.123456Z", datetime(2026, 1, 31, 12, 30, 0, 123456, tzinfo=UTC)),
        ("2026-01-31T14:30:00+02:00", datetime(2026, 1, 31, 12, 30, tzinfo=UTC)),
        ("2026-01-31T12:30:00", datetime(2026, 1, 31, 12, 30, tzinfo=UTC)),
        ("2026-01-31", datetime(2026, 1, 31, tzinfo=UTC)),
    ],
)
def test_timestamp_parses_iso_8601(value: str, expected: datetime) -> None:
    result = coerce(value, TS)

    assert result == expected
    assert result.tzinfo is not None


def test_timestamp_keeps_the_given_offset() -> None:
    result = coerce("2026-01-31T14:30:00+02:00", TS)

    assert result.utcoffset() == timedelta(hours=2)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("yesterday", "not an ISO 8601 timestamp"),
        ("31/01/2026 12:30", "not an ISO 8601 timestamp"),
        (1769862600, "expected an ISO 8601 timestamp string, got int"),
        ({}, "expected an ISO 8601 timestamp string, got dict"),
    ],
)
def test_timestamp_rejects(value: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        coerce(value, TS)


def test_date() -> None:
    assert coerce("2026-01-31", DAY) == date(2026, 1, 31)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("31/01/2026", "not an ISO 8601 date"),
        ("2026-02-30", "not an ISO 8601 date"),
        (20260131, "expected an ISO 8601 date string, got int"),
    ],
)
def test_date_rejects(value: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        coerce(value, DAY)


@pytest.mark.parametrize("column", [VARIANT, OBJ, ARR], ids=lambda c: c.data_type)
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": [1, "é"], "b": None}, '{"a":[1,"é"],"b":null}'),
        ([1, 2.5, True], "[1,2.5,true]"),
        ("text", '"text"'),
        (3, "3"),
        (False, "false"),
    ],
)
def test_semi_structured_becomes_json_text(column: TableColumn, value: Any, expected: str) -> None:
    assert coerce(value, column) == expected


# -- to_arrow -------------------------------------------------------------------------------------


def _metadata(sequence: str, sub: int = 0) -> dict[str, Any]:
    record = KinesisRecord("shardId-000000000000", sequence, sub, "pk", datetime(2026, 1, 31, 12, tzinfo=UTC), b"{}")
    return kinesis_metadata("orders", record)


def _mapped_rows(mapping: ColumnMap) -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = [
        {
            "qty": 3,
            "amount": "19.99",
            "ratio": 0.25,
            "active": True,
            "name": "Ada",
            "created_at": "2026-01-31T12:30:00Z",
            "day": "2026-01-31",
            "payload": {"nested": [1, 2]},
            "attrs": {"k": "v"},
            "tags": ["a", "b"],
            "ignored": "x",
        },
        {"QTY": "4", "Name": "Grace", "payload": None},
    ]
    return [mapping.map_record(d) for d in documents]


def test_to_arrow_schema_matches_arrow_schema() -> None:
    mapping = ColumnMap([*ALL_COLUMNS, TableColumn(METADATA_COLUMN, "OBJECT")])

    table = mapping.to_arrow(_mapped_rows(mapping), [_metadata("9"), _metadata("10", 1)])

    assert table.schema == mapping.arrow_schema()
    assert table.num_rows == 2
    assert table.column_names == [c.name for c in ALL_COLUMNS] + [METADATA_COLUMN]


def test_to_arrow_values() -> None:
    mapping = ColumnMap(ALL_COLUMNS)

    rows = mapping.to_arrow(_mapped_rows(mapping), [_metadata("9"), _metadata("10", 1)]).to_pylist()

    first, second = rows
    assert first["QTY"] == 3
    assert first["AMOUNT"] == Decimal("19.99")
    assert first["RATIO"] == 0.25
    assert first["ACTIVE"] is True
    assert first["NAME"] == "Ada"
    assert first["CREATED_AT"] == datetime(2026, 1, 31, 12, 30, tzinfo=UTC)
    assert first["DAY"] == date(2026, 1, 31)
    assert first["PAYLOAD"] == '{"nested":[1,2]}'
    assert first["ATTRS"] == '{"k":"v"}'
    assert first["TAGS"] == '["a","b"]'
    assert "ignored" not in first
    # Keys absent from a record are nulls in its row.
    assert second["QTY"] == 4
    assert second["NAME"] == "Grace"
    assert second["AMOUNT"] is None
    assert second["PAYLOAD"] is None
    assert second[METADATA_COLUMN]["sequenceNumber"] == "10"
    assert second[METADATA_COLUMN]["subSequenceNumber"] == 1


def test_to_arrow_converts_offsets_to_utc() -> None:
    mapping = ColumnMap([TS])

    table = mapping.to_arrow([mapping.map_record({"created_at": "2026-01-31T14:30:00+02:00"})], [_metadata("1")])

    assert table.column("CREATED_AT").to_pylist() == [datetime(2026, 1, 31, 12, 30, tzinfo=UTC)]
    assert table.column("CREATED_AT").to_pylist()[0].utcoffset() == timedelta(0)


def test_to_arrow_empty() -> None:
    mapping = ColumnMap(ALL_COLUMNS)

    table = mapping.to_arrow([], [])

    assert table.num_rows == 0
    assert table.schema == mapping.arrow_schema()


def test_parquet_round_trip(tmp_path: Path) -> None:
    mapping = ColumnMap(ALL_COLUMNS)
    table = mapping.to_arrow(_mapped_rows(mapping), [_metadata("9"), _metadata("10", 1)])
    path = tmp_path / "batch.parquet"

    pq.write_table(table, path)
    restored = pq.read_table(path)

    assert restored.schema.names == table.schema.names
    assert restored.schema.equals(table.schema, check_metadata=False)
    assert restored.equals(table)
    assert restored.to_pylist() == table.to_pylist()


def test_timestamps_in_other_zones_read_back_as_the_same_instant(tmp_path: Path) -> None:
    mapping = ColumnMap([TS])
    offset = timezone(timedelta(hours=-5))
    table = mapping.to_arrow(
        [mapping.map_record({"CREATED_AT": datetime(2026, 1, 31, 7, 30, tzinfo=offset).isoformat()})],
        [_metadata("1")],
    )
    path = tmp_path / "ts.parquet"

    pq.write_table(table, path)

    assert pq.read_table(path).column("CREATED_AT").to_pylist() == [datetime(2026, 1, 31, 12, 30, tzinfo=UTC)]
