"""Apply a DynamoDB table's changes to its Snowflake table: one MERGE per batch, with the ledger.

The destination holds one row per primary key. A batch of :class:`~..sources.dynamodb.model.ItemChange`
rows, staged as Parquet (key columns, ``DYNAMODB_EVENT``, ``DYNAMODB_VERSION``, ``DYNAMODBMETADATA``,
and ``ITEM`` or one column per attribute), is applied in one transaction:

1. **Guard.** The ledger moves first: each stream shard's mark (``DYNAMODB_INGEST_LEDGER``, shard id ->
   :class:`~..model.Checkpoint`) and each snapshot segment's mark (:data:`SNAPSHOT_LEDGER_TABLE`: its
   ``LastEvaluatedKey`` cursor, done flag and item count) must still be the one the batch started
   from, or :class:`~.snowflake_sink.StaleBatchError` rolls everything back. So a replayed or
   duplicate batch applies nothing.
2. **COPY** the staged files into a temporary table (created before the transaction: DDL commits).
3. **MERGE.** The batch is reduced to the newest change per key (by ``DYNAMODB_VERSION``; Snowflake's
   MERGE with duplicate source keys is nondeterministic), and a change is applied only when its
   version is greater than the row's: an INSERT, MODIFY or SNAPSHOT change upserts the item (with
   the ``unpacked`` layout every attribute column is set, NULL where the item lacks the attribute,
   so the row equals the item); a REMOVE deletes the row (``deletes: hard``) or marks it
   (``deletes: soft``: ``DYNAMODB_DELETED``, ``DYNAMODB_DELETED_AT`` the removal's time, its version,
   no attributes); a removal of a key without a row inserts a marked row, except one made before
   the batch's generation started, which marks nothing of that generation (it deletes a row the
   stream, read from shortly before the start, put there): items deleted before the copy began
   leave no marked row.
4. **Tombstones.** A deleted row remembers nothing, and a key without a row has none to mark, yet
   a snapshot item scanned before a removal may arrive after it. So each removal also writes its
   key and version to the table's tombstone table (a table of its own, not rows of the destination,
   with either ``deletes`` setting), and a change whose key has a tombstone at least as new is not
   applied.
5. **Completing a snapshot.** When the batch marks the last segment of snapshot generation ``g``
   done, the same transaction removes (or marks) the rows whose version is of a generation below
   ``g`` -- items deleted while the stream was unreadable, which neither the snapshot nor the
   stream of ``g`` saw -- and purges the tombstones of generations up to ``g``: once the snapshot
   is complete, only stream records newer than everything loaded (the ledger's order) remain.

The changes applied, the tombstones and the ledger commit together: a failure anywhere rolls all
of them back. Whatever order the changes of an item arrive in, and however often they are
replayed, the row ends as the item's newest change made it (:mod:`..sources.dynamodb.model`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from airflow_kinesis_snowflake.core.load.dynamodb_failures import (
    FAILURES_SUFFIX,
    ItemFailure,
    failure_values,
    failures_table_ddl,
    insert_failure_sql,
)
from airflow_kinesis_snowflake.core.load.dynamodb_ledger_migration import copy_kinesis_named_rows
from airflow_kinesis_snowflake.core.load.dynamodb_rows import (
    DELETED_AT_COLUMN,
    DELETED_COLUMN,
    EVENT_COLUMN,
    METADATA_COLUMN,
    VERSION_COLUMN,
    WIDENING_SUFFIX,
    Layout,
    Widening,
)
from airflow_kinesis_snowflake.core.load.dynamodb_shape import shape_error, shape_problems
from airflow_kinesis_snowflake.core.load.ownership import Loader, recorded_at
from airflow_kinesis_snowflake.core.load.schema import TableColumn
from airflow_kinesis_snowflake.core.load.snowflake_sink import (
    DYNAMODB_SUPPORT_NAMES,
    ROWS_DIR,
    OutcomeKey,
    StaleBatchError,
    SupportObjectDDL,
    SupportObjects,
    qualified_name,
    quote_identifier,
)
from airflow_kinesis_snowflake.core.model import BatchResult, Checkpoint, Destination
from airflow_kinesis_snowflake.core.sources.dynamodb.model import EventName, Version
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import Generation
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import SnapshotStart

#: The metadata key holding a change's time, ISO 8601 text: a soft removal's ``DYNAMODB_DELETED_AT``.
CHANGE_TIME_KEY = "approximateCreationDateTime"

SNAPSHOT_LEDGER_TABLE = "DYNAMODB_SNAPSHOT_LEDGER"
GENERATIONS_TABLE = "DYNAMODB_SYNC_GENERATIONS"
TOMBSTONES_SUFFIX = "_DYNAMODB_TOMBSTONES"
BATCH_SUFFIX = "_DYNAMODB_BATCH"

_BOOKKEEPING = (EVENT_COLUMN, VERSION_COLUMN, DELETED_COLUMN, DELETED_AT_COLUMN, METADATA_COLUMN)
_SEMI_STRUCTURED = ("VARIANT", "OBJECT", "ARRAY")
_KEY_TYPE = re.compile(r"^[A-Z][A-Z0-9_]*(\([0-9]{1,3}(, ?[0-9]{1,3})?\))?$")
# The change time a soft removal records, computed in the MERGE's source.
_CHANGE_TIME = "DYNAMODB_CHANGE_TIME"


class GenerationSupersededError(StaleBatchError):
    """The batch's sync generation is no longer the table's newest (a reset or a gap recorded a newer
    one since the batch was planned): nothing was applied; its sync decides again in the new one."""


class Deletes(StrEnum):
    """What a removal does to its row: delete it, or mark it deleted."""

    HARD = "hard"
    SOFT = "soft"


@dataclass(frozen=True)
class KeyColumn:
    """A primary key attribute's column: the attribute's name upper-cased, and its Snowflake type."""

    name: str
    column_type: str

    def __post_init__(self) -> None:
        if not _KEY_TYPE.match(self.column_type):
            raise ValueError(f"key column {self.name!r}: not a Snowflake column type: {self.column_type!r}")


@dataclass(frozen=True)
class DynamoDBTarget:
    """One DynamoDB table's destination and how changes are applied to it.

    :param destination: the Snowflake table (one row per primary key).
    :param source_table: the DynamoDB table's name (the snapshot ledger's key).
    :param keys: the partition key's column, and the sort key's if the table has one.
    :param layout: ``packed`` (an ``ITEM`` VARIANT) or ``unpacked`` (a column per attribute).
    :param deletes: ``hard`` (a removal deletes the row) or ``soft`` (it marks the row).
    """

    destination: Destination
    source_table: str
    keys: tuple[KeyColumn, ...]
    layout: Layout = Layout.PACKED
    deletes: Deletes = Deletes.HARD

    def __post_init__(self) -> None:
        if not 1 <= len(self.keys) <= 2:
            raise ValueError(f"a DynamoDB table has a partition key and at most a sort key, got {self.keys}")

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys)

    @property
    def table(self) -> str:
        return qualified_name(self.destination.database, self.destination.schema, self.destination.table)

    @property
    def tombstones(self) -> str:
        d = self.destination
        return qualified_name(d.database, d.schema, d.table + TOMBSTONES_SUFFIX)

    @property
    def batch_table(self) -> str:
        """The session's temporary table of a batch, named within the current schema (the sink
        uses the destination's schema first)."""
        return quote_identifier(self.destination.table + BATCH_SUFFIX)

    @property
    def failures(self) -> str:
        """The table of changes the unpacked layout set aside (:mod:`.dynamodb_failures`)."""
        d = self.destination
        return qualified_name(d.database, d.schema, d.table + FAILURES_SUFFIX)

    @property
    def snapshot_ledger(self) -> str:
        return qualified_name(self.destination.database, self.destination.schema, SNAPSHOT_LEDGER_TABLE)

    @property
    def generations(self) -> str:
        return qualified_name(self.destination.database, self.destination.schema, GENERATIONS_TABLE)


