"""Map first-level JSON keys onto the destination table's columns and build Arrow batches.

Keys match columns case-insensitively, as Snowflake resolves unquoted identifiers. A record with two
keys that differ only by case and so map to one column ("id" and "ID") is a dead letter, kept whole
with both keys and the column (:class:`KeysDifferingByCaseError`): loading one of its values would
lose the other. Keys with no column are ignored, but while schema evolution holds keys back
(:class:`HeldBack`): then a record with a value for such a key is a dead letter, kept whole. A value
that does not fit its column makes the record a dead letter naming the column and the reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Context, Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

METADATA_COLUMN = "KINESISMETADATA"

METADATA_TYPE = pa.struct(
    [
        ("stream", pa.string()),
        ("shardId", pa.string()),
        ("approximateArrival", pa.string()),
        ("partitionKey", pa.string()),
        ("sequenceNumber", pa.string()),
        ("subSequenceNumber", pa.int64()),
        ("shardedSequenceNumber", pa.string()),
    ]
)

_INTEGER_TYPES = {"INT", "INTEGER", "BIGINT", "SMALLINT", "TINYINT", "BYTEINT"}
_FLOAT_TYPES = {"FLOAT", "FLOAT4", "FLOAT8", "DOUBLE", "DOUBLE PRECISION", "REAL"}
_NUMBER_TYPES = {"NUMBER", "DECIMAL", "NUMERIC", "FIXED"}
_TEXT_TYPES = {"VARCHAR", "TEXT", "STRING", "CHAR", "CHARACTER"}
_SEMI_STRUCTURED = {"VARIANT", "OBJECT", "ARRAY"}
_TIMESTAMP_TYPES = {"TIMESTAMP", "TIMESTAMP_NTZ", "TIMESTAMP_LTZ", "TIMESTAMP_TZ", "DATETIME"}
_INT64 = (-(2**63), 2**63 - 1)
# Every integer of this many digits fits int64; NUMBER(p,0) of a wider precision is written as decimal.
_INT64_DIGITS = 18
# Room for NUMBER(38, s) plus a carry; the default context holds only 28 digits.
_DECIMAL_CONTEXT = Context(prec=40)


@dataclass(frozen=True)
class TableColumn:
    """A destination column as INFORMATION_SCHEMA.COLUMNS describes it."""

    name: str
    data_type: str
    nullable: bool = True
    numeric_scale: int = 0
    numeric_precision: int | None = None
    max_length: int | None = None

    @property
    def base_type(self) -> str:
        return re.sub(r"\(.*\)", "", self.data_type).strip().upper()


def arrow_type(column: TableColumn) -> pa.DataType:
    """The Parquet/Arrow type a column's values are written as.

    A whole-number column is written as int64 only when its declared precision fits 64 bits
    (NUMBER(18,0) and narrower). NUMBER(38,0), the default, and its synonyms INT, INTEGER, BIGINT,
    SMALLINT, TINYINT and BYTEINT hold 38 digits on Snowflake: they are written as decimal128(38, 0),
    which Snowflake's Parquet COPY loads into any NUMBER column exactly.
    """
    base = column.base_type
    whole = base in _INTEGER_TYPES or (base in _NUMBER_TYPES and column.numeric_scale == 0)
    if whole and column.numeric_precision is not None and column.numeric_precision <= _INT64_DIGITS:
        return pa.int64()
    if whole:
        return pa.decimal128(38, 0)
    if base in _NUMBER_TYPES:
        return pa.decimal128(38, column.numeric_scale)
    if base in _FLOAT_TYPES:
        return pa.float64()
    if base == "BOOLEAN":
        return pa.bool_()
    if base in _TIMESTAMP_TYPES:
        return pa.timestamp("us", tz="UTC")
    if base == "DATE":
        return pa.date32()
    return pa.string()


def _number(value: Any, base: str, what: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected {what} for {base}, got {type(value).__name__}")
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise ValueError(f"expected {what} for {base}, got {value!r}") from None
    if not number.is_finite():
        raise ValueError(f"{value!r} is not a finite number, which {base} cannot hold")
    return number


def _whole_digits(number: Decimal) -> int:
    # Without arithmetic, which overflows the decimal context on an exponent like 1e999999999.
    return number.adjusted() + 1 if number and number.adjusted() >= 0 else 0


def _unicode(text: str) -> str:
    # JSON may escape a lone surrogate ("\ud800"); Arrow and Snowflake cannot store one.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"text holds a lone surrogate at character {err.start}, which is not Unicode") from None
    return text


def coerce(value: Any, column: TableColumn) -> Any:
    """Convert a JSON value to the column's Arrow value; :class:`ValueError` says why it cannot."""
    if value is None:
        return None
    base = column.base_type
    target = arrow_type(column)
    if pa.types.is_integer(target):
        number = _number(value, base, "a whole number")
        if number != number.to_integral_value():
            raise ValueError(f"expected a whole number for {base}, got {value!r}")
        # 19+ digits is beyond int64; checked first, as "1e999999999" would build a giant int.
        if _whole_digits(number) > 19 or not _INT64[0] <= (as_int := int(number)) <= _INT64[1]:
            raise ValueError(f"number {value!r} is out of range for {base}")
        if column.numeric_precision and len(str(abs(as_int))) > column.numeric_precision:
            raise ValueError(f"number {value!r} has too many digits for NUMBER({column.numeric_precision},0)")
        return as_int
    if pa.types.is_decimal(target):
        whole = column.numeric_scale == 0
        number = _number(value, base, "a whole number" if whole else "a number")
        if whole and number != number.to_integral_value():
            raise ValueError(f"expected a whole number for {base}, got {value!r}")
        precision = column.numeric_precision or 38
        too_long = ValueError(f"number {value!r} has too many digits for NUMBER({precision},{column.numeric_scale})")
        # Checked before rounding (so quantize cannot overflow its context) and after (99.999 rounds
        # to 100.00, which NUMBER(4,2) cannot hold).
        if _whole_digits(number) > precision - column.numeric_scale:
            raise too_long
        rounded = number.quantize(Decimal(1).scaleb(-column.numeric_scale), context=_DECIMAL_CONTEXT)
        if _whole_digits(rounded) > precision - column.numeric_scale:
            raise too_long
        return rounded
    if pa.types.is_floating(target):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"expected a number for {base}, got {type(value).__name__}")
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"expected a number for {base}, got {value!r}") from None
        except OverflowError:  # an int beyond the float range
            raise ValueError(f"number {value!r} is out of range for {base}") from None
    if pa.types.is_boolean(target):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ValueError(f"expected a boolean, got {type(value).__name__}")
    if pa.types.is_timestamp(target):
        if not isinstance(value, str):
            raise ValueError(f"expected an ISO 8601 timestamp string, got {type(value).__name__}")
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"not an ISO 8601 timestamp: {value!r}") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    if pa.types.is_date32(target):
        if not isinstance(value, str):
            raise ValueError(f"expected an ISO 8601 date string, got {type(value).__name__}")
        try:
            return date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"not an ISO 8601 date: {value!r}") from None
    if base in _SEMI_STRUCTURED:
        try:
            # allow_nan=False: Python's json reads NaN and Infinity (and 1e400 as Infinity), which
            # Snowflake's JSON refuses; written out they would fail the whole COPY.
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except RecursionError:
            raise ValueError(f"value is nested too deeply for {base}") from None
        except ValueError:
            raise ValueError(f"value holds NaN or an infinite number, which {base} cannot hold") from None
        return _unicode(text)
    if isinstance(value, (dict, list)):
        raise ValueError(f"expected a scalar for {base}, got a JSON {type(value).__name__}")
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    if column.max_length is not None and len(text) > column.max_length:
        raise ValueError(f"text of {len(text)} characters is longer than {base}({column.max_length})")
    return _unicode(text)


