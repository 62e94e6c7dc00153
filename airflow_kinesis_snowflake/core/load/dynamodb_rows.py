"""The DynamoDB source's columns (the one definition) and the rows of a staged batch.

The destination table holds one row per primary key: the key columns (the key attributes'
names upper-cased), ``DYNAMODB_VERSION`` (:meth:`~..sources.dynamodb.model.Version.to_text`),
``DYNAMODB_DELETED`` and ``DYNAMODB_DELETED_AT`` (soft deletes only), ``DYNAMODBMETADATA``, then
the item: one ``ITEM`` VARIANT (``packed``) or one column per first-level attribute
(``unpacked``). A staged batch (Parquet, one row per change) has the same columns plus
``DYNAMODB_EVENT``; a removal's row carries its keys only.

``unpacked`` uses the Kinesis path's schema evolution (:mod:`.evolution`): each attribute's
values are typed onto its lattice (:func:`attribute_type`), summarised per batch
(:func:`summarize`) and :func:`~.evolution.plan_changes` decides the new columns, named as for
Kinesis keys. So an attribute that is N in one item and S in another within a batch gets a
``VARCHAR`` column, the numbers landing as their exact text. A value is written into an existing
column only when the column holds it exactly (:func:`column_value`). An attribute whose value an
existing column cannot hold (N in earlier batches, so ``NUMBER(38,0)``, and now S) widens the
column before staging (:func:`widenings`): to the lattice's join of the column's type and the
value's (N and S give ``VARCHAR``, the numbers as their exact text), or ``VARIANT``, which holds
every value. :class:`AttributeTypeError` remains for what no column can hold (a name that is one of
this source's columns, two attributes differing only by case); the sync sets such items aside before
they reach these functions (:mod:`.dynamodb_failures`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any

import pyarrow as pa

from airflow_kinesis_snowflake.core.load.evolution import JsonType, KeyStats, KeySummary, column_name, widen
from airflow_kinesis_snowflake.core.load.schema import _INTEGER_TYPES, _NUMBER_TYPES, TableColumn, arrow_type, coerce
from airflow_kinesis_snowflake.core.sources.dynamodb import types
from airflow_kinesis_snowflake.core.sources.dynamodb.model import AttributeValue, ItemChange

VERSION_COLUMN = "DYNAMODB_VERSION"
DELETED_COLUMN = "DYNAMODB_DELETED"
DELETED_AT_COLUMN = "DYNAMODB_DELETED_AT"
METADATA_COLUMN = "DYNAMODBMETADATA"
ITEM_COLUMN = "ITEM"
EVENT_COLUMN = "DYNAMODB_EVENT"
#: Columns of ours; no attribute of an unpacked item may take one of these names.
RESERVED_COLUMNS = frozenset(
    {VERSION_COLUMN, DELETED_COLUMN, DELETED_AT_COLUMN, METADATA_COLUMN, ITEM_COLUMN, EVENT_COLUMN}
)
#: A column being widened is copied into ``<column><WIDENING_SUFFIX>`` first; never an attribute's.
WIDENING_SUFFIX = "__DYNAMODB_WIDENING"
#: The keys of DYNAMODBMETADATA, in order.
METADATA_KEYS = (
    "table",
    "eventName",
    "eventID",
    "sequenceNumber",
    "shardId",
    "approximateCreationDateTime",
    "ttlExpiry",
)
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_BINARY_TYPES = {"BINARY", "VARBINARY"}


class Layout(StrEnum):
    """How an item lands: one VARIANT, or one column per first-level attribute."""

    PACKED = "packed"
    UNPACKED = "unpacked"


#: The column type of an N key with ``number_keys: number``.
NUMBER_KEY_TYPE = "NUMBER(38,0)"


@dataclass(frozen=True)
class KeyAttribute:
    """One attribute of the table's primary key, with its DynamoDB type (S, N or B).

    An N key is ``NUMBER(38,0)`` when ``numeric`` (``number_keys: number``): SQL users compare and
    join it as a number, and a key that is not whole or has more than 38 digits cannot have a row
    (:meth:`unfit`; its changes are set aside). Otherwise it is ``VARCHAR`` holding the number's
    canonical exact text (``types.number_text``), which holds every DynamoDB number exactly.
    """

    name: str
    type: str
    numeric: bool = False

    def __post_init__(self) -> None:
        if self.type not in ("S", "N", "B"):
            raise ValueError(f"key attribute {self.name!r} has type {self.type!r}; DynamoDB keys are S, N or B")
        if self.numeric and self.type != "N":
            raise ValueError(f"key attribute {self.name!r} is {self.type}: only an N key can be a NUMBER column")

    @property
    def column(self) -> str:
        return self.name.upper()

    @property
    def sql_type(self) -> str:
        if self.numeric:
            return NUMBER_KEY_TYPE
        return "BINARY" if self.type == "B" else "VARCHAR"

    @property
    def arrow_type(self) -> pa.DataType:
        if self.numeric:
            return pa.decimal128(38, 0)
        return pa.binary() if self.type == "B" else pa.string()

    def unfit(self, keys: Mapping[str, AttributeValue]) -> str | None:
        """Why this key's value of ``keys`` cannot be held by its column; None when it can."""
        attribute = keys.get(self.name)
        if not self.numeric or attribute is None or types.type_of(attribute) != "N":
            return None
        number = types.canonical(types.decimal_of(attribute["N"]))
        if types.scale_of(number) == 0 and types.fits_number(number):
            return None
        return (
            f"key attribute {self.name!r} is {types.number_text(number)}, which its {NUMBER_KEY_TYPE} key column "
            "cannot hold (not whole, or more than 38 digits); number_keys: text keeps every number key exactly, "
            "in a new destination table"
        )

    def value(self, keys: Mapping[str, AttributeValue]) -> Any:
        attribute = keys.get(self.name)
        if attribute is None or types.type_of(attribute) != self.type:
            raise ValueError(f"key {keys!r} has no {self.type} value for key attribute {self.name!r}")
        if self.numeric:
            if (why := self.unfit(keys)) is not None:
                raise ValueError(why)
            return types.canonical(types.decimal_of(attribute["N"]))
        return types.binary_of(attribute) if self.type == "B" else types.text_of(attribute)

    def fitted_to(self, existing: Mapping[str, TableColumn]) -> KeyAttribute:
        """This key as an existing destination holds it: an N key stays text where its column is text
        (a table created before ``number_keys``, or with ``number_keys: text``)."""
        column = existing.get(self.column)
        if self.numeric and column is not None and column.base_type in ("VARCHAR", "TEXT", "STRING"):
            return KeyAttribute(self.name, self.type, numeric=False)
        return self

    def to_list(self) -> list[Any]:
        return [self.name, self.type, self.numeric]

    @classmethod
    def from_list(cls, data: Sequence[Any]) -> KeyAttribute:
        """The inverse of :meth:`to_list`; a plan of an earlier version has no third item (text)."""
        return cls(data[0], data[1], bool(data[2]) if len(data) > 2 else False)


