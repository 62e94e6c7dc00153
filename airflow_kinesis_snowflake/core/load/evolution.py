"""Schema evolution: the columns a batch's records need that the table lacks, and the NOT NULL
columns some of its records leave empty.

Each Spark task summarises its records (:func:`summarize`); the driver merges the summaries
(:meth:`KeySummary.merge`), decides the changes (:func:`plan_changes`), runs them before anything is
staged, and loads with the columns the table then really has. Nothing here talks to Snowflake.

A new first-level key becomes a column whose type is the narrowest one holding every value the
batch has for it (nulls say nothing and are skipped):

=======================================  =================  ==========================================
values                                   column type        note
=======================================  =================  ==========================================
integers of up to 38 digits              ``NUMBER(38,0)``
floats, or integers mixed with floats    ``FLOAT``          integers beyond 38 digits too
``true`` / ``false``                     ``BOOLEAN``
ISO 8601 date-time strings               ``TIMESTAMP_TZ``   only if every string is one (below)
other strings                            ``VARCHAR``
strings mixed with numbers or booleans   ``VARCHAR``        numbers and booleans land as their text
numbers mixed with booleans              ``VARCHAR``        the narrowest type holding both
objects or arrays, alone or mixed        ``VARIANT``        each value as JSON
only nulls                               (none yet)         added once a value arrives
=======================================  =================  ==========================================

The types form a lattice (``NUMBER`` < ``FLOAT`` < ``VARCHAR`` < ``VARIANT``; ``BOOLEAN`` and
``TIMESTAMP_TZ`` < ``VARCHAR``), so merging summaries in any order gives the same type. A date-time
string is ``YYYY-MM-DD``, ``T`` or a space, ``hh:mm``, optional ``:ss`` and fraction, optional
``Z`` or ``±hh:mm``; one without an offset is read as UTC, as for any timestamp column. Dates alone,
times alone and ISO week dates stay ``VARCHAR``.

Column names. Keys map to columns case-insensitively (:class:`~.schema.ColumnMap`), so a key with
a column of any case needs none, and keys differing only by case share one new column, typed by
the values of every spelling. A record holding two of them at once is a dead letter, kept whole
(:class:`~.schema.KeysDifferingByCaseError`), whether their column is new or not; a record whose
keys collide on a column the table has is not examined, as it cannot load. A new column
is named by the key upper-cased, as Snowflake resolves an unquoted identifier: ``orderId`` becomes
``ORDERID``, which queries reach unquoted. Keys that are not plain identifiers (spaces, dots,
quotes, reserved words, non-ASCII) are upper-cased too and always written quoted, never spliced:
``"order id"`` becomes ``"ORDER ID"``; upper-casing every name makes batches that see different
spellings of one key add the same column. A key no column can be named after is skipped, with the
reason in the batch result: an empty key, one over Snowflake's 255 characters, one holding control
characters or a lone surrogate, and ``KINESISMETADATA`` (the record's metadata).

A batch adds at most ``MAX_NEW_COLUMNS`` columns (the first new keys seen); the next batch adds
more. A record of this batch with a value for a key left without a column by the cap is not
loaded without that value: it is a dead letter, kept whole in the parse-failure table with the
keys and the reason (:class:`~.schema.HeldBack`), to be loaded again once the columns exist.

Whether a batch evolves its table (:func:`resolve_policy`): Iceberg and interactive tables never;
otherwise the connector's ``destination.schema_evolution`` when the connector file sets it, and the
table's own ``ENABLE_SCHEMA_EVOLUTION`` (SHOW TABLES) when it does not. A key that has no column
and gets none loses its values (``on_unknown_key: IGNORE``) or fails the batch before anything is
loaded (``FAIL``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any

import orjson

from airflow_kinesis_snowflake.core.load.schema import (
    METADATA_COLUMN,
    ColumnMap,
    HeldBack,
    TableColumn,
    arrow_type,
    coerce,
    shown,
)
from airflow_kinesis_snowflake.core.model import DestinationType
from airflow_kinesis_snowflake.core.sources.records import KinesisRecord, ParseError, parse_payload

MAX_IDENTIFIER_LENGTH = 255
# A stream whose keys are ids would otherwise add a column per record.
MAX_NEW_COLUMNS = 100
# Distinct unknown keys one task reports; more are counted, not named.
MAX_TRACKED_KEYS = 1000
# Destination types this connector never alters.
NEVER_EVOLVED = frozenset({DestinationType.ICEBERG, DestinationType.INTERACTIVE})

# NUMBER(38,0) holds every integer of up to 38 digits; Snowflake reads a longer one as a double.
_NUMBER_38_0 = (-(10**38) + 1, 10**38 - 1)
# orjson reads an integer beyond 64 bits as a float; a float of this magnitude may be one.
_WIDE = 2.0**63
_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,9})?)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?",
    re.ASCII,
)
_TIMESTAMP_COLUMN = TableColumn("_", "TIMESTAMP_TZ")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class UnknownKeys(StrEnum):
    """What happens to a key that has no column and gets none (``destination.on_unknown_key``)."""

    IGNORE = "IGNORE"  # its values are not loaded; the rest of the record is
    FAIL = "FAIL"  # the batch fails before anything is staged, naming the keys


class JsonType(Enum):
    """What a key's values are, as far as a column type goes; the value is the column type."""

    INTEGER = "NUMBER(38,0)"
    FLOAT = "FLOAT"
    BOOLEAN = "BOOLEAN"
    TIMESTAMP = "TIMESTAMP_TZ"
    VARCHAR = "VARCHAR"
    VARIANT = "VARIANT"

    @property
    def sql(self) -> str:
        return str(self.value)