class ColumnValueError(ValueError):
    """A value that does not fit its column; ``column`` names the column."""

    def __init__(self, column: str, reason: str) -> None:
        super().__init__(f"column {column}: {reason}")
        self.column = column


def shown(key: str, limit: int = 60) -> str:
    """A key as messages show it: quoted, escaped, and cut short when long."""
    text = json.dumps(key)
    return text if len(key) <= limit else f'{json.dumps(key[:limit])[:-1]}..." ({len(key)} characters)'


@dataclass(frozen=True)
class HeldBack:
    """Keys that have no column in this batch only because schema evolution was capped.

    A record with a value for such a key is kept whole as a dead letter, not loaded without it.

    :param reason: why these keys have no column yet.
    :param can_have_column: whether a key can ever name a column; keys that cannot are ignored.
    """

    reason: str
    can_have_column: Callable[[str], bool]


class KeysWithoutColumnError(ValueError):
    """A record holds values for keys that are held back (:class:`HeldBack`); no column is at fault."""

    column: str | None = None
    _LISTED = 10

    def __init__(self, keys: Sequence[str], reason: str) -> None:
        listed = ", ".join(shown(k) for k in keys[: self._LISTED])
        more = f" and {len(keys) - self._LISTED} more" if len(keys) > self._LISTED else ""
        word = "key" if len(keys) == 1 else "keys"
        super().__init__(
            f"no column for {word} {listed}{more}: {reason}. The record is kept whole here rather than "
            "loaded without these values"
        )
        self.keys = tuple(keys)


