"""A batch of DynamoDB changes as staged rows, packed and unpacked, and the columns they need."""

import json
from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from airflow_kinesis_snowflake.core.load.dynamodb_rows import (
    DELETED_AT_COLUMN,
    DELETED_COLUMN,
    EVENT_COLUMN,
    ITEM_COLUMN,
    METADATA_COLUMN,
    VERSION_COLUMN,
    AttributeTypeError,
    KeyAttribute,
    Layout,
    Widening,
    attribute_type,
    column_value,
    key_attributes,
    packed_rows,
    summarize,
    table_columns,
    unpacked_rows,
    widenings,
)
from airflow_kinesis_snowflake.core.load.evolution import JsonType, plan_changes
from airflow_kinesis_snowflake.core.load.schema import TableColumn
from airflow_kinesis_snowflake.core.sources.dynamodb.model import EventName, ItemChange, Version

DESCRIPTION = {
    "KeySchema": [{"AttributeName": "sk", "KeyType": "RANGE"}, {"AttributeName": "pk", "KeyType": "HASH"}],
    "AttributeDefinitions": [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "N"},
    ],
}
KEYS = key_attributes(DESCRIPTION)
AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def change(sk: str, image: dict | None, event: EventName, sequence: str = "100", **kwargs) -> ItemChange:
    keys = {"pk": {"S": "user#1"}, "sk": {"N": sk}}
    version = Version.of_snapshot(0) if event is EventName.SNAPSHOT else Version.of_stream(0, sequence)
    image = None if image is None else {**keys, **image}
    return ItemChange("orders", keys, image, event, version, approximate_creation_time=AT, **kwargs)


def test_key_attributes_come_partition_key_first_with_their_column_types():
    assert KEYS == (KeyAttribute("pk", "S"), KeyAttribute("sk", "N"))
    columns = table_columns((*KEYS, KeyAttribute("blob", "B")), Layout.PACKED, soft_deletes=True)
    assert [(c.name, c.data_type) for c in columns] == [
        ("PK", "VARCHAR"), ("SK", "VARCHAR"), ("BLOB", "BINARY"), (VERSION_COLUMN, "VARCHAR"),
        (DELETED_COLUMN, "BOOLEAN"), (DELETED_AT_COLUMN, "TIMESTAMP_TZ"), (METADATA_COLUMN, "OBJECT"),
        (ITEM_COLUMN, "VARIANT"),
    ]  # fmt: skip
    hard = table_columns(KEYS, Layout.UNPACKED, soft_deletes=False, attributes=[TableColumn("QTY", "NUMBER(38,0)")])
    assert [c.name for c in hard] == ["PK", "SK", VERSION_COLUMN, METADATA_COLUMN, "QTY"]
    with pytest.raises(ValueError, match="DynamoDB keys are S, N or B"):
        KeyAttribute("k", "BOOL")


def test_packed_rows_hold_keys_the_item_as_exact_json_the_version_and_metadata():
    put = change("1.50", {"price": {"N": "12345678901234567890123456789012345678"}, "tags": {"SS": ["b", "a"]}},
                 EventName.INSERT, "123456789012345678901", event_id="e1", shard_id="shardId-1")  # fmt: skip
    gone = change("2", None, EventName.REMOVE, "123456789012345678999", event_id="e2", ttl_expiry=True)
    read = change("3", {"n": {"N": "1E+125"}}, EventName.SNAPSHOT, shard_id="segment-0-of-4")
    rows = packed_rows([put, gone, read], KEYS).to_pylist()
    assert [(r["PK"], r["SK"]) for r in rows] == [("user#1", "1.5"), ("user#1", "2"), ("user#1", "3")]
    assert json.loads(rows[0][ITEM_COLUMN], parse_float=Decimal) == {
        "pk": "user#1", "sk": Decimal("1.5"), "price": 12345678901234567890123456789012345678, "tags": ["a", "b"]
    }  # fmt: skip
    assert rows[1][ITEM_COLUMN] is None and rows[2][ITEM_COLUMN] == '{"n":"1E+125","pk":"user#1","sk":3}'
    assert [r[EVENT_COLUMN] for r in rows] == ["INSERT", "REMOVE", "SNAPSHOT"]
    assert [r[DELETED_COLUMN] for r in rows] == [False, True, False]
    assert [r[DELETED_AT_COLUMN] for r in rows] == [None, AT, None]
    assert [Version.from_text(r[VERSION_COLUMN]) for r in rows] == [put.version, gone.version, read.version]
    assert json.loads(rows[0][METADATA_COLUMN]) == {
        "table": "orders", "eventName": "INSERT", "eventID": "e1", "sequenceNumber": "123456789012345678901",
        "shardId": "shardId-1", "approximateCreationDateTime": "2026-03-01T12:00:00+00:00", "ttlExpiry": False,
    }  # fmt: skip
    assert json.loads(rows[1][METADATA_COLUMN])["ttlExpiry"] is True
    assert json.loads(rows[2][METADATA_COLUMN])["sequenceNumber"] is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"S": "2026-01-01T00:00:00Z"}, JsonType.VARCHAR),
        ({"N": "-" + "9" * 38}, JsonType.INTEGER),
        ({"N": "1.5"}, JsonType.VARIANT),
        ({"N": "1E+125"}, JsonType.VARIANT),
        ({"B": b"x"}, JsonType.VARCHAR),
        ({"BOOL": True}, JsonType.BOOLEAN),
        ({"NULL": True}, None),
        ({"M": {}}, JsonType.VARIANT),
        ({"NS": ["1"]}, JsonType.VARIANT),
    ],
)
def test_each_type_has_its_place_on_the_schema_evolution_lattice(value, expected):
    assert attribute_type(value) is expected