_WIDER: Mapping[JsonType, JsonType | None] = {
    JsonType.INTEGER: JsonType.FLOAT,
    JsonType.FLOAT: JsonType.VARCHAR,
    JsonType.BOOLEAN: JsonType.VARCHAR,
    JsonType.TIMESTAMP: JsonType.VARCHAR,
    JsonType.VARCHAR: JsonType.VARIANT,
    JsonType.VARIANT: None,
}


def _and_wider(kind: JsonType) -> list[JsonType]:
    chain: list[JsonType] = []
    current: JsonType | None = kind
    while current is not None:
        chain.append(current)
        current = _WIDER[current]
    return chain


def widen(a: JsonType | None, b: JsonType | None) -> JsonType | None:
    """The narrowest type holding values of both (None: no value seen)."""
    if a is None or a is b:
        return b
    if b is None:
        return a
    wider_than_a = _and_wider(a)
    return next(t for t in _and_wider(b) if t in wider_than_a)


def is_timestamp(text: str) -> bool:
    """A date-time string (see the module's documentation) that a TIMESTAMP_TZ column takes."""
    if not _TIMESTAMP.fullmatch(text):
        return False
    try:
        coerce(text, _TIMESTAMP_COLUMN)
    except ValueError:  # e.g. month 13
        return False
    return True


