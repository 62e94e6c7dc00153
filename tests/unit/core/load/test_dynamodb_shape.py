"""An existing table is a DynamoDB connector's destination only when its columns fit the connector's settings."""

from __future__ import annotations

import pytest

from airflow_kinesis_snowflake.core.load.dynamodb_rows import KeyAttribute, Layout, table_columns
from airflow_kinesis_snowflake.core.load.dynamodb_shape import shape_error, shape_problems
from airflow_kinesis_snowflake.core.load.schema import TableColumn

KEYS = (KeyAttribute("pk", "S"), KeyAttribute("sk", "N"))
ATTRIBUTES = [TableColumn("AMOUNT", "NUMBER(38,0)"), TableColumn("NAME", "VARCHAR")]


def expected(layout: Layout, soft: bool = False) -> list[TableColumn]:
    return table_columns(KEYS, layout, soft_deletes=soft)


@pytest.mark.parametrize("layout", [Layout.PACKED, Layout.UNPACKED])
@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_a_table_created_with_the_same_settings_fits(layout: Layout, soft: bool) -> None:
    existing = table_columns(KEYS, layout, soft_deletes=soft, attributes=ATTRIBUTES)
    assert shape_problems(expected(layout, soft), existing, layout=layout, soft_deletes=soft) == []


def test_an_unpacked_table_is_not_loaded_packed() -> None:
    existing = table_columns(KEYS, Layout.UNPACKED, soft_deletes=False, attributes=ATTRIBUTES)
    problems = shape_problems(expected(Layout.PACKED), existing, layout=Layout.PACKED, soft_deletes=False)
    assert any("lacks the column(s) ITEM VARIANT" in p for p in problems)
    assert any("attribute columns (AMOUNT, NAME): it was created with layout: unpacked" in p for p in problems)


def test_a_packed_table_is_not_loaded_unpacked() -> None:
    existing = table_columns(KEYS, Layout.PACKED, soft_deletes=False)
    problems = shape_problems(expected(Layout.UNPACKED), existing, layout=Layout.UNPACKED, soft_deletes=False)
    assert problems == [
        "it has an ITEM column: it was created with layout: packed, and this connector's layout is unpacked "
        "(a column per attribute; the ITEM column would keep stale items)"
    ]


def test_a_soft_deletes_table_is_not_loaded_with_hard_deletes_and_a_hard_one_lacks_the_mark_columns() -> None:
    soft = table_columns(KEYS, Layout.PACKED, soft_deletes=True)
    assert any(
        "created with deletes: soft" in p
        for p in shape_problems(expected(Layout.PACKED), soft, layout=Layout.PACKED, soft_deletes=False)
    )
    hard = table_columns(KEYS, Layout.PACKED, soft_deletes=False)
    problems = shape_problems(expected(Layout.PACKED, True), hard, layout=Layout.PACKED, soft_deletes=True)
    assert problems == ["it lacks the column(s) DYNAMODB_DELETED BOOLEAN, DYNAMODB_DELETED_AT TIMESTAMP_TZ"]


def test_a_key_column_of_another_type_or_a_kinesis_table_is_named() -> None:
    numeric_pk = [TableColumn("PK", "NUMBER(38,0)", nullable=False), *expected(Layout.PACKED)[1:]]
    assert shape_problems(expected(Layout.PACKED), numeric_pk, layout=Layout.PACKED, soft_deletes=False) == [
        "its key column PK is NUMBER(38,0), where the DynamoDB key needs VARCHAR"
    ]
    kinesis = [TableColumn("ORDER_ID", "NUMBER(38,0)"), TableColumn("KINESISMETADATA", "OBJECT")]
    problems = shape_problems(expected(Layout.PACKED), kinesis, layout=Layout.PACKED, soft_deletes=False)
    assert problems[0].startswith("it has a KINESISMETADATA column and no DYNAMODB_VERSION")


def test_the_refusal_names_the_table_the_connector_and_every_fix() -> None:
    message = str(shape_error("ANALYTICS.RAW.ORDERS", "orders", ["it has an ITEM column"]))
    assert message.startswith("destination table ANALYTICS.RAW.ORDERS cannot be loaded by connector 'orders'")
    assert "set layout and deletes back" in message
    assert "point destination.table at a new table" in message
    assert "drop or rename it" in message