@dataclass(frozen=True)
class SegmentMark:
    """How far one snapshot segment's Scan got.

    :param cursor: the last page's ``LastEvaluatedKey`` as JSON text; None once the segment is done.
    :param done: the Scan of the segment reached its end.
    :param items: the items read from the segment so far.
    """

    cursor: str | None
    done: bool = False
    items: int = 0

    def __post_init__(self) -> None:
        if self.done != (self.cursor is None):
            raise ValueError("a segment has a cursor until it is done, and none after")


@dataclass(frozen=True)
class SegmentRow:
    """One segment's row of the snapshot ledger."""

    segment: int
    total_segments: int
    mark: SegmentMark
    batch_id: str


@dataclass(frozen=True)
class MergeResult:
    """What one batch did: changes loaded, rows the MERGE changed, and a snapshot completed."""

    changes_loaded: int
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    completed_snapshot: int | None = None
    items_set_aside: int = 0


# -- SQL ------------------------------------------------------------------------------------------


def _q(name: str) -> str:
    return quote_identifier(name)


def _column_type(column: TableColumn) -> str:
    return column.data_type


def attribute_columns(target: DynamoDBTarget, columns: Sequence[TableColumn]) -> list[TableColumn]:
    """The columns of ``columns`` that hold an item's attributes (``ITEM``, or one per attribute)."""
    reserved = {n.upper() for n in (*target.key_names, *_BOOKKEEPING)}
    return [c for c in columns if c.name.upper() not in reserved and not c.name.upper().endswith(WIDENING_SUFFIX)]


def support_objects_ddl(target: DynamoDBTarget) -> tuple[SupportObjectDDL, ...]:
    """The snapshot ledger, the sync generations, the tombstones and the items set aside (idempotent,
    run outside any transaction; the stream ledger, stage and outcomes table come from
    :func:`~.snowflake_sink.support_objects_ddl` with :data:`~.snowflake_sink.DYNAMODB_SUPPORT_NAMES`)."""
    ledger = SupportObjectDDL(
        "snapshot ledger",
        f"CREATE TABLE IF NOT EXISTS {target.snapshot_ledger} ("
        "APPLICATION_NAME VARCHAR NOT NULL, TABLE_NAME VARCHAR NOT NULL, GENERATION NUMBER(10,0) NOT NULL, "
        "SEGMENT NUMBER(10,0) NOT NULL, TOTAL_SEGMENTS NUMBER(10,0) NOT NULL, CURSOR VARCHAR, "
        "DONE BOOLEAN NOT NULL, ITEMS NUMBER(20,0) NOT NULL, BATCH_ID VARCHAR NOT NULL, "
        "UPDATED_AT TIMESTAMP_TZ DEFAULT CURRENT_TIMESTAMP())",
    )
    generations = SupportObjectDDL(
        "sync generations",
        f"CREATE TABLE IF NOT EXISTS {target.generations} ("
        "APPLICATION_NAME VARCHAR NOT NULL, TABLE_NAME VARCHAR NOT NULL, GENERATION NUMBER(10,0) NOT NULL, "
        "STARTED_AT VARCHAR NOT NULL, TOTAL_SEGMENTS NUMBER(10,0) NOT NULL, STREAM_FROM_TRIM_HORIZON BOOLEAN NOT NULL, "
        "REASON VARCHAR NOT NULL, COMPLETED BOOLEAN NOT NULL, RECORDED_AT TIMESTAMP_TZ DEFAULT CURRENT_TIMESTAMP(), "
        "STREAM_ARN VARCHAR, DESTINATION VARCHAR)",
    )
    # A generations table created before it recorded the stream followed, and the destination.
    stream = SupportObjectDDL(
        "sync generations' stream", f"ALTER TABLE {target.generations} ADD COLUMN IF NOT EXISTS STREAM_ARN VARCHAR"
    )
    destination = SupportObjectDDL(
        "sync generations' destination",
        f"ALTER TABLE {target.generations} ADD COLUMN IF NOT EXISTS DESTINATION VARCHAR",
    )
    keys = ", ".join(f"{_q(k.name)} {k.column_type} NOT NULL" for k in target.keys)
    return (
        ledger,
        generations,
        stream,
        destination,
        SupportObjectDDL(
            "tombstones",
            f"CREATE TABLE IF NOT EXISTS {target.tombstones} ({keys}, {VERSION_COLUMN} VARCHAR NOT NULL)",
        ),
        SupportObjectDDL(
            "items set aside",
            failures_table_ddl(target.failures, ", ".join(f"{_q(k.name)} {k.column_type}" for k in target.keys)),
        ),
    )