class KeysDifferingByCaseError(ValueError):
    """Keys of one record that differ only by case map to one column; ``column`` names the first such column.

    Which of their values the column should take cannot be told, so the record is kept whole as a
    dead letter rather than loaded with one value and without the other.

    :param collisions: column name -> its keys in the record, in document order (two or more each).
    """

    _LISTED = 10

    def __init__(self, collisions: Mapping[str, Sequence[str]]) -> None:
        items = list(collisions.items())
        clauses = [
            f"keys {_listed(keys)} {'both' if len(keys) == 2 else 'all'} map to column {column}"
            for column, keys in items[: self._LISTED]
        ]
        if len(items) > self._LISTED:
            clauses.append(f"and so do the keys of {len(items) - self._LISTED} more columns")
        if len(items) == 1 and len(items[0][1]) == 2:
            advice = "rename one in the producer"
        else:
            advice = "rename them in the producer so that no two differ only by case"
        super().__init__(f"{'; '.join(clauses)}; {advice}")
        self.column = items[0][0]
        self.collisions = {column: tuple(keys) for column, keys in items}


def _listed(keys: Sequence[str]) -> str:
    shown_keys = [shown(k) for k in keys]
    return f"{', '.join(shown_keys[:-1])} and {shown_keys[-1]}"


class ColumnMap:
    """First-level keys to table columns, case-insensitively; KINESISMETADATA is ours alone.

    :param held_back: while set, a record with a value for a key that has no column (and could
        have one) is refused whole, with :class:`KeysWithoutColumnError`.
    """

    def __init__(self, columns: Sequence[TableColumn], held_back: HeldBack | None = None) -> None:
        self.columns = tuple(c for c in columns if c.name.upper() != METADATA_COLUMN)
        self.held_back = held_back
        self._by_key = {c.name.casefold(): c for c in self.columns}
        self._not_null = tuple(c.name for c in self.columns if not c.nullable)

    def keys_held_back(self, obj: Mapping[str, Any]) -> list[str]:
        """The keys of ``obj`` with a value but no column while :attr:`held_back` is set, in document order.

        Every spelling of a key that differs only by case counts on its own.
        """
        held_back = self.held_back
        if held_back is None:
            return []
        by_key = self._by_key
        return [
            key
            for key, value in obj.items()
            if value is not None and key.casefold() not in by_key and held_back.can_have_column(key)
        ]

    def map_record(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Column name -> Arrow value. Raises :class:`ColumnValueError` naming the column on a bad value.

        Checked first, two keys that differ only by case and so map to one column raise
        :class:`KeysDifferingByCaseError`, whatever their values (null too); then a value for a key
        held back raises :class:`KeysWithoutColumnError`. A NOT NULL column left without a value is
        an error too. Keys that are equal exactly (``{"a": 1, "a": 2}``) are one key to the JSON
        parser, which keeps the last value.
        """
        values: list[tuple[TableColumn, Any]] = []
        spelled: dict[str, str] = {}
        collisions: dict[str, list[str]] = {}
        for key, value in obj.items():
            column = self._by_key.get(key.casefold())
            if column is None:
                continue
            first = spelled.setdefault(column.name, key)
            if first != key:
                collisions.setdefault(column.name, [first]).append(key)
            else:
                values.append((column, value))
        if collisions:
            raise KeysDifferingByCaseError(collisions)
        if self.held_back is not None and (held := self.keys_held_back(obj)):
            raise KeysWithoutColumnError(held, self.held_back.reason)
        row: dict[str, Any] = {}
        for column, value in values:
            try:
                row[column.name] = coerce(value, column)
            except ValueError as err:
                raise ColumnValueError(column.name, str(err)) from None
        for name in self._not_null:
            # COPY would refuse the whole batch for this one row: keep the record aside instead.
            if row.get(name) is None:
                raise ColumnValueError(name, "no value for a NOT NULL column (the key is missing or null)")
        return row

    def arrow_schema(self) -> pa.Schema:
        fields = [pa.field(c.name, arrow_type(c)) for c in self.columns]
        return pa.schema([*fields, pa.field(METADATA_COLUMN, METADATA_TYPE)])

    def to_arrow(self, rows: Iterable[Mapping[str, Any]], metadata: Iterable[Mapping[str, Any]]) -> pa.Table:
        """Build the table to stage: one Arrow column per table column, then KINESISMETADATA."""
        rows = list(rows)
        arrays = [pa.array([row.get(c.name) for row in rows], type=arrow_type(c)) for c in self.columns]
        arrays.append(pa.array(list(metadata), type=METADATA_TYPE))
        return pa.Table.from_arrays(arrays, schema=self.arrow_schema())


FAILURE_SCHEMA = pa.schema(
    [
        ("RECORD_CONTENT_BASE64", pa.string()),
        ("ERROR_MESSAGE", pa.string()),
        ("ERROR_COLUMN", pa.string()),
        (METADATA_COLUMN, METADATA_TYPE),
    ]
)