def test_an_attribute_that_changes_type_within_a_batch_gets_the_column_holding_both():
    changes = [
        change("1", {"qty": {"N": "5"}, "note": {"NULL": True}, "price": {"N": "1"}}, EventName.INSERT, "1"),
        change("1", {"qty": {"S": "five"}, "price": {"N": "1.25"}, "Flag": {"BOOL": True}}, EventName.MODIFY, "2"),
    ]
    known = [TableColumn("PRICE_OLD", "VARCHAR")]
    plan = plan_changes(summarize(changes, known, KEYS), known, evolve=True)
    assert [(c.name, c.type) for c in plan.add] == [
        ("PRICE", JsonType.VARIANT),
        ("QTY", JsonType.VARCHAR),
        ("FLAG", JsonType.BOOLEAN),
    ]  # fmt: skip  (first seen; an item's attributes in sorted order)
    assert [s.key for s in plan.skipped] == ["note"]  # only nulls so far
    columns = [*known, *(TableColumn(c.name, c.type.sql) for c in plan.add)]
    rows = unpacked_rows(changes, KEYS, columns).to_pylist()
    assert [r["QTY"] for r in rows] == ["5", "five"]
    assert [r["PRICE"] for r in rows] == ["1", "1.25"]  # JSON text of exact numbers
    assert [r["FLAG"] for r in rows] == [None, True] and [r["PRICE_OLD"] for r in rows] == [None, None]


def test_unpacked_rows_write_each_type_exactly_and_a_removal_carries_only_its_keys():
    columns = [
        TableColumn("QTY", "NUMBER(38,0)"), TableColumn("PRICE", "NUMBER", numeric_scale=2, numeric_precision=10),
        TableColumn("NAME", "VARCHAR"),
        TableColumn("DATA", "BINARY"), TableColumn("ON", "BOOLEAN"), TableColumn("DOC", "VARIANT"),
        TableColumn("TAGS", "ARRAY"),
    ]  # fmt: skip
    image = {
        "qty": {"N": "9" * 38}, "price": {"N": "12.50"}, "name": {"N": "1E+125"}, "data": {"B": b"\x00"},
        "on": {"BOOL": False}, "doc": {"M": {"x": {"N": "1E-130"}}}, "tags": {"BS": [b"b", b"a"]},
    }  # fmt: skip
    rows = unpacked_rows(
        [change("1", image, EventName.INSERT), change("1", None, EventName.REMOVE, "2")], KEYS, columns
    )
    assert rows.schema.field("DATA").type == pa.binary()
    first, removed = rows.to_pylist()
    assert first["QTY"] == Decimal("9" * 38) and first["PRICE"] == Decimal("12.50")
    assert first["NAME"] == "1E+125" and first["DATA"] == b"\x00" and first["ON"] is False
    assert first["DOC"] == '{"x":"1E-130"}' and first["TAGS"] == '["YQ==","Yg=="]'
    assert {k: v for k, v in removed.items() if v is not None and k in {c.name for c in columns}} == {}
    assert (removed["PK"], removed["SK"], removed[DELETED_COLUMN]) == ("user#1", "1", True)


