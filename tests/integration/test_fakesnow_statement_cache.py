"""The fakesnow server translates each distinct statement text once (tests/emulators/fakesnow_cache.py),
and answers a repeated text exactly as it answered it the first time it ran in the same session state.

Each test sends one text several times, in states where a cache keyed on the text alone would answer
wrongly: another current schema, a session variable set again, other bound values.
"""

from __future__ import annotations

from typing import Any

import pytest
import snowflake.connector

from tests.conftest import unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration


def _schemas_with_one_table(emulators: Emulators) -> tuple[str, str, str]:
    """Two new schemas of ANALYTICS, each with a table T holding its own name; their names and T's."""
    first, second = (unique("cache").replace("-", "_").upper() for _ in range(2))
    conn = emulators.snowflake_connect()
    try:
        cur = conn.cursor()
        cur.execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
        for schema in (first, second):
            cur.execute(f"CREATE SCHEMA IF NOT EXISTS ANALYTICS.{schema}")
            cur.execute(f"CREATE TABLE ANALYTICS.{schema}.T (NAME VARCHAR)")
            cur.execute(f"INSERT INTO ANALYTICS.{schema}.T VALUES ('{schema}')")
    finally:
        conn.close()
    return first, second, "T"


def test_one_text_reads_the_table_of_the_current_schema(emulators: Emulators) -> None:
    first, second, table = _schemas_with_one_table(emulators)
    conn = emulators.snowflake_connect(database="ANALYTICS")
    try:
        cur = conn.cursor()
        answers, listed = [], []
        for schema in (first, second, first):
            cur.execute(f"USE SCHEMA {schema}")
            answers.append(cur.execute(f"SELECT NAME FROM {table}").fetchall())
            # fakesnow writes the current schema into its translation of SHOW TABLES.
            rows = cur.execute("SHOW TABLES").fetchall()
            column = [d.name for d in cur.description].index("schema_name")
            listed.append(sorted({row[column] for row in rows}))
    finally:
        conn.close()
    assert answers == [[(first,)], [(second,)], [(first,)]]
    assert listed == [[first], [second], [first]]


def test_a_variable_set_again_by_the_same_text_is_set(emulators: Emulators) -> None:
    conn = emulators.snowflake_connect()
    try:
        cur = conn.cursor()
        cur.execute("SET CACHE_TEST_VARIABLE = 'set'")
        first = cur.execute("SELECT $CACHE_TEST_VARIABLE").fetchall()
        cur.execute("UNSET CACHE_TEST_VARIABLE")
        with pytest.raises(snowflake.connector.errors.ProgrammingError):
            cur.execute("SELECT $CACHE_TEST_VARIABLE")
        cur.execute("SET CACHE_TEST_VARIABLE = 'set'")
        again = cur.execute("SELECT $CACHE_TEST_VARIABLE").fetchall()
    finally:
        conn.close()
    assert first == again == [("set",)]


def test_one_text_with_identifier_reads_the_table_its_bound_value_names(emulators: Emulators) -> None:
    first, second, table = _schemas_with_one_table(emulators)
    conn = emulators.snowflake_connect(paramstyle="qmark", database="ANALYTICS", schema=first)
    try:
        cur = conn.cursor()
        names: list[Any] = [
            cur.execute("SELECT NAME FROM IDENTIFIER(?)", [f"ANALYTICS.{schema}.{table}"]).fetchall()
            for schema in (first, second)
        ]
    finally:
        conn.close()
    assert names == [[(first,)], [(second,)]]


def test_a_text_that_does_not_parse_is_refused_every_time(emulators: Emulators) -> None:
    conn = emulators.snowflake_connect()
    try:
        cur = conn.cursor()
        errors = []
        for _ in range(2):
            with pytest.raises(snowflake.connector.errors.ProgrammingError) as refused:
                cur.execute("SELEC 1 FROM")
            errors.append((refused.value.errno, refused.value.sqlstate))
        assert cur.execute("SELECT 1").fetchall() == [(1,)]
    finally:
        conn.close()
    assert errors == [(1003, "42000")] * 2
