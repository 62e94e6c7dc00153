"""Translate each distinct Snowflake statement text once in the fakesnow server, not on every run.

fakesnow answers a query by parsing its text with sqlglot (twice: the server reads its type, the
cursor runs it), rewriting the tree for DuckDB (some eighty passes over it), and, to describe the
result's columns, parsing ``DESCRIBE <the DuckDB SQL>`` again. The tests send the same texts over
and over (the ledger's reads, ``CREATE ... IF NOT EXISTS`` checks, a row at a time of an array
binding), so this work is memoised here, inside the server process only:

* parsing: a function of the text alone (and of the dialect); the cache keeps a pristine tree and
  hands out copies, since fakesnow rewrites trees in place.
* the rewrite for DuckDB: a function of the text and of what the rewrite reads from the session
  (its current database and schema, the database directory). Statements whose rewrite reads or
  changes anything else are rewritten every time, as before: ``SET``/``UNSET`` (they change the
  session's variables), ``IDENTIFIER(...)`` (it takes a bound value out of the statement's), ``PUT`` and ``LIST`` (the
  session's table stages), ``CREATE ... AS`` (it reads the database), and the parts of a
  statement fakesnow splits in several (``MERGE``, ...). A rewrite that fails is not kept.

Results are identical: a cached tree is a copy of the very tree the same code made for the same
text in the same session state. Errors (parse errors included) are raised as before, each time.
"""

from __future__ import annotations

import importlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import sqlglot
from fakesnow import cursor as fakesnow_cursor
from fakesnow import dialect as fakesnow_dialect
from fakesnow.variables import Variables
from sqlglot import exp

# Distinct statement texts kept per cache; the least recently used goes first.
MAX_ENTRIES = 4096

# The module (the package's attribute of that name is a function).
fakesnow_server: Any = importlib.import_module("fakesnow.server")
_original_parse_one = fakesnow_dialect.parse_one
_original_transform = fakesnow_cursor.FakeSnowflakeCursor._transform
# The statement the cursor's execute() parsed last, in this thread: (its text, the tree handed out).
_parsed = threading.local()


class _Lru:
    """A bounded mapping from keys to pristine trees; thread-safe."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[Hashable, exp.Expr] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> exp.Expr | None:
        with self._lock:
            tree = self._entries.get(key)
            if tree is not None:
                self._entries.move_to_end(key)
            return tree

    def put(self, key: Hashable, tree: exp.Expr) -> None:
        with self._lock:
            self._entries[key] = tree
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


PARSED = _Lru(MAX_ENTRIES)
TRANSFORMED = _Lru(MAX_ENTRIES)


def _memoised_parse(key: Hashable, parse: Callable[[], exp.Expr]) -> exp.Expr:
    tree = PARSED.get(key)
    if tree is None:
        tree = parse()
        PARSED.put(key, tree.copy())
        return tree
    return tree.copy()


def parse_one(command: str) -> exp.Expr:
    """fakesnow's ``parse_one`` (Snowflake dialect, its syntax errors), once per distinct text."""
    tree = _memoised_parse(("snowflake", command), lambda: _original_parse_one(command))
    _parsed.statement = (command, tree)
    return tree


def _parse_duckdb(sql: str) -> exp.Expr:
    return _memoised_parse(("duckdb", sql), lambda: sqlglot.parse_one(sql, read="duckdb"))


def rewrite_is_pure(expression: exp.Expr) -> bool:
    """Whether fakesnow's rewrite of ``expression`` reads nothing but the tree, the session's current
    database and schema and its database directory, and changes nothing but the tree."""
    if Variables.is_variable_modifier(expression) or isinstance(expression, (exp.Put, exp.ListStage)):
        return False
    if isinstance(expression, exp.Create) and expression.expression is not None:
        return False
    # IDENTIFIER(...), parsed either way fakesnow's rewrite reads it (it takes a bound value out of them).
    if expression.find(exp.DynamicIdentifier) is not None:
        return False
    return not any(
        isinstance(f.this, str) and f.this.upper() == "IDENTIFIER" for f in expression.find_all(exp.Anonymous)
    )


def _transform(self: Any, expression: exp.Expr, params: Any) -> exp.Expr:
    statement = getattr(_parsed, "statement", None)
    _parsed.statement = None
    # Only the very tree parse_one handed out for this text, unsplit, is known to be that text's.
    if statement is None or statement[1] is not expression or not rewrite_is_pure(expression):
        return _original_transform(self, expression, params)
    conn = self._conn
    key = (statement[0], conn.database, conn.schema, str(conn.db_path))
    tree = TRANSFORMED.get(key)
    if tree is None:
        transformed = _original_transform(self, expression, params)
        TRANSFORMED.put(key, transformed.copy())
        return transformed
    return tree.copy()


def _describe_last_sql(self: Any) -> list[Any]:
    # As fakesnow's own, with the parse of the DESCRIBE statement memoised.
    with self._conn.cursor() as cur:
        cur._execute(_parse_duckdb(f"DESCRIBE {self._last_sql}"), self._last_params)
        return list(cur.fetchall())


def install() -> None:
    fakesnow_cursor.parse_one = parse_one  # imported by name there and in the server
    fakesnow_server.parse_one = parse_one
    fakesnow_cursor.FakeSnowflakeCursor._transform = _transform  # type: ignore[method-assign]
    fakesnow_cursor.FakeSnowflakeCursor._describe_last_sql = _describe_last_sql  # type: ignore[method-assign]