def json_type(value: Any) -> JsonType | None:
    """The type of one JSON value; None for null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return JsonType.BOOLEAN
    if isinstance(value, int):
        return JsonType.INTEGER if _NUMBER_38_0[0] <= value <= _NUMBER_38_0[1] else JsonType.FLOAT
    if isinstance(value, float):
        return JsonType.FLOAT
    if isinstance(value, str):
        return JsonType.TIMESTAMP if is_timestamp(value) else JsonType.VARCHAR
    return JsonType.VARIANT


def column_name(key: str) -> str:
    """The new column named after ``key``; :class:`ValueError` says why no column can be.

    The name always matches ``key`` case-insensitively, as :class:`~.schema.ColumnMap` matches.
    """
    if not key:
        raise ValueError("an empty key cannot name a column")
    if len(key) > MAX_IDENTIFIER_LENGTH:
        raise ValueError(f"a key of {len(key)} characters is longer than a column name can be (255)")
    if _CONTROL.search(key):
        raise ValueError("a key with control characters cannot name a column")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a key with a lone surrogate is not Unicode and cannot name a column") from None
    if key.casefold() == METADATA_COLUMN.casefold():
        raise ValueError(f"{METADATA_COLUMN} holds the record's Kinesis metadata, not a payload value")
    upper = key.upper()
    # A few characters change length or case-fold differently once upper-cased ("ß" -> "SS" is
    # fine, the dotless i U+0131 -> "I" is not): then the key as it is, which matches itself.
    if len(upper) <= MAX_IDENTIFIER_LENGTH and upper.casefold() == key.casefold():
        return upper
    return key


def can_have_column(key: str) -> bool:
    """Whether schema evolution can ever name a column after ``key`` (:func:`column_name`)."""
    try:
        column_name(key)
    except ValueError:
        return False
    return True


# -- what one task saw ------------------------------------------------------------------------------


@dataclass
class KeyStats:
    """An unknown key: its first spelling seen and the type of its non-null values so far."""

    key: str
    type: JsonType | None = None


@dataclass
class KeySummary:
    """Unknown first-level keys and empty NOT NULL columns of some records; small, and mergeable.

    :param keys: by case-folded key, in the order first seen.
    :param missing: NOT NULL columns that some record leaves null (key absent or null).
    :param untracked: distinct unknown keys seen beyond ``MAX_TRACKED_KEYS``.
    """

    keys: dict[str, KeyStats] = field(default_factory=dict)
    missing: set[str] = field(default_factory=set)
    untracked: int = 0

    def merge(self, other: KeySummary, *, max_keys: int = MAX_TRACKED_KEYS) -> KeySummary:
        """Add ``other`` (seen after this one) to this summary, and return it."""
        for fold, stats in other.keys.items():
            mine = self.keys.get(fold)
            if mine is not None:
                mine.type = widen(mine.type, stats.type)
            elif len(self.keys) < max_keys:
                self.keys[fold] = KeyStats(stats.key, stats.type)
            else:
                self.untracked += 1
        self.missing |= other.missing
        self.untracked += other.untracked
        return self


def merge(summaries: Iterable[KeySummary]) -> KeySummary:
    """One summary of several, in their order (which decides only which spelling of a key is kept)."""
    total = KeySummary()
    for summary in summaries:
        total.merge(summary)
    return total


def _parsed(record: KinesisRecord) -> dict[str, Any] | None:
    """The payload as build_batch parses it; None for what becomes a dead letter."""
    if record.error is not None:
        return None
    try:
        value = orjson.loads(record.data)
    except orjson.JSONDecodeError:
        try:  # json.loads takes a few payloads orjson refuses (NaN, deep nesting)
            value = parse_payload(record.data)
        except (ParseError, RecursionError):
            return None
    return value if isinstance(value, dict) else None


def _exact(record: KinesisRecord, obj: dict[str, Any], key: str) -> Any:
    """The value of ``key`` as :mod:`json` reads it, where orjson may have widened an integer to a float."""
    value = obj[key]
    if type(value) is float and not -_WIDE < value < _WIDE:
        try:
            return parse_payload(record.data)[key]
        except (ParseError, RecursionError):  # orjson read it; keep what orjson read
            return value
    return value


# A key order's unknown keys (case-folded, with their spellings in document order) and, for each
# NOT NULL column, the key that fills it (None: absent).
_KeyLayout = tuple[tuple[tuple[str, tuple[str, ...]], ...], tuple[tuple[str, str | None], ...]]


def _key_layout(keys: Sequence[str], known: set[str], required: Sequence[str]) -> _KeyLayout | None:
    """How :func:`summarize` reads records with ``keys``; None when two of them map to one known column."""
    spellings: dict[str, list[str]] = {}
    for key in keys:
        spellings.setdefault(key.casefold(), []).append(key)
    if any(len(spelt) > 1 and fold in known for fold, spelt in spellings.items()):
        return None  # KeysDifferingByCaseError: a dead letter
    unknown = tuple((fold, tuple(spelt)) for fold, spelt in spellings.items() if fold not in known)
    present = tuple((name, spellings.get(name.casefold(), [None])[0]) for name in required)
    return unknown, present


def summarize(records: Iterable[KinesisRecord], columns: ColumnMap, *, max_keys: int = MAX_TRACKED_KEYS) -> KeySummary:
    """The unknown keys of ``records`` with their values' type, and the NOT NULL columns they leave empty.

    Keys are read as :meth:`~.schema.ColumnMap.map_record` reads them: case-insensitively. Of an
    unknown key spelt several ways, every spelling's values type its column, its first spelling
    names it. A record with two keys differing only by case that map to a column the table has is
    a dead letter: it is skipped, like a payload that does not parse.
    """
    known = {c.name.casefold() for c in columns.columns}
    required = [c.name for c in columns.columns if not c.nullable]
    summary = KeySummary()
    # Records with the same keys in the same order resolve alike: resolve each order once.
    layouts: dict[tuple[str, ...], _KeyLayout | None] = {}
    for record in records:
        obj = _parsed(record)
        if obj is None:
            continue
        keys = tuple(obj)
        if keys in layouts:
            layout = layouts[keys]
        else:
            layout = layouts[keys] = _key_layout(keys, known, required)
        if layout is None:
            continue
        unknown, present = layout
        for fold, spellings in unknown:
            stats = summary.keys.get(fold)
            if stats is None:
                if len(summary.keys) >= max_keys:
                    summary.untracked += 1
                    continue
                stats = summary.keys[fold] = KeyStats(spellings[0])
            for key in spellings:
                if stats.type is not JsonType.VARIANT:
                    stats.type = widen(stats.type, json_type(_exact(record, obj, key)))
        for name, filled_by in present:
            if filled_by is None or obj[filled_by] is None:
                summary.missing.add(name)
    return summary


# -- what the driver does about it ------------------------------------------------------------------


@dataclass(frozen=True)
class EvolutionPolicy:
    """Whether this batch may alter its table, and what becomes of keys left without a column."""

    evolve: bool
    on_unknown_key: UnknownKeys
    reason: str

    @property
    def examines_keys(self) -> bool:
        """Whether the records' keys must be read before staging: to evolve, or to fail on one."""
        return self.evolve or self.on_unknown_key is UnknownKeys.FAIL


