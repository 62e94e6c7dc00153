"""Close gaps between fakesnow and Snowflake, inside the fakesnow server process.

* COPY INTO with a transformation (``FROM (SELECT $1:key ... FROM @stage)``) over JSON files:
  Snowflake reads each line as one VARIANT ``$1`` and evaluates the paths against it; fakesnow
  0.12 only maps ``$1:key`` to a column of that name, which JSON files don't have.
* The same over Parquet files, with keys that need quoting (``$1:"a b"``): fakesnow 0.12 turns
  the key into an unquoted identifier, which breaks on anything but a plain name.
* MATCH_BY_COLUMN_NAME of a Parquet string column into a VARIANT, OBJECT or ARRAY column: Snowflake
  loads the string as a VARIANT string; fakesnow 0.12 lets DuckDB parse it as JSON, which hides
  the need for PARSE_JSON.
* Integers: Snowflake's ``NUMBER(38,0)`` (and ``NUMBER``, ``INT``, ``INTEGER``, ``BIGINT``,
  ``SMALLINT``, ``TINYINT``, ``BYTEINT``, all synonyms of it) holds any integer of up to 38 digits;
  fakesnow 0.12 makes columns and casts of these types a 64-bit BIGINT, which refuses 19 digits
  and more. They are DECIMAL(38,0) instead (the connector still reads the values as ints), and
  text that is not a number is refused with Snowflake's message ("Numeric value 'one' is not
  recognized") rather than DuckDB's for a DECIMAL.
* MERGE inside a transaction that already wrote a table: Snowflake runs it like any DML; fakesnow
  0.12 runs it through a temporary work table, and records the (absent) comment of every new
  temporary table in its global catalogue, a second database DuckDB refuses to write in that
  transaction. A temporary table without a comment records none.
* PARSE_JSON keeps numbers exact: Snowflake holds a JSON number of up to 38 digits as a fixed-point
  number; fakesnow 0.12 turns PARSE_JSON into DuckDB's ``json()``, which re-reads every number with
  a fraction as a double (``1.23456789012345678901`` comes back as ``1.2345678901234568``). A cast
  to JSON checks the text and keeps it as written.
* A NULL written to a NOT NULL column: Snowflake answers "NULL result in a non-nullable column";
  fakesnow 0.12 lets DuckDB's constraint error escape, which its server answers with HTTP 500, and
  the connector retries that for ever.
* Names with a single quote (a column ``"IT'S"``, a comment ``'it''s'``): Snowflake takes any quoted
  identifier; fakesnow 0.12 records a new table's or column's text lengths and comment in its
  catalogue by splicing the names into string literals unescaped, so DuckDB refuses the record
  after the DDL itself ran, the server answers HTTP 500, and the connector retries that for ever
  (each retry of an ``ADD COLUMN IF NOT EXISTS`` fails the same way). The literals are escaped.
* ``REMOVE @stage/path/``: Snowflake deletes the stage's files under the path and answers one row
  per file (``name``, ``result`` ``removed``); fakesnow 0.12 has no REMOVE and answers a syntax error,
  so every batch's clean-up of its staged files failed. The files under the path are deleted from
  fakesnow's local bucket, where its PUT wrote them.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any

import duckdb
import snowflake.connector
from fakesnow import copy_into, info_schema, transforms
from fakesnow import cursor as fakesnow_cursor
from fakesnow.transforms import stage as fakesnow_stage
from sqlglot import exp

_DOLLAR_ONE = exp.Parameter(this=exp.Literal(this="1", is_string=False))
_original_inserts = copy_into._inserts
_original_copy_into = copy_into.copy_into
_original_integer_precision = transforms.integer_precision
_original_execute = fakesnow_cursor.FakeSnowflakeCursor.execute
_original_extract_comment_on_table = transforms.extract_comment_on_table
_original_try_parse_json = transforms.try_parse_json
_original_insert_table_comment_sql = info_schema.insert_table_comment_sql
_original_insert_text_lengths_sql = info_schema.insert_text_lengths_sql
# DuckDB's words for text a DECIMAL cast refuses, and Snowflake's.
_NOT_A_NUMBER = re.compile(r'Could not convert string "(.*?)" to DECIMAL\([0-9]+,[0-9]+\)')
_NUMBER_38_0 = exp.DataType.build("DECIMAL(38, 0)")
_SNOWFLAKE_INTEGERS = (
    exp.DataType.Type.INT,
    exp.DataType.Type.BIGINT,
    exp.DataType.Type.SMALLINT,
    exp.DataType.Type.TINYINT,
)
# The COPY being planned, for _inserts, which is not given the connection: queries run on threads.
_current = threading.local()


def _copy_into(
    duck_conn: Any, current_database: Any, current_schema: Any, expr: exp.Copy, *args: Any, **kwargs: Any
) -> Any:
    _current.target = (duck_conn, current_database, current_schema, copy_into._extract_table(expr.this))
    try:
        return _original_copy_into(duck_conn, current_database, current_schema, expr, *args, **kwargs)
    finally:
        _current.target = None


def _json_columns() -> set[str]:
    target = getattr(_current, "target", None)
    if target is None:
        return set()
    duck_conn, database, schema, table = target
    return {
        name.upper() for name, kind in copy_into._describe_table(table, duck_conn, database, schema) if kind == "JSON"
    }


def _as_variant_values(inserts: list[Any]) -> list[Any]:
    """A string column matched by name to a semi-structured one loads as a string value."""
    json_columns = _json_columns()
    for insert in inserts:
        for alias in insert.expression.expressions:
            if (
                isinstance(alias, exp.Alias)
                and alias.alias.upper() in json_columns
                and isinstance(alias.this, exp.Column)
            ):
                alias.set("this", exp.func("to_json", alias.this.copy()))
    return inserts


def _json_transform_inserts(expr: exp.Copy, params: Any, urls: list[str], parquet_info: Any = None) -> list[Any]:
    return [insert.transform(_exact_json) for insert in _copy_inserts(expr, params, urls, parquet_info)]


def _copy_inserts(expr: exp.Copy, params: Any, urls: list[str], parquet_info: Any = None) -> list[Any]:
    from_ = expr.args["files"][0]
    if isinstance(from_, exp.Subquery) and isinstance(params.file_format, copy_into.ReadParquet):
        # $1:"key" is the Parquet column named exactly key.
        for parameter in list(from_.this.find_all(exp.Parameter)):
            extract = parameter.parent
            if parameter == _DOLLAR_ONE and isinstance(extract, exp.JSONExtract):
                keys = [k for k in extract.expression.find_all(exp.JSONPathKey)]
                if len(keys) == 1:
                    extract.replace(exp.column(str(keys[0].this), quoted=True))
        return _original_inserts(expr, params, urls, parquet_info)
    if parquet_info is not None and parquet_info.target_columns is not None:
        return _as_variant_values(_original_inserts(expr, params, urls, parquet_info))
    if not (isinstance(from_, exp.Subquery) and isinstance(params.file_format, copy_into.ReadJSON)):
        return _original_inserts(expr, params, urls, parquet_info)
    select = from_.this.copy()
    # Each line is one JSON value: $1 is the whole of it, as a VARIANT.
    variant = exp.Cast(this=exp.column("json"), to=exp.DataType.build("JSON"))
    for parameter in list(select.find_all(exp.Parameter)):
        if parameter == _DOLLAR_ONE:
            parameter.replace(variant.copy())
    return [
        exp.Insert(
            this=expr.this,
            expression=exp.Select(expressions=select.expressions).from_(
                exp.Table(this=params.file_format.read_expression(url))
            ),
            by_name=False,
        )
        for url in urls
    ]


def _integer_precision(expression: exp.Expr) -> exp.Expr:
    """NUMBER(38,0) and its synonyms hold 38 digits, as on Snowflake."""
    if isinstance(expression, exp.DataType):
        unsized_number = expression.this == exp.DataType.Type.DECIMAL and (
            not expression.expressions or expression.expressions == transforms.transforms.NUMBER_38_0
        )
        if unsized_number or expression.this in _SNOWFLAKE_INTEGERS:
            return _NUMBER_38_0.copy()
    return _original_integer_precision(expression)


_REMOVE = re.compile(r"^\s*REMOVE\s+@(?P<stage>[^/\s;]+)(?:/(?P<path>[^\s;]*))?\s*;?\s*$", re.IGNORECASE)


def _remove(self: Any, command: str) -> Any | None:
    """``REMOVE @stage/path``: delete the stage's files under ``path``; None for any other statement."""
    match = _REMOVE.match(command)
    if match is None:
        return None
    catalog, schema, name = fakesnow_stage.parts_from_var(
        match["stage"], current_database=self._conn.database, current_schema=self._conn.schema
    )
    directory = fakesnow_stage.internal_dir(f"{catalog}.{schema}.{name}", match["path"] or "")
    removed = []
    for root, _dirs, files in os.walk(directory):
        for file in sorted(files):
            os.remove(os.path.join(root, file))
            removed.append(os.path.relpath(os.path.join(root, file), directory))
    prefix = f"{name.lower()}/{match['path'] or ''}"
    rows = " UNION ALL ".join(f"SELECT '{_literal(prefix + path)}' AS name, 'removed' AS result" for path in removed)
    return _original_execute(self, rows or "SELECT NULL AS name, NULL AS result WHERE FALSE")