def batch_table_ddl(target: DynamoDBTarget, staged: Sequence[TableColumn]) -> str:
    """The temporary table a batch is copied into: keys, event, version, metadata, attributes.

    Its columns take every value (no NOT NULL): the destination's constraints apply at the MERGE.
    """
    columns = [
        *(f"{_q(k.name)} {k.column_type}" for k in target.keys),
        f"{EVENT_COLUMN} VARCHAR",
        f"{VERSION_COLUMN} VARCHAR",
        f"{METADATA_COLUMN} OBJECT",
        *(f"{_q(c.name)} {_column_type(c)}" for c in attribute_columns(target, staged)),
    ]
    return f"CREATE OR REPLACE TEMPORARY TABLE {target.batch_table} ({', '.join(columns)})"


def _batch_column_names(target: DynamoDBTarget, staged: Sequence[TableColumn]) -> list[tuple[str, bool]]:
    """The batch table's columns in order, each with whether it is staged as JSON text."""
    attributes = attribute_columns(target, staged)
    return [
        *((k, False) for k in target.key_names),
        (EVENT_COLUMN, False),
        (VERSION_COLUMN, False),
        (METADATA_COLUMN, True),
        *((c.name, c.base_type in _SEMI_STRUCTURED) for c in attributes),
    ]


def copy_batch_sql(target: DynamoDBTarget, location: str, staged: Sequence[TableColumn]) -> str:
    """COPY the staged Parquet files at ``location`` into the batch table.

    ``DYNAMODBMETADATA``, ``ITEM`` and other VARIANT, OBJECT or ARRAY columns are staged as JSON text
    (a Parquet struct would turn DynamoDB numbers into doubles) and parsed here.
    """
    columns = _batch_column_names(target, staged)

    def value(name: str, json_text: bool) -> str:
        path = "$1:" + _q(name)
        return f"PARSE_JSON({path})" if json_text else path

    return (
        f"COPY INTO {target.batch_table} ({', '.join(_q(n) for n, _ in columns)}) "
        f"FROM (SELECT {', '.join(value(n, j) for n, j in columns)} FROM {location}) "
        "FILE_FORMAT = (TYPE = PARQUET) ON_ERROR = ABORT_STATEMENT"
    )


def _newest_per_key(target: DynamoDBTarget, where: str = "") -> str:
    keys = ", ".join(_q(k) for k in target.key_names)
    return (
        f"SELECT * FROM {target.batch_table}{where} "
        f"QUALIFY ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY {VERSION_COLUMN} DESC) = 1"
    )


def _keys_match(target: DynamoDBTarget, left: str, right: str) -> str:
    return " AND ".join(f"{left}.{_q(k)} = {right}.{_q(k)}" for k in target.key_names)