def resolve_policy(
    *,
    destination_type: str,
    configured: bool | None,
    on_unknown_key: UnknownKeys,
    table_evolution: bool | None,
    table_iceberg: bool | None = None,
) -> EvolutionPolicy:
    """Iceberg and interactive tables are never altered, nor a table loaded through a pipe (its
    SELECT picks the keys). Otherwise ``configured`` (the connector's
    ``destination.schema_evolution``, when it says so) decides, and without it the table's own
    ``ENABLE_SCHEMA_EVOLUTION``; a table whose property cannot be read is not altered.
    """
    kind = destination_type.upper()
    if kind == DestinationType.PIPE:
        # The pipe's SELECT names the keys it loads; the others are not the table's business.
        return EvolutionPolicy(False, UnknownKeys.IGNORE, "the pipe's SELECT decides which keys are loaded")
    if kind in NEVER_EVOLVED or table_iceberg:
        what = "an interactive table" if kind == DestinationType.INTERACTIVE else "an Iceberg table"
        return EvolutionPolicy(False, on_unknown_key, f"{what} is never altered")
    if configured is not None:
        state = "on" if configured else "off"
        return EvolutionPolicy(configured, on_unknown_key, f"destination.schema_evolution is {state}")
    if table_evolution is None:
        return EvolutionPolicy(False, on_unknown_key, "the table's ENABLE_SCHEMA_EVOLUTION could not be read")
    state = "TRUE" if table_evolution else "FALSE"
    return EvolutionPolicy(table_evolution, on_unknown_key, f"the table has ENABLE_SCHEMA_EVOLUTION = {state}")


@dataclass(frozen=True)
class NewColumn:
    name: str
    type: JsonType
    key: str  # the key's first spelling seen


@dataclass(frozen=True)
class SkippedKey:
    """An unknown key that gets no column in this batch; ``type`` None: it had only nulls.

    ``held_back``: left out by the cap on new columns; records with a value for it are kept whole.
    """

    key: str
    reason: str
    type: JsonType | None
    held_back: bool = False


@dataclass(frozen=True)
class SchemaChanges:
    """What a batch does to its table before staging, and the keys whose values it will not load.

    :param held_back: set when the cap on new columns left keys without a column (skipped with
        ``held_back`` set, or untracked): the records with a value for one are kept whole as dead
        letters, so these keys lose nothing.
    """

    add: tuple[NewColumn, ...] = ()
    drop_not_null: tuple[str, ...] = ()
    skipped: tuple[SkippedKey, ...] = ()
    untracked: int = 0
    held_back: str | None = None

    @property
    def lost(self) -> tuple[SkippedKey, ...]:
        """Skipped keys that had values (a key with only nulls loses nothing) and whose records load."""
        return tuple(s for s in self.skipped if s.type is not None and not s.held_back)

    @property
    def untracked_lost(self) -> int:
        """Untracked keys whose values would not load (none while records are held back)."""
        return 0 if self.held_back else self.untracked

    def report(self, limit: int = 50) -> dict[str, Any]:
        """For the batch result: plain JSON, keys shown escaped and cut short."""
        report: dict[str, Any] = {
            "columns_added": [{"column": c.name, "type": c.type.sql, "key": shown(c.key)} for c in self.add],
            "not_null_dropped": list(self.drop_not_null),
            "keys_skipped": [{"key": shown(s.key), "reason": s.reason} for s in self.skipped[:limit]],
            "keys_skipped_total": len(self.skipped) + self.untracked,
        }
        if self.held_back:
            report["records_held_back"] = self.held_back
        return report