@pytest.mark.parametrize(
    ("value", "column", "reason"),
    [
        ({"S": "five"}, TableColumn("QTY", "NUMBER(38,0)"), "a S value in a NUMBER column"),
        ({"N": "1.5"}, TableColumn("QTY", "NUMBER(38,0)"), "whole number"),
        (
            {"N": "1.005"},
            TableColumn("PRICE", "NUMBER", numeric_scale=2, numeric_precision=10),
            "would be rounded to 1.00",
        ),
        ({"N": "1E+125"}, TableColumn("QTY", "NUMBER(38,0)"), "out of range|too many digits"),
        ({"N": "0.1"}, TableColumn("RATE", "FLOAT"), "not exactly a float"),
        ({"N": "1"}, TableColumn("ON", "BOOLEAN"), "a N value in a BOOLEAN column"),
        ({"S": "x"}, TableColumn("DOC", "OBJECT"), "a S value is not an OBJECT"),
    ],
)
def test_a_value_its_column_cannot_hold_exactly_is_refused_naming_the_column(value, column, reason):
    with pytest.raises(AttributeTypeError, match=reason) as caught:
        column_value(value, column, "attr")
    assert caught.value.column == column.name and "VARIANT" in str(caught.value)


def test_attributes_without_a_column_or_named_like_our_columns_are_refused_not_dropped():
    with pytest.raises(AttributeTypeError, match="does not exist"):
        unpacked_rows([change("1", {"new": {"S": "x"}}, EventName.INSERT)], KEYS, [])
    assert unpacked_rows([change("1", {"new": {"NULL": True}}, EventName.INSERT)], KEYS, []).num_rows == 1
    with pytest.raises(AttributeTypeError, match="differs only by case"):
        unpacked_rows(
            [change("1", {"a": {"S": "x"}, "A": {"S": "y"}}, EventName.INSERT)], KEYS, [TableColumn("A", "VARCHAR")]
        )
    with pytest.raises(AttributeTypeError, match="own columns"):
        summarize([change("1", {"dynamodb_version": {"S": "x"}}, EventName.INSERT)], [], KEYS)


@pytest.mark.parametrize(
    ("column", "values", "widened"),
    [
        (TableColumn("QTY", "NUMBER(38,0)"), [{"N": "3"}, {"S": "3 pieces"}], "VARCHAR"),
        (TableColumn("QTY", "NUMBER(38,0)"), [{"N": "1.5"}], "VARIANT"),
        (TableColumn("QTY", "NUMBER(38,0)"), [{"S": "x"}, {"M": {"a": {"N": "1"}}}], "VARIANT"),
        (TableColumn("QTY", "BOOLEAN"), [{"N": "2"}], "VARCHAR"),
        (TableColumn("QTY", "VARCHAR(3)", max_length=3), [{"S": "four"}], "VARIANT"),
        (TableColumn("QTY", "DATE"), [{"S": "not a date"}], "VARIANT"),
    ],
)
def test_a_column_that_cannot_hold_a_later_value_is_widened_to_the_join_or_variant(column, values, widened):
    columns = table_columns(KEYS, Layout.UNPACKED, soft_deletes=False, attributes=[column])
    changes = [change(str(n), {"qty": v}, EventName.MODIFY, str(100 + n)) for n, v in enumerate(values)]
    assert widenings(changes, columns, KEYS) == [Widening("QTY", widened)]
    wider = [c if c.name != "QTY" else TableColumn("QTY", widened) for c in columns]
    assert widenings(changes, wider, KEYS) == []
    unpacked_rows(changes, KEYS, wider)  # every value now fits its column exactly


def test_values_that_fit_their_columns_widen_nothing():
    columns = table_columns(KEYS, Layout.UNPACKED, soft_deletes=False, attributes=[TableColumn("QTY", "NUMBER(38,0)")])
    changes = [
        change("1", {"qty": {"N": "7"}, "other": {"S": "new"}}, EventName.INSERT),
        change("2", None, EventName.REMOVE),
    ]
    assert widenings(changes, columns, KEYS) == []


def test_a_numeric_number_key_is_a_whole_number_column_and_a_text_column_keeps_it_text() -> None:
    key = KeyAttribute("ts", "N", numeric=True)
    assert (key.sql_type, key.arrow_type) == ("NUMBER(38,0)", pa.decimal128(38, 0))
    assert key.value({"ts": {"N": "1700000118.000"}}) == Decimal("1700000118")
    assert key.unfit({"ts": {"N": "1E+2"}}) is None
    assert key.unfit({"ts": {"N": "0.5"}}) is not None
    with pytest.raises(ValueError, match="cannot hold"):
        key.value({"ts": {"N": "0.5"}})
    assert key.fitted_to({"TS": TableColumn("TS", "VARCHAR")}) == KeyAttribute("ts", "N")
    assert key.fitted_to({"TS": TableColumn("TS", "NUMBER(38,0)")}) == key
    assert key.fitted_to({}) == key
    assert KeyAttribute.from_list(key.to_list()) == key
    assert KeyAttribute.from_list(["ts", "N"]) == KeyAttribute("ts", "N")  # a plan of an earlier version
    with pytest.raises(ValueError, match="only an N key can be a NUMBER column"):
        KeyAttribute("id", "S", numeric=True)