def merge_sql(
    target: DynamoDBTarget,
    destination_columns: Sequence[TableColumn],
    staged: Sequence[TableColumn],
    generation: int | None = None,
    started_at: datetime | None = None,
) -> str:
    """The MERGE applying the batch table to the destination (see the module docstring).

    :param destination_columns: the destination's columns; every attribute column is set on an
        upsert, from the batch where it was staged, NULL where it was not.
    :param staged: the columns the staged rows were built for.
    :param generation: the sync generation the batch reads in, and ``started_at`` when it started
        (``deletes: soft``): a removal made before the generation started marks no row of that
        generation -- it deletes one (a row the stream read from before the start put there) and
        inserts none -- so items deleted before the copy began leave no marked row, whatever the
        batches' order. None: every removal marks (or inserts) a row.
    """
    staged_names = {c.name.upper() for c in attribute_columns(target, staged)}
    attributes = [c.name for c in attribute_columns(target, destination_columns)]
    image = {a: (f"s.{_q(a)}" if a.upper() in staged_names else "NULL") for a in attributes}
    keys = list(target.key_names)
    soft = target.deletes is Deletes.SOFT
    tombstone_filter = (
        f" WHERE NOT EXISTS (SELECT 1 FROM {target.tombstones} AS x "
        f"WHERE {_keys_match(target, 'x', 'n')} AND x.{VERSION_COLUMN} >= n.{VERSION_COLUMN})"
    )
    source = (
        f"(SELECT n.*, n.{METADATA_COLUMN}:{CHANGE_TIME_KEY}::VARCHAR::TIMESTAMP_TZ AS {_CHANGE_TIME} "
        f"FROM ({_newest_per_key(target)}) AS n{tombstone_filter}) AS s"
    )
    newer = f"s.{VERSION_COLUMN} > t.{VERSION_COLUMN}"
    # A removal made before the generation started, and a row of that generation (soft deletes).
    before_start, of_generation = "FALSE", "FALSE"
    if soft and started_at is not None and generation is not None:
        # Stream times are rounded down to the second: a removal in the start's second counts as after it.
        start_second = started_at.astimezone(UTC).replace(microsecond=0)
        before_start = f"s.{_CHANGE_TIME} < '{start_second.isoformat()}'::TIMESTAMP_TZ"
        of_generation = f"t.{VERSION_COLUMN} >= '{Version.of_snapshot(generation).to_text()}'"
    removal = f"s.{EVENT_COLUMN} = '{EventName.REMOVE.value}'"
    not_removal = f"s.{EVENT_COLUMN} <> '{EventName.REMOVE.value}'"
    common = {VERSION_COLUMN: f"s.{VERSION_COLUMN}", METADATA_COLUMN: f"s.{METADATA_COLUMN}"}
    upsert = {**image, **common}
    if soft:
        upsert |= {DELETED_COLUMN: "FALSE", DELETED_AT_COLUMN: "NULL"}
        marked = {**dict.fromkeys(attributes, "NULL"), **common}
        marked |= {DELETED_COLUMN: "TRUE", DELETED_AT_COLUMN: f"s.{_CHANGE_TIME}"}

    def update(values: Mapping[str, str]) -> str:
        return "UPDATE SET " + ", ".join(f"t.{_q(c)} = {v}" for c, v in values.items())

    def insert(values: Mapping[str, str]) -> str:
        names = [*keys, *values]
        exprs = [*(f"s.{_q(k)}" for k in keys), *values.values()]
        return f"INSERT ({', '.join(_q(n) for n in names)}) VALUES ({', '.join(exprs)})"

    whens = (
        [
            f"WHEN MATCHED AND {newer} AND {removal} AND {before_start} AND {of_generation} THEN DELETE",
            f"WHEN MATCHED AND {newer} AND {removal} THEN {update(marked)}",
            f"WHEN MATCHED AND {newer} THEN {update(upsert)}",
            f"WHEN NOT MATCHED AND {removal} AND NOT ({before_start}) THEN {insert(marked)}",
            f"WHEN NOT MATCHED AND {not_removal} THEN {insert(upsert)}",
        ]
        if soft
        else [
            f"WHEN MATCHED AND {newer} AND {removal} THEN DELETE",
            f"WHEN MATCHED AND {newer} THEN {update(upsert)}",
            f"WHEN NOT MATCHED AND {not_removal} THEN {insert(upsert)}",
        ]
    )
    return f"MERGE INTO {target.table} AS t USING {source} ON {_keys_match(target, 't', 's')} " + " ".join(whens)


def tombstones_merge_sql(target: DynamoDBTarget) -> str:
    """Record the batch's newest removal per key in the tombstone table (``deletes: hard``)."""
    keys = list(target.key_names)
    names = ", ".join(_q(k) for k in [*keys, VERSION_COLUMN])
    values = ", ".join(f"s.{_q(k)}" for k in [*keys, VERSION_COLUMN])
    removals = _newest_per_key(target, f" WHERE {EVENT_COLUMN} = '{EventName.REMOVE.value}'")
    return (
        f"MERGE INTO {target.tombstones} AS t USING ({removals}) AS s ON {_keys_match(target, 't', 's')} "
        f"WHEN MATCHED AND s.{VERSION_COLUMN} > t.{VERSION_COLUMN} "
        f"THEN UPDATE SET t.{VERSION_COLUMN} = s.{VERSION_COLUMN} "
        f"WHEN NOT MATCHED THEN INSERT ({names}) VALUES ({values})"
    )


def unseen_rows_sql(target: DynamoDBTarget, generation: int, destination_columns: Sequence[TableColumn]) -> str:
    """Delete (or mark, with soft deletes) the rows no change of snapshot ``generation`` or later
    touched; a soft deletion's time is the statement's one parameter."""
    older = f"{VERSION_COLUMN} < '{Version.of_snapshot(generation).to_text()}'"
    if target.deletes is Deletes.HARD:
        return f"DELETE FROM {target.table} WHERE {older}"
    cleared = "".join(f", {_q(c.name)} = NULL" for c in attribute_columns(target, destination_columns))
    return (
        f"UPDATE {target.table} SET {DELETED_COLUMN} = TRUE, {DELETED_AT_COLUMN} = %s{cleared} "
        f"WHERE {older} AND ({DELETED_COLUMN} IS NULL OR {DELETED_COLUMN} = FALSE)"
    )


def widening_sql(target: DynamoDBTarget, widening: Widening, *, added: bool) -> list[str]:
    """The statements that widen an attribute column, each idempotent, in order.

    Snowflake cannot change a ``NUMBER`` or ``BOOLEAN`` column into ``VARCHAR`` or ``VARIANT``, so
    the values are copied into ``<column><WIDENING_SUFFIX>`` of the new type (numbers as their
    exact text, or as VARIANT numbers), the column dropped and the copy renamed. ``added``: the copy
    column exists already (a widening that stopped half-way is taken up from its copy).
    """
    column = _q(widening.column)
    copy = _q(widening.column + WIDENING_SUFFIX)
    cast = "TO_VARIANT" if widening.sql_type == "VARIANT" else "TO_VARCHAR"
    statements = [] if added else [f"ALTER TABLE {target.table} ADD COLUMN {copy} {widening.sql_type}"]
    return [
        *statements,
        f"UPDATE {target.table} SET {copy} = {cast}({column})",
        f"ALTER TABLE {target.table} DROP COLUMN {column}",
        f"ALTER TABLE {target.table} RENAME COLUMN {copy} TO {column}",
    ]


def purge_tombstones_sql(target: DynamoDBTarget, generation: int) -> str:
    """Delete the tombstones of snapshot generations up to ``generation``."""
    return f"DELETE FROM {target.tombstones} WHERE {VERSION_COLUMN} < '{Version.of_snapshot(generation + 1).to_text()}'"