def key_attributes(table_description: Mapping[str, Any]) -> tuple[KeyAttribute, ...]:
    """The key attributes, partition key first, from DescribeTable's ``Table``."""
    defined = {d["AttributeName"]: d["AttributeType"] for d in table_description["AttributeDefinitions"]}
    ordered = sorted(table_description["KeySchema"], key=lambda k: k["KeyType"] != "HASH")
    return tuple(KeyAttribute(k["AttributeName"], defined[k["AttributeName"]]) for k in ordered)


def table_columns(
    keys: Sequence[KeyAttribute], layout: Layout, *, soft_deletes: bool, attributes: Sequence[TableColumn] = ()
) -> list[TableColumn]:
    """The destination table's columns, in order (``attributes``: the unpacked attribute columns)."""
    columns = [TableColumn(k.column, k.sql_type, nullable=False) for k in keys]
    columns.append(TableColumn(VERSION_COLUMN, "VARCHAR", nullable=False))
    if soft_deletes:
        columns += [TableColumn(DELETED_COLUMN, "BOOLEAN"), TableColumn(DELETED_AT_COLUMN, "TIMESTAMP_TZ")]
    columns.append(TableColumn(METADATA_COLUMN, "OBJECT"))
    if layout is Layout.PACKED:
        columns.append(TableColumn(ITEM_COLUMN, "VARIANT"))
    else:
        columns += attributes
    return columns