def held_back(reason: str | None) -> HeldBack | None:
    """What :class:`~.schema.ColumnMap` needs to hold back records for ``reason`` (None: none held back)."""
    return None if reason is None else HeldBack(reason, can_have_column)


def plan_changes(
    summary: KeySummary,
    columns: Sequence[TableColumn],
    *,
    evolve: bool,
    why_not: str = "schema evolution is off",
    max_new_columns: int = MAX_NEW_COLUMNS,
) -> SchemaChanges:
    """Columns to add and NOT NULL constraints to drop, in a stable order; the keys left out and why."""
    known = {c.name.casefold() for c in columns if c.name.upper() != METADATA_COLUMN}
    unknown = [(fold, s) for fold, s in summary.keys.items() if fold not in known]
    if not evolve:
        skipped = tuple(SkippedKey(s.key, why_not, s.type) for _, s in unknown)
        return SchemaChanges(skipped=skipped, untracked=summary.untracked)
    add: list[NewColumn] = []
    left: list[SkippedKey] = []
    capped = (
        f"more than {max_new_columns} new columns in one batch: records with a value for it are kept whole "
        "in the parse-failure table, and the next batch adds its column"
    )
    for _, stats in unknown:
        try:
            name = column_name(stats.key)
        except ValueError as err:
            left.append(SkippedKey(stats.key, str(err), stats.type))
            continue
        if stats.type is None:
            left.append(SkippedKey(stats.key, "only null values so far; its column comes with a value", None))
        elif len(add) >= max_new_columns:
            left.append(SkippedKey(stats.key, capped, stats.type, held_back=True))
        else:
            add.append(NewColumn(name, stats.type, stats.key))
    drop = tuple(c.name for c in columns if not c.nullable and c.name in summary.missing)
    # Keys beyond the ones tracked are over the cap too (MAX_TRACKED_KEYS >= MAX_NEW_COLUMNS).
    held = any(s.held_back for s in left) or summary.untracked > 0
    reason = (
        f"schema evolution adds at most {max_new_columns} columns to a table per batch, and this batch "
        "had more new keys; the next batch adds more"
        if held
        else None
    )
    return SchemaChanges(tuple(add), drop, tuple(left), summary.untracked, reason)


def takes_like(column: TableColumn, kind: JsonType) -> bool:
    """Whether an existing column converts values as a new column of ``kind`` would."""
    wanted = TableColumn(column.name, kind.sql)
    semi = column.base_type in ("VARIANT", "OBJECT", "ARRAY")
    return arrow_type(column) == arrow_type(wanted) and semi == (kind is JsonType.VARIANT)


class UnknownKeyError(RuntimeError):
    """Records hold keys that would not be loaded, and the connector is set to fail on them."""


def check_unknown_keys(changes: SchemaChanges, policy: EvolutionPolicy, table: str, limit: int = 20) -> None:
    """Raise :class:`UnknownKeyError` when ``on_unknown_key`` is FAIL and some values would not load."""
    lost = changes.lost
    if policy.on_unknown_key is not UnknownKeys.FAIL or not (lost or changes.untracked_lost):
        return
    by_reason: dict[str, list[str]] = {}
    for skipped in lost[:limit]:
        by_reason.setdefault(skipped.reason, []).append(shown(skipped.key))
    listed = [f"{', '.join(keys)} ({reason})" for reason, keys in by_reason.items()]
    more = max(0, len(lost) - limit) + changes.untracked_lost
    if more:
        listed.append(f"and {more} more")
    raise UnknownKeyError(
        f"records hold keys with no column in {table}: {'; '.join(listed)}. "
        "Nothing was loaded. Add the columns to the table, or set destination.on_unknown_key to "
        "IGNORE to load the records without these keys."
    )
