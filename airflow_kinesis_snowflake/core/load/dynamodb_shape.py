"""Whether an existing Snowflake table can be a DynamoDB connector's destination as configured.

A DynamoDB connector's MERGE sets every attribute column of a row (NULL where the item lacks the
attribute) and reads and writes its bookkeeping columns. So a table created for another
``layout`` or ``deletes`` setting, or for another kind of connector, would be loaded wrong without
an error: a ``packed`` MERGE into an ``unpacked`` table nulls every attribute column, a ``hard``
MERGE into a ``soft`` table re-inserts items under their old ``DYNAMODB_DELETED = TRUE`` mark.

:func:`shape_problems` compares the table's columns with what the configuration needs, as a pure
function; :class:`DestinationShapeError` carries the refusal, naming the table, what does not fit
and the fixes. The sync checks it before anything is created, claimed or recorded.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_kinesis_snowflake.core.load.dynamodb_rows import (
    DELETED_AT_COLUMN,
    DELETED_COLUMN,
    EVENT_COLUMN,
    ITEM_COLUMN,
    METADATA_COLUMN,
    VERSION_COLUMN,
    WIDENING_SUFFIX,
    Layout,
)
from airflow_kinesis_snowflake.core.load.schema import METADATA_COLUMN as KINESIS_METADATA_COLUMN
from airflow_kinesis_snowflake.core.load.schema import TableColumn

_BOOKKEEPING = {VERSION_COLUMN, DELETED_COLUMN, DELETED_AT_COLUMN, METADATA_COLUMN, EVENT_COLUMN}


class DestinationShapeError(ValueError):
    """An existing table does not have the columns the connector's settings need; nothing was done."""


def _text_key(column_type: str) -> bool:
    return column_type.split("(")[0].upper() in {"VARCHAR", "TEXT", "STRING"}


def _same_key_type(expected: str, actual: TableColumn) -> bool:
    """A key column holds the key's values: text for a string key (or a number key kept as text),
    NUMBER for a number key, BINARY for a binary key."""
    want = expected.split("(")[0].upper()
    if _text_key(want):
        return actual.base_type in {"VARCHAR", "TEXT", "STRING"}
    return actual.base_type == want


def shape_problems(
    expected: Sequence[TableColumn], existing: Sequence[TableColumn], *, layout: Layout, soft_deletes: bool
) -> list[str]:
    """What keeps ``existing`` (the table's columns) from being loaded as configured; empty when it fits.

    :param expected: the columns the connector creates the table with (:func:`~.dynamodb_rows.table_columns`
        for its keys, layout and deletes; no attribute columns).
    :param existing: the table's columns, as the information schema describes them.
    :param layout: the connector's ``layout``.
    :param soft_deletes: the connector's ``deletes`` is ``soft``.
    """
    have = {c.name.upper(): c for c in existing}
    problems: list[str] = []
    if KINESIS_METADATA_COLUMN in have and VERSION_COLUMN not in have:
        problems.append(
            f"it has a {KINESIS_METADATA_COLUMN} column and no {VERSION_COLUMN}: it is a Kinesis connector's "
            "destination, not a DynamoDB table's copy"
        )
    missing = [c for c in expected if c.name.upper() not in have]
    if missing:
        problems.append("it lacks the column(s) " + ", ".join(f"{c.name} {c.data_type}" for c in missing))
    for column in expected:
        actual = have.get(column.name.upper())
        key = not column.nullable and column.name.upper() not in _BOOKKEEPING
        if actual is not None and key and not _same_key_type(column.data_type, actual):
            problems.append(
                f"its key column {actual.name} is {actual.data_type}, where the DynamoDB key needs {column.data_type}"
            )
    keys = {c.name.upper() for c in expected if c.name.upper() not in _BOOKKEEPING and c.name.upper() != ITEM_COLUMN}
    attributes = [
        c.name
        for c in existing
        if c.name.upper() not in keys | _BOOKKEEPING | {ITEM_COLUMN, KINESIS_METADATA_COLUMN}
        and not c.name.upper().endswith(WIDENING_SUFFIX)
    ]
    if layout is Layout.UNPACKED and ITEM_COLUMN in have and VERSION_COLUMN in have:
        problems.append(
            f"it has an {ITEM_COLUMN} column: it was created with layout: packed, and this connector's "
            f"layout is unpacked (a column per attribute; the {ITEM_COLUMN} column would keep stale items)"
        )
    if layout is Layout.PACKED and attributes and VERSION_COLUMN in have:
        shown = ", ".join(attributes[:5]) + (", ..." if len(attributes) > 5 else "")
        problems.append(
            f"it has attribute columns ({shown}): it was created with layout: unpacked, and this connector's "
            "layout is packed (every change would set those columns to NULL)"
        )
    if not soft_deletes and DELETED_COLUMN in have and VERSION_COLUMN in have:
        problems.append(
            f"it has a {DELETED_COLUMN} column: it was created with deletes: soft, and this connector's deletes "
            "is hard (an item put again after a removal would keep its deleted mark)"
        )
    return problems


def shape_error(table: str, connector: str | None, problems: Sequence[str]) -> DestinationShapeError:
    """The refusal for :func:`shape_problems`' findings, naming the table and the fixes."""
    who = f"connector {connector!r}" if connector else "this connector"
    return DestinationShapeError(
        f"destination table {table} cannot be loaded by {who} as configured: "
        + "; ".join(problems)
        + ". Nothing was created, claimed or recorded. To fix it: set layout and deletes back to what the "
        "table was created with; or point destination.table at a new table (the connector snapshots the "
        "DynamoDB table into it); or, to change this table's layout, drop or rename it: the next sync "
        "takes a new snapshot into a table of the new layout (on_gap: resnapshot)"
    )