def metadata_text(change: ItemChange) -> str:
    """``DYNAMODBMETADATA`` as JSON object text."""
    created = change.approximate_creation_time
    stream = change.version.origin == 1
    values = (
        change.table,
        str(change.event_name),
        change.event_id,
        str(change.version.sequence) if stream else None,
        change.shard_id,
        created.isoformat() if created is not None else None,
        change.ttl_expiry,
    )
    return json.dumps(dict(zip(METADATA_KEYS, values, strict=True)), ensure_ascii=False, separators=(",", ":"))


def _common(changes: Sequence[ItemChange], keys: Sequence[KeyAttribute]) -> list[tuple[pa.Field, pa.Array]]:
    columns = [
        (pa.field(k.column, k.arrow_type), pa.array([k.value(c.keys) for c in changes], k.arrow_type)) for k in keys
    ]
    removed_at = [c.approximate_creation_time if c.is_removal else None for c in changes]
    columns += [
        (pa.field(VERSION_COLUMN, pa.string()), pa.array([c.version.to_text() for c in changes], pa.string())),
        (pa.field(EVENT_COLUMN, pa.string()), pa.array([str(c.event_name) for c in changes], pa.string())),
        (pa.field(DELETED_COLUMN, pa.bool_()), pa.array([c.is_removal for c in changes], pa.bool_())),
        (pa.field(DELETED_AT_COLUMN, _TIMESTAMP), pa.array(removed_at, _TIMESTAMP)),
        (pa.field(METADATA_COLUMN, pa.string()), pa.array([metadata_text(c) for c in changes], pa.string())),
    ]
    return columns


def _table(columns: list[tuple[pa.Field, pa.Array]]) -> pa.Table:
    return pa.Table.from_arrays([a for _, a in columns], schema=pa.schema([f for f, _ in columns]))


def packed_rows(changes: Sequence[ItemChange], keys: Sequence[KeyAttribute]) -> pa.Table:
    """The staged rows of the ``packed`` layout: keys, ours, and ``ITEM`` as JSON text (None for a removal)."""
    items = [None if c.image is None else types.item_to_json(c.image) for c in changes]
    return _table([*_common(changes, keys), (pa.field(ITEM_COLUMN, pa.string()), pa.array(items, pa.string()))])


# -- unpacked: the first-level attributes as columns ------------------------------------------------


class AttributeTypeError(ValueError):
    """An attribute's value that its column cannot hold exactly; ``column`` names the column."""

    def __init__(self, column: str, attribute: str, reason: str) -> None:
        super().__init__(
            f"column {column} cannot hold attribute {attribute!r} exactly: {reason}. Nothing was staged; "
            "make the column VARIANT (it holds every value), or use layout: packed"
        )
        self.column = column
        self.attribute = attribute


def attribute_type(value: AttributeValue) -> JsonType | None:
    """Where a first-level value sits on the schema-evolution lattice; None for NULL (says nothing).

    S is VARCHAR (never a timestamp: DynamoDB says it is a string); N is NUMBER(38,0) when whole
    and of up to 38 digits, else VARIANT (which holds each number exactly, as its own NUMBER(38, s)
    or its exact text); B is VARCHAR (base64: the lattice has no BINARY); M, L and sets are VARIANT.
    """
    kind = types.type_of(value)
    if kind == "NULL":
        return None
    if kind == "N":
        number = types.canonical(types.decimal_of(value["N"]))
        whole = types.scale_of(number) == 0 and types.fits_number(number)
        return JsonType.INTEGER if whole else JsonType.VARIANT
    return {"S": JsonType.VARCHAR, "B": JsonType.VARCHAR, "BOOL": JsonType.BOOLEAN}.get(kind, JsonType.VARIANT)


def _attributes(change: ItemChange, key_names: frozenset[str]) -> Iterable[tuple[str, AttributeValue]]:
    if change.image is None:
        return ()
    return ((name, value) for name, value in change.image.items() if name not in key_names)