def _execute(self: Any, *args: Any, **kwargs: Any) -> Any:
    command = args[0] if args else kwargs.get("command")
    if isinstance(command, str) and (removed := _remove(self, command)) is not None:
        return removed
    try:
        return _original_execute(self, *args, **kwargs)
    except duckdb.ConstraintException as err:
        message = str(err).split("\n")[0]
        if "NOT NULL constraint failed" not in message:
            raise
        raise snowflake.connector.errors.ProgrammingError(
            msg=f"NULL result in a non-nullable column ({message})", errno=100072, sqlstate="22000"
        ) from err
    except snowflake.connector.errors.ProgrammingError as err:
        if err.msg:
            err.msg = _NOT_A_NUMBER.sub(r"Numeric value '\1' is not recognized", err.msg)
        raise


def _extract_comment_on_table(expression: exp.Expr) -> exp.Expr:
    """A temporary table created without a comment has none to record."""
    new = _original_extract_comment_on_table(expression)
    recorded = new.args.get("table_comment")
    if (
        isinstance(new, exp.Create)
        and recorded is not None
        and recorded[1] is None
        and new.find(exp.TemporaryProperty) is not None
    ):
        del new.args["table_comment"]
    return new


def _exact_json(expression: exp.Expr) -> exp.Expr:
    """PARSE_JSON(text) as a cast to JSON, which keeps the numbers as written."""
    if isinstance(expression, exp.ParseJSON) and not expression.args.get("safe"):
        return exp.Cast(this=expression.this, to=exp.DataType.build("JSON"))
    return expression


