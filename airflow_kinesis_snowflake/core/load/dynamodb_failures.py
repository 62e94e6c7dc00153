"""Items the destination cannot hold: set aside whole, counted, and never overtaken.

With ``layout: unpacked`` each first-level attribute becomes a column named after it. Some names
cannot: one longer than a Snowflake identifier (255 characters), one with a control character, one
that is a column of this source (``ITEM``, ``DYNAMODBMETADATA``, ``DYNAMODB_DELETED``...) or of the
key (``PK`` beside the key ``pk``), or two attributes of one item that map to one column (``Name``
and ``name``, ``ß`` and ``SS``). Such an item does not stop its table: the change is set aside
(:func:`set_aside`) and the rest of the batch loads.

What a set-aside change does, so that nothing overtakes or loses it:

- its whole item is kept in ``<TABLE>_DYNAMODB_FAILURES`` (keys, version, metadata, the item as
  ``ITEM``, the attribute and the reason naming the fix, ``layout: packed``), in the batch's own
  transaction, once per change (a replay adds nothing);
- in the destination it acts as a removal of the same version: the row of the key goes (or is
  marked deleted, with ``deletes: soft``) and a tombstone keeps an older change of the key arriving
  later from bringing back a value the item no longer has. So the destination never shows an
  older state of an item whose newest change is in the failures table;
- a later change of the item that can be loaded is newer than both, and puts the row back.

With ``number_keys: number`` an N key is a ``NUMBER(38,0)`` column, and a key that is not whole or
has more than 38 digits can never have a row: each change of such an item (a removal too) is kept
in the failures table, and nothing of it is staged.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from airflow_kinesis_snowflake.core.load.dynamodb_rows import RESERVED_COLUMNS, KeyAttribute, Layout
from airflow_kinesis_snowflake.core.load.evolution import MAX_IDENTIFIER_LENGTH, column_name
from airflow_kinesis_snowflake.core.load.schema import METADATA_COLUMN as KINESIS_METADATA_COLUMN
from airflow_kinesis_snowflake.core.sources.dynamodb import types
from airflow_kinesis_snowflake.core.sources.dynamodb.model import EventName, ItemChange

FAILURES_SUFFIX = "_DYNAMODB_FAILURES"
FIX = "use layout: packed, whose ITEM column holds any attribute name, or rename the attribute in the writer"


@dataclass(frozen=True)
class ItemFailure:
    """A change set aside: the change as read, the attribute that cannot be a column, and why."""

    change: ItemChange
    attribute: str
    reason: str
    key_values: tuple[Any, ...] = ()

    @property
    def key_text(self) -> str:
        """The item's key as JSON text, attributes sorted (the failures table's ``KEY_TEXT``)."""
        return types.item_to_json(dict(sorted(self.change.keys.items())))


def unloadable_attribute(change: ItemChange, keys: Sequence[KeyAttribute]) -> tuple[str, str] | None:
    """The first attribute of ``change`` (sorted by name) that no column of the unpacked layout can
    take, and why; None when the whole item can be loaded.

    A removal carries no attributes. Attribute names are compared as the columns match them:
    case-insensitively (:meth:`str.casefold`).
    """
    if change.image is None:
        return None
    key_names = {k.name for k in keys}
    key_columns = {k.column.casefold(): k.name for k in keys}
    ours = {name.casefold() for name in RESERVED_COLUMNS} | {KINESIS_METADATA_COLUMN.casefold()}
    seen: dict[str, str] = {}
    for name in sorted(change.image):
        if name in key_names:
            continue
        fold = name.casefold()
        if fold in ours:
            return name, f"{name.upper()} is a column of this source's own, not an attribute's"
        if fold in key_columns:
            return name, f"it maps to the key column {key_columns[fold].upper()} of key attribute {key_columns[fold]!r}"
        if len(name) > MAX_IDENTIFIER_LENGTH:
            return (
                name,
                f"its name is {len(name)} characters, longer than a column name can be ({MAX_IDENTIFIER_LENGTH})",
            )
        if any(unicodedata.category(ch) == "Cc" for ch in name):
            return name, "its name holds a control character (a newline, a tab...)"
        try:
            column_name(name)
        except ValueError as err:
            return name, str(err)
        if fold in seen:
            return name, f"it and attribute {seen[fold]!r} differ only by case and would share one column"
        seen[fold] = name
    return None


def set_aside(
    changes: Sequence[ItemChange], keys: Sequence[KeyAttribute], layout: Layout
) -> tuple[list[ItemChange], list[ItemFailure]]:
    """The changes to stage, and those set aside (the module docstring tells what they do).

    Each set-aside change is staged as a removal of its key at its version, so the batch's rows keep
    their order; with ``layout: packed`` only changes of keys their columns cannot hold are set aside
    (:meth:`~.dynamodb_rows.KeyAttribute.unfit`), and those are not staged at all.
    """
    staged: list[ItemChange] = []
    failures: list[ItemFailure] = []
    for change in changes:
        item = types.item_to_json(dict(sorted(change.keys.items())))
        unfit = next(((k.name, why) for k in keys if (why := k.unfit(change.keys)) is not None), None)
        if unfit is not None:
            # A key no row can have: the change is kept, and nothing is staged (no row or tombstone of
            # the key can exist to be changed).
            reason = f"item {item} of DynamoDB table {change.table!r}: {unfit[1]}"
            values = tuple(None if k.unfit(change.keys) else k.value(change.keys) for k in keys)
            failures.append(ItemFailure(change, unfit[0], reason, values))
            continue
        found = unloadable_attribute(change, keys) if layout is Layout.UNPACKED else None
        if found is None:
            staged.append(change)
            continue
        attribute, why = found
        shown = attribute if len(attribute) <= 60 else attribute[:57] + "..."
        reason = f"item {item} of DynamoDB table {change.table!r}: attribute {shown!r} cannot be a column: {why}; {FIX}"
        failures.append(ItemFailure(change, attribute, reason, tuple(k.value(change.keys) for k in keys)))
        staged.append(replace(change, event_name=EventName.REMOVE, image=None, ttl_expiry=False))
    return staged, failures


def failure_values(failure: ItemFailure, batch_id: str) -> tuple[Any, ...]:
    """One row of the failures table, as the parameters of :func:`insert_failure_sql` (the key columns' values
    first)."""
    change = failure.change
    metadata = {
        "table": change.table,
        "eventName": str(change.event_name),
        "eventID": change.event_id,
        "shardId": change.shard_id,
        "approximateCreationDateTime": (
            change.approximate_creation_time.isoformat() if change.approximate_creation_time else None
        ),
    }
    return (
        *failure.key_values,
        failure.key_text,
        change.version.to_text(),
        json.dumps(metadata, ensure_ascii=False),
        None if change.image is None else types.item_to_json(change.image),
        failure.attribute,
        failure.reason,
        batch_id,
        failure.key_text,
        change.version.to_text(),
    )


def failures_table_ddl(table: str, key_definitions: str) -> str:
    """The failures table of a destination (idempotent); ``key_definitions``: the key columns' definitions."""
    return (
        f"CREATE TABLE IF NOT EXISTS {table} ({key_definitions}, KEY_TEXT VARCHAR NOT NULL, "
        "DYNAMODB_VERSION VARCHAR NOT NULL, "
        "DYNAMODBMETADATA OBJECT, ITEM VARIANT, ERROR_ATTRIBUTE VARCHAR, ERROR_MESSAGE VARCHAR, BATCH_ID VARCHAR, "
        "RECORDED_AT TIMESTAMP_TZ DEFAULT CURRENT_TIMESTAMP())"
    )


def insert_failure_sql(table: str, key_columns: Sequence[str]) -> str:
    """Insert one failure unless the same change (key and version) is there already; ``key_columns``
    quoted."""
    keys = "".join(f"{k}, " for k in key_columns)
    values = "%s, " * len(key_columns)
    return (
        f"INSERT INTO {table} ({keys}KEY_TEXT, DYNAMODB_VERSION, DYNAMODBMETADATA, ITEM, ERROR_ATTRIBUTE, "
        f"ERROR_MESSAGE, BATCH_ID) SELECT {values}%s, %s, PARSE_JSON(%s), PARSE_JSON(%s), %s, %s, %s WHERE NOT EXISTS "
        f"(SELECT 1 FROM {table} WHERE KEY_TEXT = %s AND DYNAMODB_VERSION = %s)"
    )