def summarize(
    changes: Iterable[ItemChange], columns: Sequence[TableColumn], keys: Sequence[KeyAttribute]
) -> KeySummary:
    """The attributes of ``changes`` without a column, with the lattice type of their values.

    Feed it to :func:`~.evolution.plan_changes`. Attributes are taken in sorted order, so the
    summary does not depend on the order of an item's attributes. Raises
    :class:`AttributeTypeError` for an attribute named like one of this source's columns.
    """
    known = {c.name.casefold() for c in columns}
    key_names = frozenset(k.name for k in keys)
    summary = KeySummary()
    for change in changes:
        for name, value in sorted(_attributes(change, key_names)):
            if name.upper() in RESERVED_COLUMNS or name.upper() in {k.column for k in keys}:
                raise AttributeTypeError(name.upper(), name, "the name is one of this source's own columns")
            fold = name.casefold()
            if fold in known:
                continue
            stats = summary.keys.setdefault(fold, KeyStats(name))
            stats.type = widen(stats.type, attribute_type(value))
    return summary


def _arrow_type(column: TableColumn) -> pa.DataType:
    return pa.binary() if column.base_type in _BINARY_TYPES else arrow_type(column)


def column_value(value: AttributeValue, column: TableColumn, attribute: str) -> Any:
    """The Arrow value of an attribute in its column, exactly; :class:`AttributeTypeError` if it cannot be."""
    kind = types.type_of(value)
    base = column.base_type
    if kind == "NULL":
        return None
    if base in ("VARIANT", "OBJECT", "ARRAY"):
        if (base == "OBJECT" and kind != "M") or (base == "ARRAY" and kind not in ("L", "SS", "NS", "BS")):
            raise AttributeTypeError(column.name, attribute, f"a {kind} value is not an {base}")
        return types.to_json(value)
    target = _arrow_type(column)
    if pa.types.is_string(target) and base not in ("TIMESTAMP", "TIMESTAMP_NTZ", "TIMESTAMP_LTZ", "TIMESTAMP_TZ"):
        if base == "DATE" or (kind != "S" and base not in ("VARCHAR", "TEXT", "STRING", "CHAR", "CHARACTER")):
            raise AttributeTypeError(column.name, attribute, f"a {kind} value in a {base} column")
        text = types.text_of(value)
        if text is not None and column.max_length is not None and len(text) > column.max_length:
            raise AttributeTypeError(column.name, attribute, f"{len(text)} characters, longer than the column")
        return text
    if pa.types.is_binary(target) and kind == "B":
        return types.binary_of(value)
    if pa.types.is_boolean(target) and kind == "BOOL":
        return bool(value["BOOL"])
    if kind == "N" and (pa.types.is_integer(target) or pa.types.is_decimal(target)):
        number = types.canonical(types.decimal_of(value["N"]))
        try:
            fitted = coerce(str(number), column)
        except ValueError as err:
            raise AttributeTypeError(column.name, attribute, str(err)) from None
        if Decimal(fitted) != number:
            raise AttributeTypeError(column.name, attribute, f"{number} would be rounded to {fitted}")
        return fitted
    if kind == "N" and pa.types.is_floating(target):
        number = types.canonical(types.decimal_of(value["N"]))
        if Decimal(float(number)) != number:
            raise AttributeTypeError(column.name, attribute, f"{number} is not exactly a float")
        return float(number)
    if kind == "S" and (pa.types.is_timestamp(target) or pa.types.is_date32(target)):
        try:
            return coerce(value["S"], column)
        except ValueError as err:
            raise AttributeTypeError(column.name, attribute, str(err)) from None
    raise AttributeTypeError(column.name, attribute, f"a {kind} value in a {base} column")