def recorded_generations(connection: Any, database: str, schema: str, application_name: str) -> dict[str, int]:
    """The newest generation the generations table of ``DATABASE.SCHEMA`` records per DynamoDB table of
    ``application_name``: what clean-up compares a DynamoDB source's lease items with.

    :raises snowflake.connector.errors.Error: when it cannot be read (the table does not exist yet,
        no privilege): the caller keeps what it would decide on.
    """
    cursor = connection.cursor()
    try:
        cursor.execute(
            f"SELECT TABLE_NAME, MAX(GENERATION) FROM {qualified_name(database, schema, GENERATIONS_TABLE)} "
            "WHERE APPLICATION_NAME = %s GROUP BY TABLE_NAME",
            (application_name,),
        )
        return {str(table): int(generation) for table, generation in cursor.fetchall()}
    finally:
        cursor.close()


# -- the sink -------------------------------------------------------------------------------------


class DynamoDBSink(SupportObjects):
    """The merge sink: everything a DynamoDB table's sync does in Snowflake, over a
    snowflake-connector-python connection.

    The stage, the ledger of the stream shards' marks and the batch outcomes table are the
    :class:`~.snowflake_sink.SupportObjects` of a DynamoDB connector
    (:data:`~.snowflake_sink.DYNAMODB_SUPPORT_NAMES`); this class adds the snapshot ledger, the sync
    generations, the tombstones and the converging MERGE.
    """

    load_method = "merge"

    def __init__(self, connection: Any, target: DynamoDBTarget) -> None:
        super().__init__(connection, target.destination, DYNAMODB_SUPPORT_NAMES)
        self.target = target

    def add_columns(self, columns: Sequence[tuple[str, str]]) -> list[TableColumn]:
        """Add ``(name, SQL type)`` columns to the destination; its columns after."""
        return self.evolve(columns, ())

    def ensure_support_objects(self) -> None:
        """The stream ledger, stage and outcomes table, the snapshot ledger, the sync generations and the
        tombstones (idempotent DDL, run outside any transaction)."""
        super().ensure_support_objects()
        for ddl in support_objects_ddl(self.target):
            self._execute(ddl.sql)

    def ensure_support_objects_of(self, application_name: str) -> None:
        """The support objects (:meth:`ensure_support_objects`), then the application's rows of this table
        that an earlier release kept in the Kinesis-named ledger and outcomes tables, copied into the new
        ones (:mod:`.dynamodb_ledger_migration`): run it before reading a mark."""
        self.ensure_support_objects()
        copy_kinesis_named_rows(self.connection, self.target.destination, application_name, self.target.source_table)

    def destination_exists(self) -> bool:
        """Whether the destination table exists (the information schema, no warehouse needed)."""
        d = self.target.destination
        rows = self._execute(
            f"SELECT COUNT(*) FROM {quote_identifier(d.database)}.information_schema.tables "
            "WHERE table_schema = %s AND table_name = %s",
            (d.schema, d.table),
        )
        return bool(rows and int(rows[0][0]))

    def existing_columns(self) -> list[TableColumn]:
        """The destination's columns; empty when it does not exist."""
        return self.describe_columns() if self.destination_exists() else []

    def check_destination(self, columns: Sequence[TableColumn], connector: str | None = None) -> None:
        """Refuse an existing destination whose columns do not fit ``columns`` (the table this connector
        would create: its keys, layout and deletes); a missing one passes (it is created as configured).

        :raises DestinationShapeError: the table was created for another layout, deletes setting or
            kind of connector (:func:`~.dynamodb_shape.shape_problems`); nothing is changed.
        """
        if not self.destination_exists():
            return
        problems = shape_problems(
            columns,
            self.describe_columns(),
            layout=self.target.layout,
            soft_deletes=self.target.deletes is Deletes.SOFT,
        )
        if problems:
            raise shape_error(self.target.destination.qualified_name, connector, problems)

    def ensure_destination(self, columns: Sequence[TableColumn], connector: str | None = None) -> None:
        """Create the destination table with ``columns`` (:func:`~.dynamodb_rows.table_columns`) unless it
        exists; an existing one must fit them (:meth:`check_destination`)."""
        self.check_destination(columns, connector)
        definitions = ", ".join(f"{_q(c.name)} {c.data_type}{'' if c.nullable else ' NOT NULL'}" for c in columns)
        self._execute(f"CREATE TABLE IF NOT EXISTS {self.target.table} ({definitions})")

    def widen_columns(self, widenings: Sequence[Widening]) -> list[TableColumn]:
        """Widen attribute columns (:func:`widening_sql`), first finishing any widening a crash cut
        short; the table's columns afterwards. Run outside any transaction, before staging.

        *Crash* after the copy column was added: the next call finds it and copies, drops and
        renames again (the old column still holds every value); after the drop: it renames the copy.
        """
        columns = self.describe_columns()
        names = {c.name.upper(): c.name for c in columns}
        pending = {
            c.name[: -len(WIDENING_SUFFIX)]: c
            for c in columns
            if c.name.upper().endswith(WIDENING_SUFFIX) and len(c.name) > len(WIDENING_SUFFIX)
        }
        for base, copy in pending.items():
            if base.upper() in names:
                for sql in widening_sql(self.target, Widening(base, copy.base_type), added=True):
                    self._execute(sql)
            else:
                self._execute(f"ALTER TABLE {self.target.table} RENAME COLUMN {_q(copy.name)} TO {_q(base)}")
        for widening in widenings:
            if widening.column in pending:
                continue
            for sql in widening_sql(self.target, widening, added=False):
                self._execute(sql)
        return self.describe_columns() if widenings or pending else columns

    # -- reads ----------------------------------------------------------------------------------

    def read_segments(self, application_name: str, generation: int) -> list[SegmentRow]:
        """The snapshot ledger's segments of ``generation`` of this table, by segment number; a
        segment no batch has read yet has no row."""
        rows = self._execute(
            f"SELECT SEGMENT, TOTAL_SEGMENTS, CURSOR, DONE, ITEMS, BATCH_ID FROM {self.target.snapshot_ledger} "
            "WHERE APPLICATION_NAME = %s AND TABLE_NAME = %s AND GENERATION = %s ORDER BY SEGMENT",
            (application_name, self.target.source_table, generation),
        )
        return [SegmentRow(int(r[0]), int(r[1]), SegmentMark(r[2], bool(r[3]), int(r[4])), str(r[5])) for r in rows]

    def current_generation(self, application_name: str) -> Generation | None:
        """The table's newest sync generation, as recorded when it started; None before the first.

        Two workers that started the same generation at once recorded it twice: the earlier start
        counts (its stream is read from the earlier time, which misses nothing).
        """
        rows = self._execute(
            f"SELECT GENERATION, MIN(STARTED_AT), MAX(TOTAL_SEGMENTS), "
            "MAX(CASE WHEN STREAM_FROM_TRIM_HORIZON THEN 1 ELSE 0 END), MAX(CASE WHEN COMPLETED THEN 1 ELSE 0 END), "
            f"MAX(STREAM_ARN) FROM {self.target.generations} WHERE APPLICATION_NAME = %s AND TABLE_NAME = %s "
            "GROUP BY GENERATION ORDER BY GENERATION DESC LIMIT 1",
            (application_name, self.target.source_table),
        )
        if not rows:
            return None
        number, started, total, trim_horizon, completed, stream_arn = rows[0]
        started_at = datetime.fromisoformat(str(started))
        snapshot = SnapshotStart(int(number), started_at, int(total)) if int(total) else None
        return Generation(int(number), started_at, snapshot, bool(trim_horizon), bool(completed), stream_arn)

    def recorded_destinations(self, application_name: str) -> list[str]:
        """The destinations the generations of this table under ``application_name`` were recorded for
        (``DATABASE.SCHEMA.TABLE``; generations recorded before the column existed name none)."""
        rows = self._execute(
            f"SELECT DISTINCT DESTINATION FROM {self.target.generations} WHERE APPLICATION_NAME = %s "
            "AND TABLE_NAME = %s AND DESTINATION IS NOT NULL ORDER BY DESTINATION",
            (application_name, self.target.source_table),
        )
        return [str(r[0]) for r in rows]

    def items_set_aside(self, generation: int = 0) -> int:
        """The items whose newest change is set aside (:mod:`.dynamodb_failures`): of ``generation`` or later,
        not a removal, and with no newer row or tombstone; 0 before the failures table exists."""
        d = self.target.destination
        exists = self._execute(
            f"SELECT COUNT(*) FROM {quote_identifier(d.database)}.information_schema.tables "
            "WHERE table_schema = %s AND table_name = %s",
            (d.schema, d.table + FAILURES_SUFFIX),
        )
        if not exists or not int(exists[0][0]):
            return 0
        keys = ", ".join(_q(k) for k in self.target.key_names)
        rows = self._execute(
            f"SELECT COUNT(*) FROM (SELECT {keys}, ITEM, {VERSION_COLUMN} AS V FROM {self.target.failures} "
            f"QUALIFY ROW_NUMBER() OVER (PARTITION BY KEY_TEXT ORDER BY {VERSION_COLUMN} DESC) = 1) AS f "
            "WHERE f.ITEM IS NOT NULL AND f.V >= %s "
            f"AND NOT EXISTS (SELECT 1 FROM {self.target.table} AS t WHERE {_keys_match(self.target, 't', 'f')} "
            f"AND t.{VERSION_COLUMN} > f.V) "
            f"AND NOT EXISTS (SELECT 1 FROM {self.target.tombstones} AS x WHERE {_keys_match(self.target, 'x', 'f')} "
            f"AND x.{VERSION_COLUMN} > f.V)",
            (Version.of_snapshot(generation).to_text(),),
        )
        return int(rows[0][0]) if rows else 0

    def destination_loaders(self) -> list[Loader]:
        """The applications whose generations name this destination, each with when it last recorded one."""
        rows = self._execute(
            f"SELECT APPLICATION_NAME, MAX(RECORDED_AT) FROM {self.target.generations} WHERE DESTINATION = %s "
            "GROUP BY APPLICATION_NAME",
            (self.target.destination.qualified_name,),
        )
        return [Loader(frozenset({str(name)}), recorded_at(at)) for name, at in rows if at is not None]

    # -- writes ---------------------------------------------------------------------------------

    def record_generation(self, application_name: str, generation: Generation, reason: str) -> bool:
        """Record a generation's start, the stream it follows and the destination, before anything of it is read; False
        when this or a later generation is already recorded (another worker started it: the caller
        reads it back)."""
        total = generation.snapshot.total_segments if generation.snapshot else 0
        return (
            self._rowcount(
                f"INSERT INTO {self.target.generations} (APPLICATION_NAME, TABLE_NAME, GENERATION, STARTED_AT, "
                "TOTAL_SEGMENTS, STREAM_FROM_TRIM_HORIZON, REASON, COMPLETED, STREAM_ARN, DESTINATION) "
                "SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s, %s WHERE NOT EXISTS ("
                f"SELECT 1 FROM {self.target.generations} WHERE APPLICATION_NAME = %s AND TABLE_NAME = %s "
                "AND GENERATION >= %s)",
                (
                    application_name,
                    self.target.source_table,
                    generation.number,
                    generation.started_at.isoformat(),
                    total,
                    generation.stream_from_trim_horizon,
                    reason,
                    generation.completed,
                    generation.stream_arn,
                    self.target.destination.qualified_name,
                    application_name,
                    self.target.source_table,
                    generation.number,
                ),
            )
            == 1
        )

    def apply_batch(
        self,
        *,
        application_name: str,
        generation_id: str,
        batch_id: str,
        stage_dir: str,
        rows: int,
        columns: Sequence[TableColumn],
        shard_starts: Mapping[str, Checkpoint | None] | None = None,
        shard_ends: Mapping[str, Checkpoint] | None = None,
        snapshot_generation: int | None = None,
        total_segments: int = 0,
        segment_starts: Mapping[int, SegmentMark | None] | None = None,
        segment_ends: Mapping[int, SegmentMark] | None = None,
        deleted_at: datetime | None = None,
        generation: int | None = None,
        outcome: Callable[[MergeResult], tuple[OutcomeKey, BatchResult]] | None = None,
        failures: Sequence[ItemFailure] = (),
        generation_started_at: datetime | None = None,
    ) -> MergeResult:
        """Apply the changes staged at ``@stage/<stage_dir>/rows/`` and move the ledger, all or nothing.

        :param generation_id: the lease-table generation the stream shards' marks are kept under.
        :param rows: the changes staged (one per Parquet row).
        :param columns: the columns the staged rows were built for (keys, bookkeeping, attributes).
        :param shard_starts: per stream shard, the mark the batch started from (None: no mark yet).
        :param shard_ends: per stream shard that delivered records, the last record delivered.
        :param snapshot_generation: the snapshot generation the batch's segments belong to.
        :param total_segments: that snapshot's segment count.
        :param segment_starts: per segment read, the mark the batch started from (None: first read).
        :param segment_ends: per segment read, where the batch left it.
        :param deleted_at: the deletion time of rows a completed re-snapshot did not see (soft
            deletes); now when None.
        :param generation: the sync generation the batch was planned in (``snapshot_generation`` when
            None); refused when a newer one is recorded.
        :param generation_started_at: when the batch's generation started: with soft deletes, a removal
            made before it marks no row of the generation (:func:`merge_sql`).
        :param failures: the changes the unpacked layout set aside (staged as removals of their keys),
            kept whole in the failures table in the same transaction.
        :param outcome: given what the batch applied, its outcome and whose it is; recorded in the
            same transaction (:meth:`SnowflakeSink.record_outcome`), so a committed batch's outcome
            is in Snowflake whatever happens to the process after the commit.
        :raises StaleBatchError: a mark is no longer the one the batch started from; nothing applied.
        :raises GenerationSupersededError: a generation newer than the batch's is recorded; nothing applied.
        :raises LoadError: the COPY did not load the staged rows.
        """
        shard_ends = shard_ends or {}
        shard_starts = shard_starts or {}
        segment_ends = segment_ends or {}
        segment_starts = segment_starts or {}
        if segment_ends and snapshot_generation is None:
            raise ValueError("segment marks need the snapshot generation they belong to")
        destination_columns = self.describe_columns()
        d = self.target.destination
        self._execute(f"USE SCHEMA {_q(d.database)}.{_q(d.schema)}")
        if rows:
            self._execute(batch_table_ddl(self.target, columns))
        self._execute("BEGIN")
        try:
            planned_in = generation if generation is not None else snapshot_generation
            if planned_in is not None:
                self._refuse_superseded(application_name, planned_in)
            for shard_id in sorted(shard_ends):
                self.advance_ledger(
                    application_name,
                    generation_id,
                    batch_id,
                    shard_id,
                    shard_starts.get(shard_id),
                    shard_ends[shard_id],
                )
            for segment in sorted(segment_ends):
                assert snapshot_generation is not None
                self._advance_segment(
                    application_name,
                    snapshot_generation,
                    total_segments,
                    batch_id,
                    segment,
                    segment_starts.get(segment),
                    segment_ends[segment],
                )
            result = MergeResult(changes_loaded=0)
            if rows:
                loaded = self._copy(stage_dir, rows, columns)
                result = self._merge(loaded, destination_columns, columns, planned_in, generation_started_at)
            for failure in failures:
                self._execute(
                    insert_failure_sql(self.target.failures, [_q(k) for k in self.target.key_names]),
                    failure_values(failure, batch_id),
                )
            if failures:
                result = dataclasses.replace(result, items_set_aside=len(failures))
            finishes = any(m.done for m in segment_ends.values())
            if (
                snapshot_generation is not None
                and finishes
                and self._segments_done(application_name, snapshot_generation, total_segments)
            ):
                self._complete(application_name, snapshot_generation, destination_columns, deleted_at)
                result = dataclasses.replace(result, completed_snapshot=snapshot_generation)
            if outcome is not None:
                self.record_outcome(*outcome(result))
            self._execute("COMMIT")
        except BaseException:
            self._execute("ROLLBACK")
            raise
        return result

    def complete_snapshot(
        self, application_name: str, generation: int, total_segments: int, deleted_at: datetime | None = None
    ) -> None:
        """Complete snapshot ``generation`` on its own (idempotent): remove (or mark) the rows it did
        not see and purge the tombstones up to it, in one transaction.

        :meth:`apply_batch` does the same in the transaction that marks the last segment done; this
        is for a caller that must be sure it happened.
        :raises StaleBatchError: not every segment of the generation is done in the ledger.
        :raises GenerationSupersededError: a newer generation is recorded; nothing changed.
        """
        destination_columns = self.describe_columns()
        self._execute("BEGIN")
        try:
            self._refuse_superseded(application_name, generation)
            if not self._segments_done(application_name, generation, total_segments):
                raise StaleBatchError(
                    f"snapshot {generation} of {self.target.source_table} for application {application_name!r} "
                    f"has segments not done in {self.target.snapshot_ledger}: it cannot be completed"
                )
            self._complete(application_name, generation, destination_columns, deleted_at)
            self._execute("COMMIT")
        except BaseException:
            self._execute("ROLLBACK")
            raise

    def purge_tombstones(self, generation: int) -> int:
        """Delete the tombstones of snapshot generations up to ``generation`` (whose snapshot is
        complete); the number deleted."""
        return self._rowcount(purge_tombstones_sql(self.target, generation), ())

    # -- steps ----------------------------------------------------------------------------------

    def _refuse_superseded(self, application_name: str, generation: int) -> None:
        """The guard, first in a batch's transaction: a batch of generation ``g`` committing after
        ``g + 1`` was recorded (a sync in flight during a reset, a zombie Spark job) could bring back
        a deleted item's row once ``g + 1``'s completion purged the tombstones; it is refused.

        *Window:* the check reads the generations table at the transaction's start; a generation
        recorded after that and before the commit is not seen, but its completion (which purges the
        tombstones) needs its whole snapshot read first, by later batches.
        """
        rows = self._execute(
            f"SELECT MAX(GENERATION) FROM {self.target.generations} WHERE APPLICATION_NAME = %s AND TABLE_NAME = %s",
            (application_name, self.target.source_table),
        )
        newest = rows[0][0] if rows else None
        if newest is not None and int(newest) > generation:
            raise GenerationSupersededError(
                f"a batch of generation {generation} of {self.target.source_table} for application "
                f"{application_name!r} was refused: generation {int(newest)} is recorded in "
                f"{self.target.generations} (a reset, or a gap); nothing was applied, the next batch reads in the "
                "new generation"
            )

    def _advance_segment(
        self,
        application_name: str,
        generation: int,
        total_segments: int,
        batch_id: str,
        segment: int,
        start: SegmentMark | None,
        end: SegmentMark,
    ) -> None:
        if not 0 <= segment < total_segments:
            raise ValueError(f"segment {segment} is not one of {total_segments} segments")
        key = (application_name, self.target.source_table, generation, segment)
        where = "WHERE APPLICATION_NAME = %s AND TABLE_NAME = %s AND GENERATION = %s AND SEGMENT = %s"
        if start is None:
            changed = self._rowcount(
                f"INSERT INTO {self.target.snapshot_ledger} (APPLICATION_NAME, TABLE_NAME, GENERATION, SEGMENT, "
                "TOTAL_SEGMENTS, CURSOR, DONE, ITEMS, BATCH_ID) SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s "
                f"WHERE NOT EXISTS (SELECT 1 FROM {self.target.snapshot_ledger} {where})",
                (*key, total_segments, end.cursor, end.done, end.items, batch_id, *key),
            )
        elif start.done:
            changed = 0
        else:
            changed = self._rowcount(
                f"UPDATE {self.target.snapshot_ledger} SET CURSOR = %s, DONE = %s, ITEMS = %s, BATCH_ID = %s, "
                f"UPDATED_AT = CURRENT_TIMESTAMP() {where} AND CURSOR = %s AND DONE = FALSE AND ITEMS = %s",
                (end.cursor, end.done, end.items, batch_id, *key, start.cursor, start.items),
            )
        if changed != 1:
            raise StaleBatchError(
                f"snapshot ledger mark of segment {segment} of {self.target.source_table} (generation {generation}) "
                f"for application {application_name!r} is no longer {start}: another batch read it first; "
                "nothing was applied"
            )

    def _segments_done(self, application_name: str, generation: int, total_segments: int) -> bool:
        rows = self._execute(
            f"SELECT COUNT(*) FROM {self.target.snapshot_ledger} WHERE APPLICATION_NAME = %s AND TABLE_NAME = %s "
            "AND GENERATION = %s AND DONE = TRUE AND TOTAL_SEGMENTS = %s",
            (application_name, self.target.source_table, generation, total_segments),
        )
        return total_segments > 0 and int(rows[0][0]) == total_segments

    def _copy(self, stage_dir: str, expected: int, staged: Sequence[TableColumn]) -> int:
        sql = copy_batch_sql(self.target, f"@{self.stage}/{stage_dir}/{ROWS_DIR}/", staged)
        return self.run_copy(sql, self.target.batch_table, stage_dir, expected)

    def _merge(
        self,
        loaded: int,
        destination_columns: Sequence[TableColumn],
        staged: Sequence[TableColumn],
        generation: int | None = None,
        started_at: datetime | None = None,
    ) -> MergeResult:
        cur = self.connection.cursor()
        try:
            cur.execute(merge_sql(self.target, destination_columns, staged, generation, started_at))
            names = [str(c[0]).lower() for c in cur.description or []]
            counts = dict(zip(names, cur.fetchone() or (), strict=False))
        finally:
            cur.close()
        self._execute(tombstones_merge_sql(self.target))
        return MergeResult(
            changes_loaded=loaded,
            rows_inserted=int(counts.get("number of rows inserted") or 0),
            rows_updated=int(counts.get("number of rows updated") or 0),
            rows_deleted=int(counts.get("number of rows deleted") or 0),
        )

    def _complete(
        self,
        application_name: str,
        generation: int,
        destination_columns: Sequence[TableColumn],
        deleted_at: datetime | None,
    ) -> None:
        self._execute(
            f"UPDATE {self.target.generations} SET COMPLETED = TRUE "
            "WHERE APPLICATION_NAME = %s AND TABLE_NAME = %s AND GENERATION = %s",
            (application_name, self.target.source_table, generation),
        )
        params = () if self.target.deletes is Deletes.HARD else ((deleted_at or datetime.now(UTC)).isoformat(),)
        self._execute(unseen_rows_sql(self.target, generation, destination_columns), params)
        self._execute(purge_tombstones_sql(self.target, generation))