def _parse_json(expression: exp.Expr) -> exp.Expr:
    # A COPY's columns are rewritten by _json_transform_inserts first: its PARSE_JSON calls wait.
    if expression.find_ancestor(exp.Copy) is None:
        expression = _exact_json(expression)
    return _original_try_parse_json(expression)


def _literal(text: str | None) -> str:
    """``text`` as the inside of a SQL string literal; None as fakesnow writes it (``'None'``: a CREATE
    TABLE with properties and no comment records that)."""
    return str(text).replace("'", "''")


def _insert_table_comment_sql(catalog: str, schema: str, table: str, comment: str | None) -> str:
    """The catalogue's record of a table's comment, whatever quotes the names and comment hold."""
    return _original_insert_table_comment_sql(_literal(catalog), _literal(schema), _literal(table), _literal(comment))


def _insert_text_lengths_sql(catalog: str, schema: str, table: str, text_lengths: list[tuple[str, int]]) -> str:
    """The catalogue's record of text columns' lengths, whatever quotes the names hold."""
    escaped = [(_literal(name), size) for name, size in text_lengths]
    return _original_insert_text_lengths_sql(_literal(catalog), _literal(schema), _literal(table), escaped)


def install() -> None:
    # Read as info_schema.<name> at call time, by fakesnow's cursor.
    info_schema.insert_table_comment_sql = _insert_table_comment_sql
    info_schema.insert_text_lengths_sql = _insert_text_lengths_sql
    transforms.try_parse_json = _parse_json
    transforms.extract_comment_on_table = _extract_comment_on_table
    transforms.integer_precision = _integer_precision
    fakesnow_cursor.FakeSnowflakeCursor.execute = _execute  # type: ignore[method-assign]
    copy_into._inserts = _json_transform_inserts
    copy_into.copy_into = _copy_into
    fakesnow_cursor.copy_into = _copy_into  # imported by name there