def unpacked_rows(
    changes: Sequence[ItemChange], keys: Sequence[KeyAttribute], columns: Sequence[TableColumn]
) -> pa.Table:
    """The staged rows of the ``unpacked`` layout: keys, ours, and one Arrow column per attribute column.

    :param columns: the destination table's columns once the batch's new columns were added;
        those that are not the keys' nor this source's are the attribute columns. Attributes map to
        them case-insensitively, as Kinesis keys do; an attribute without a column, or two that
        differ only by case, raise :class:`AttributeTypeError` (nothing is lost quietly).
    """
    attribute_columns = _attribute_columns(columns, keys)
    by_fold = {c.name.casefold(): c for c in attribute_columns}
    key_names = frozenset(k.name for k in keys)
    values: dict[str, list[Any]] = {c.name: [None] * len(changes) for c in attribute_columns}
    for row, change in enumerate(changes):
        seen: dict[str, str] = {}
        for name, value in _attributes(change, key_names):
            column = by_fold.get(name.casefold())
            if column is None:
                if attribute_type(value) is None:
                    continue
                raise AttributeTypeError(column_name(name), name, "the column does not exist; add it first")
            if column.name in seen:
                raise AttributeTypeError(column.name, name, f"attribute {seen[column.name]!r} differs only by case")
            seen[column.name] = name
            values[column.name][row] = column_value(value, column, name)
    arrays = [(pa.field(c.name, _arrow_type(c)), pa.array(values[c.name], _arrow_type(c))) for c in attribute_columns]
    return _table([*_common(changes, keys), *arrays])


def _attribute_columns(columns: Sequence[TableColumn], keys: Sequence[KeyAttribute]) -> list[TableColumn]:
    ours = RESERVED_COLUMNS | {k.column for k in keys}
    return [c for c in columns if c.name.upper() not in ours and not c.name.upper().endswith(WIDENING_SUFFIX)]


@dataclass(frozen=True)
class Widening:
    """An attribute column that must take a wider type before a batch is staged.

    :param column: the column's name, as the table has it.
    :param sql_type: its new type: ``VARCHAR`` or ``VARIANT``.
    """

    column: str
    sql_type: str


def lattice_type(column: TableColumn) -> JsonType | None:
    """Where an existing column sits on the schema-evolution lattice; None for a type off it
    (``DATE``, ``BINARY``, a ``NUMBER`` with a scale, a bounded ``VARCHAR``...)."""
    base = column.base_type
    if base in ("VARIANT", "OBJECT", "ARRAY"):
        return JsonType.VARIANT
    if base in ("VARCHAR", "TEXT", "STRING") and (column.max_length is None or column.max_length >= 16_777_216):
        return JsonType.VARCHAR
    if base == "BOOLEAN":
        return JsonType.BOOLEAN
    if base in _INTEGER_TYPES or (base in _NUMBER_TYPES and column.numeric_scale == 0):
        return JsonType.INTEGER
    return None


def widenings(
    changes: Iterable[ItemChange], columns: Sequence[TableColumn], keys: Sequence[KeyAttribute]
) -> list[Widening]:
    """The attribute columns that cannot hold some value of ``changes`` exactly, and their new types.

    The new type is the lattice's join of the column's type and every such value's
    (:func:`~.evolution.widen`): ``NUMBER(38,0)`` and an S value give ``VARCHAR``, a fraction or a
    map give ``VARIANT``. Whatever the join cannot hold (or a column off the lattice) becomes
    ``VARIANT``, which holds every value exactly. In column order; empty when every value fits.
    """
    by_fold = {c.name.casefold(): c for c in _attribute_columns(columns, keys)}
    key_names = frozenset(k.name for k in keys)
    wanted: dict[str, JsonType] = {}
    for change in changes:
        for name, value in _attributes(change, key_names):
            column = by_fold.get(name.casefold())
            if column is None:
                continue
            kind = attribute_type(value)
            if column.name in wanted:
                wanted[column.name] = widen(wanted[column.name], kind) or JsonType.VARIANT
                continue
            try:
                column_value(value, column, name)
            except AttributeTypeError:
                current = lattice_type(column)
                joined = widen(current, kind) if current is not None else None
                if joined is None or joined is current or joined not in (JsonType.VARCHAR, JsonType.VARIANT):
                    joined = JsonType.VARIANT
                wanted[column.name] = joined
    order = [c.name for c in columns]
    return [Widening(name, wanted[name].sql) for name in sorted(wanted, key=order.index)]
