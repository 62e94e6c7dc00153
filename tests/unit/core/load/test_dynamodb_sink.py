"""The DynamoDB sink's objects and statements, without a server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from airflow_kinesis_snowflake.core.load.dynamodb_rows import WIDENING_SUFFIX, Widening
from airflow_kinesis_snowflake.core.load.dynamodb_sink import (
    Deletes,
    DynamoDBTarget,
    KeyColumn,
    Layout,
    SegmentMark,
    merge_sql,
    purge_tombstones_sql,
    support_objects_ddl,
    unseen_rows_sql,
    widening_sql,
)
from airflow_kinesis_snowflake.core.load.schema import TableColumn
from airflow_kinesis_snowflake.core.model import Destination
from airflow_kinesis_snowflake.core.sources.dynamodb.model import Version

KEYS = (KeyColumn("PK", "VARCHAR"), KeyColumn("SK", "NUMBER(38,0)"))


def target(deletes: Deletes = Deletes.HARD, layout: Layout = Layout.UNPACKED) -> DynamoDBTarget:
    return DynamoDBTarget(Destination("DB", "RAW", "ORDERS"), "orders", KEYS, layout, deletes)


def test_a_key_column_needs_a_snowflake_type() -> None:
    with pytest.raises(ValueError, match="PK"):
        KeyColumn("PK", "VARCHAR; DROP TABLE X")


def test_a_table_has_one_or_two_key_columns() -> None:
    with pytest.raises(ValueError, match="sort key"):
        DynamoDBTarget(Destination("DB", "RAW", "T"), "t", ())


def test_a_segment_has_a_cursor_exactly_until_it_is_done() -> None:
    with pytest.raises(ValueError):
        SegmentMark(None, done=False)
    with pytest.raises(ValueError):
        SegmentMark('{"pk": {"S": "a"}}', done=True)


def test_tombstones_exist_with_either_deletes_setting() -> None:
    hard = support_objects_ddl(target(Deletes.HARD))
    generations = ["snapshot ledger", "sync generations", "sync generations' stream", "sync generations' destination"]
    assert [d.kind for d in hard] == [*generations, "tombstones", "items set aside"]
    assert [d.kind for d in support_objects_ddl(target(Deletes.SOFT))] == [
        *generations,
        "tombstones",
        "items set aside",
    ]
    assert '"SK" NUMBER(38,0) NOT NULL' in hard[4].sql


def test_with_hard_deletes_a_removal_of_a_key_without_a_row_inserts_nothing_and_its_tombstone_filters() -> None:
    sql = merge_sql(target(Deletes.HARD), [TableColumn("PK", "TEXT"), TableColumn("A", "TEXT")], [])
    not_matched = sql[sql.index("WHEN NOT MATCHED") :]
    assert not_matched.count("WHEN NOT MATCHED") == 1
    assert not_matched.startswith("WHEN NOT MATCHED AND s.DYNAMODB_EVENT <> 'REMOVE' THEN INSERT")
    assert "_DYNAMODB_TOMBSTONES" in sql and "x.DYNAMODB_VERSION >= n.DYNAMODB_VERSION" in sql


def test_with_soft_deletes_a_removal_made_before_the_generation_started_marks_no_row_of_it() -> None:
    columns = [TableColumn("PK", "TEXT"), TableColumn("A", "TEXT")]
    always = merge_sql(target(Deletes.SOFT), columns, [])
    assert "WHEN NOT MATCHED AND s.DYNAMODB_EVENT = 'REMOVE' AND NOT (FALSE) THEN INSERT" in always
    started = datetime(2026, 11, 27, 12, 0, 0, 700_000, tzinfo=UTC)  # the second it started in counts
    sql = merge_sql(target(Deletes.SOFT), columns, [], generation=3, started_at=started)
    before = "s.DYNAMODB_CHANGE_TIME < '2026-11-27T12:00:00+00:00'::TIMESTAMP_TZ"
    of_generation = f"t.DYNAMODB_VERSION >= '{Version.of_snapshot(3).to_text()}'"
    removal = "WHEN MATCHED AND s.DYNAMODB_VERSION > t.DYNAMODB_VERSION AND s.DYNAMODB_EVENT = 'REMOVE'"
    assert f"{removal} AND {before} AND {of_generation} THEN DELETE" in sql
    assert f"WHEN NOT MATCHED AND s.DYNAMODB_EVENT = 'REMOVE' AND NOT ({before}) THEN INSERT" in sql
    # The DELETE comes before the marking UPDATE: Snowflake takes the first WHEN that matches.
    assert sql.index("THEN DELETE") < sql.index("s.DYNAMODB_EVENT = 'REMOVE' THEN UPDATE")


def test_an_upsert_sets_every_attribute_column_null_where_the_batch_has_none() -> None:
    destination = [TableColumn("PK", "TEXT"), TableColumn("A", "TEXT"), TableColumn("B", "NUMBER(38,0)")]
    sql = merge_sql(target(), destination, [TableColumn("PK", "TEXT"), TableColumn("A", "TEXT")])
    assert 't."A" = s."A"' in sql
    assert 't."B" = NULL' in sql


def test_a_generation_compares_by_its_smallest_version() -> None:
    assert f"< '{Version.of_snapshot(3).to_text()}'" in unseen_rows_sql(target(), 3, [])
    assert f"< '{Version.of_snapshot(4).to_text()}'" in purge_tombstones_sql(target(), 3)
    # every version of generation 2, stream or snapshot, is below generation 3's first
    assert Version.of_stream(2, "9" * 40).to_text() < Version.of_snapshot(3).to_text()


def test_a_widening_copies_the_values_into_a_wider_column_then_replaces_the_old_one() -> None:
    t = target()
    statements = widening_sql(t, Widening("QTY", "VARCHAR"), added=False)
    copy = f'"QTY{WIDENING_SUFFIX}"'
    assert statements == [
        f"ALTER TABLE {t.table} ADD COLUMN {copy} VARCHAR",
        f'UPDATE {t.table} SET {copy} = TO_VARCHAR("QTY")',
        f'ALTER TABLE {t.table} DROP COLUMN "QTY"',
        f'ALTER TABLE {t.table} RENAME COLUMN {copy} TO "QTY"',
    ]
    resumed = widening_sql(t, Widening("QTY", "VARIANT"), added=True)
    assert resumed[0] == f'UPDATE {t.table} SET {copy} = TO_VARIANT("QTY")'
    assert len(resumed) == 3


def test_the_merge_never_sets_a_column_being_widened() -> None:
    columns = [TableColumn("QTY", "NUMBER(38,0)"), TableColumn(f"QTY{WIDENING_SUFFIX}", "VARCHAR")]
    sql = merge_sql(target(), columns, columns)
    assert "QTY" in sql
    assert WIDENING_SUFFIX not in sql
