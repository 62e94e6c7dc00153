"""Stage Parquet files and load them with the ledger update in one Snowflake transaction.

The ledger holds, per application, lease-table generation and shard, the last record loaded. A
batch's ledger rows are written first in the transaction and only if they still hold the marks
the batch started from; otherwise the transaction is rolled back and nothing is loaded. So a
stale or duplicate writer adds no rows, and Snowflake alone says what was loaded.

Next to it, the generations table records which application name and lease-table generation each
connector (by its configured application name) reads with, and why: its first start, a reset, a
restore, or a generation adopted from the ledger after a lease table was lost. The DynamoDB lease
table is a cache of these two; ingest rebuilds it from them when it is lost.

The batch outcomes table holds what each run of the Spark job did (its
:class:`~airflow_kinesis_snowflake.core.model.BatchResult` as JSON), keyed by batch id and the
submission's attempt id. A batch that commits records its outcome in the transaction that loads
its rows and moves the ledger, so an outcome saying "committed" exists exactly when the commit
happened; one that commits nothing records it on its own. The Airflow worker reads it back after
spark-submit returns (:meth:`SnowflakeSink.read_outcome`): the driver may run on a cluster node
that shares no disk with the worker.

Each source has support objects of its own (:class:`SupportNames`): a Kinesis connector's are
``KINESIS_INGEST_*``, a DynamoDB connector's ``DYNAMODB_INGEST_*``; :class:`SnowflakeSink` serves
both, given the names.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow_kinesis_snowflake.core.load.ownership import Loader, recorded_at
from airflow_kinesis_snowflake.core.load.pipe import pipe_load_sql
from airflow_kinesis_snowflake.core.load.schema import METADATA_COLUMN, TableColumn
from airflow_kinesis_snowflake.core.model import (
    BatchResult,
    Checkpoint,
    Destination,
    GenerationReason,
    GenerationRecord,
    StartPosition,
)
from airflow_kinesis_snowflake.core.retry import Backoff, call_with_retries

LEDGER_TABLE = "KINESIS_INGEST_LEDGER"
GENERATIONS_TABLE = "KINESIS_INGEST_GENERATIONS"
OUTCOMES_TABLE = "KINESIS_INGEST_BATCH_OUTCOMES"
STAGE_NAME = "KINESIS_INGEST_STAGE"
DYNAMODB_LEDGER_TABLE = "DYNAMODB_INGEST_LEDGER"
DYNAMODB_OUTCOMES_TABLE = "DYNAMODB_INGEST_BATCH_OUTCOMES"
DYNAMODB_STAGE_NAME = "DYNAMODB_INGEST_STAGE"
# An outcome is read once, right after its submission; older rows of the application are deleted as
# new ones are recorded, so that the table holds about this many days of batches.
OUTCOME_RETENTION_DAYS = 30
PARSE_FAILURES_SUFFIX = "_PARSE_FAILURES"
ROWS_DIR = "rows"
FAILURES_DIR = "failures"

# A schema change that failed and is not on the table is tried again after about 1 s, then 2 s,
# doubling (jittered) up to this cap.
EVOLUTION_FIRST_WAIT_SECONDS = 1.0
EVOLUTION_MAX_WAIT_SECONDS = 30.0

_STAGE_PATH = re.compile(r"^[A-Za-z0-9_.\-/]+$")
# Column types schema evolution writes: a name and optional (precision[, scale]), nothing else.
_COLUMN_TYPE = re.compile(r"^[A-Z][A-Z0-9_]*(\([0-9]{1,3}(,[0-9]{1,3})?\))?$")


class StaleBatchError(RuntimeError):
    """The ledger no longer holds the marks this batch started from: another writer got there."""


class LoadError(RuntimeError):
    """COPY INTO did not load what was staged."""


def quote_identifier(name: str) -> str:
    """Quote a Snowflake identifier; embedded double quotes are doubled."""
    if not name or "\x00" in name:
        raise ValueError(f"invalid identifier {name!r}")
    return '"' + name.replace('"', '""') + '"'


def destination_from_text(text: str) -> Destination:
    """``DATABASE.SCHEMA.TABLE`` (as a lease table's metadata item records it) as a :class:`Destination`.

    :raises ValueError: when it is not three non-empty dot-separated names.
    """
    parts = text.strip().split(".")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"destination {text!r} is not DATABASE.SCHEMA.TABLE")
    return Destination(*(part.upper() for part in parts))


def qualified_name(database: str, schema: str, name: str) -> str:
    """``"DATABASE"."SCHEMA"."NAME"``, each part quoted."""
    return ".".join(quote_identifier(part) for part in (database, schema, name))


def _string_literal(value: str) -> str:
    if "\x00" in value:
        raise ValueError("string literals cannot contain NUL characters")
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def add_column_sql(table: str, column: str, column_type: str) -> str:
    """``ALTER TABLE ... ADD COLUMN IF NOT EXISTS "<column>" <type>``; ``table`` is already quoted."""
    if not _COLUMN_TYPE.match(column_type):
        raise ValueError(f"not a column type schema evolution writes: {column_type!r}")
    return f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {quote_identifier(column)} {column_type}"


def drop_not_null_sql(table: str, column: str) -> str:
    """``ALTER TABLE ... ALTER COLUMN "<column>" DROP NOT NULL``; ``table`` is already quoted."""
    return f"ALTER TABLE {table} ALTER COLUMN {quote_identifier(column)} DROP NOT NULL"


def _holds_json_text(column: TableColumn) -> bool:
    # Staged as JSON text (schema.arrow_type); KINESISMETADATA is staged as a Parquet struct.
    return column.base_type in ("VARIANT", "OBJECT", "ARRAY") and column.name.upper() != METADATA_COLUMN


def semi_structured_copy_sql(table: str, location: str, staged: Sequence[TableColumn]) -> str:
    """COPY with a transformation that parses the JSON text of VARIANT, OBJECT and ARRAY columns.

    MATCH_BY_COLUMN_NAME would load such text as a VARIANT string, not as the value it spells;
    the other columns are taken by name as they are.
    """
    names = [c.name for c in staged if c.name.upper() != METADATA_COLUMN] + [METADATA_COLUMN]
    by_name = {c.name: c for c in staged}

    def value(name: str) -> str:
        path = "$1:" + quote_identifier(name)
        column = by_name.get(name)
        return f"PARSE_JSON({path})" if column is not None and _holds_json_text(column) else path

    return (
        f"COPY INTO {table} ({', '.join(quote_identifier(n) for n in names)}) "
        f"FROM (SELECT {', '.join(value(n) for n in names)} FROM {location}) "
        "FILE_FORMAT = (TYPE = PARQUET) ON_ERROR = ABORT_STATEMENT"
    )


@dataclass(frozen=True)
class TableProperties:
    """What ``SHOW TABLES`` says of the destination; None where it does not say."""

    schema_evolution: bool | None = None
    iceberg: bool | None = None


def table_properties_from_show(names: Sequence[str], rows: Sequence[Sequence[Any]], table: str) -> TableProperties:
    """Read ``enable_schema_evolution`` and ``is_iceberg`` of ``table`` from SHOW TABLES output.

    :param names: the result's column names (``cursor.description``), in any case.
    """
    index = {str(n).lower(): i for i, n in enumerate(names)}
    name_at = index.get("name")
    # LIKE matches '_' as any character and ignores case: keep the table itself only.
    row = next((r for r in rows if name_at is not None and r[name_at] == table), None)

    def flag(column: str) -> bool | None:
        at = index.get(column)
        if row is None or at is None or row[at] is None:
            return None
        value = str(row[at]).strip().upper()
        if value in ("Y", "YES", "TRUE", "ON"):
            return True
        if value in ("N", "NO", "FALSE", "OFF"):
            return False
        return None

    return TableProperties(schema_evolution=flag("enable_schema_evolution"), iceberg=flag("is_iceberg"))


class EvolutionError(RuntimeError):
    """A schema change could not be made, and the table does not have it either."""


class _NotApplied(Exception):
    """One try of a schema change failed, and the table does not have the change."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause) or type(cause).__name__)
        self.cause = cause


def _has_column(columns: Sequence[TableColumn], name: str) -> bool:
    # As ColumnMap matches keys: a column of any case serves.
    return any(c.name.casefold() == name.casefold() for c in columns)


def _is_nullable(columns: Sequence[TableColumn], name: str) -> bool:
    return all(c.nullable for c in columns if c.name == name)


@dataclass(frozen=True)
class SupportNames:
    """The names of the objects a source's sink keeps in each destination's schema, beside its tables.

    A schema may hold the destinations of several sources: each source's ledger, outcomes and stage
    have names of their own, so that none reads or moves another's marks.

    :param ledger: the ledger table (per application, generation and shard, the last record loaded).
    :param outcomes: the batch outcomes table.
    :param stage: the internal stage batches are staged in.
    :param generations: the generations table of lease-table generations; None for a source that
        records its generations elsewhere (DynamoDB: :mod:`.dynamodb_sink`'s own table).
    """

    ledger: str
    outcomes: str
    stage: str
    generations: str | None = None


#: A Kinesis connector's support objects.
KINESIS_SUPPORT_NAMES = SupportNames(
    ledger=LEDGER_TABLE, outcomes=OUTCOMES_TABLE, stage=STAGE_NAME, generations=GENERATIONS_TABLE
)
#: A DynamoDB connector's support objects (earlier releases kept its stream marks and outcomes in the
#: Kinesis ones: :mod:`.dynamodb_ledger_migration` copies them over).
DYNAMODB_SUPPORT_NAMES = SupportNames(
    ledger=DYNAMODB_LEDGER_TABLE, outcomes=DYNAMODB_OUTCOMES_TABLE, stage=DYNAMODB_STAGE_NAME
)


@dataclass(frozen=True)
class SinkObjects:
    """Quoted, fully qualified names of everything the ingestion touches for one destination.

    ``generations`` is None when the source records its generations elsewhere.
    """

    table: str
    failures_table: str
    ledger: str
    stage: str
    generations: str | None
    outcomes: str

    @classmethod
    def for_destination(cls, destination: Destination, names: SupportNames = KINESIS_SUPPORT_NAMES) -> SinkObjects:
        db, schema = destination.database, destination.schema
        return cls(
            table=qualified_name(db, schema, destination.table),
            failures_table=qualified_name(db, schema, destination.table + PARSE_FAILURES_SUFFIX),
            ledger=qualified_name(db, schema, names.ledger),
            stage=qualified_name(db, schema, names.stage),
            generations=qualified_name(db, schema, names.generations) if names.generations else None,
            outcomes=qualified_name(db, schema, names.outcomes),
        )


@dataclass(frozen=True)
class SupportObjectDDL:
    """One idempotent statement creating an object the ingestion needs next to its table."""

    kind: str  # "ledger", "parse failures", "stage", "generations", "generations columns" or "batch outcomes"
    sql: str


def _generations_table(destination: Destination) -> str:
    return qualified_name(destination.database, destination.schema, GENERATIONS_TABLE)


def generations_ddl(destination: Destination) -> SupportObjectDDL:
    """The generations table: which application and generation a connector reads with, and why."""
    return SupportObjectDDL(
        "generations",
        f"CREATE TABLE IF NOT EXISTS {_generations_table(destination)} ("
        "CONFIGURED_APPLICATION_NAME VARCHAR NOT NULL, APPLICATION_NAME VARCHAR NOT NULL, "
        "GENERATION_ID VARCHAR NOT NULL, REASON VARCHAR NOT NULL, START_POSITION VARCHAR, "
        "START_TIMESTAMP VARCHAR, CONNECTOR_ID VARCHAR, STREAM_ARN VARCHAR, STREAM_CREATED_AT VARCHAR, "
        "RECORDED_AT TIMESTAMP_TZ DEFAULT CURRENT_TIMESTAMP(), REPLACED_GENERATION_ID VARCHAR, DESTINATION VARCHAR)",
    )


# Columns added to the generations table after its first release: added to existing tables too.
GENERATIONS_ADDED_COLUMNS = (("REPLACED_GENERATION_ID", "VARCHAR"), ("DESTINATION", "VARCHAR"))


def generations_columns_ddl(destination: Destination) -> tuple[SupportObjectDDL, ...]:
    """Columns a generations table created by an earlier release lacks (idempotent DDL)."""
    name = _generations_table(destination)
    return tuple(
        SupportObjectDDL("generations columns", f"ALTER TABLE {name} ADD COLUMN IF NOT EXISTS {column} {kind}")
        for column, kind in GENERATIONS_ADDED_COLUMNS
    )


def outcomes_ddl(destination: Destination, names: SupportNames = KINESIS_SUPPORT_NAMES) -> SupportObjectDDL:
    """The batch outcomes table: what each run of the Spark job did, by batch id and attempt."""
    return SupportObjectDDL(
        "batch outcomes",
        f"CREATE TABLE IF NOT EXISTS {SinkObjects.for_destination(destination, names).outcomes} ("
        "APPLICATION_NAME VARCHAR NOT NULL, GENERATION_ID VARCHAR NOT NULL, BATCH_ID VARCHAR NOT NULL, "
        "ATTEMPT_ID VARCHAR NOT NULL, STAGE_DIR VARCHAR NOT NULL, COMMITTED BOOLEAN NOT NULL, "
        "RESULT VARCHAR NOT NULL, RECORDED_AT TIMESTAMP_TZ DEFAULT CURRENT_TIMESTAMP())",
    )


def support_objects_ddl(
    destination: Destination, names: SupportNames = KINESIS_SUPPORT_NAMES
) -> tuple[SupportObjectDDL, ...]:
    """Ledger, parse-failure table, stage, generations table and batch outcomes table, in creation order.

    Both the ingestion (before each load) and the provisioning plan run exactly these statements,
    so the objects look the same whoever created them.

    :param names: the source's support objects; without a generations table, none is created.
    """
    objects = SinkObjects.for_destination(destination, names)
    generations = (generations_ddl(destination), *generations_columns_ddl(destination)) if names.generations else ()
    return (
        SupportObjectDDL(
            "ledger",
            f"CREATE TABLE IF NOT EXISTS {objects.ledger} ("
            "APPLICATION_NAME VARCHAR NOT NULL, GENERATION_ID VARCHAR NOT NULL, "
            "SHARD_ID VARCHAR NOT NULL, SEQUENCE_NUMBER VARCHAR NOT NULL, "
            "SUB_SEQUENCE_NUMBER NUMBER(20,0) NOT NULL, BATCH_ID VARCHAR NOT NULL, "
            "UPDATED_AT TIMESTAMP_TZ DEFAULT CURRENT_TIMESTAMP())",
        ),
        SupportObjectDDL(
            "parse failures",
            f"CREATE TABLE IF NOT EXISTS {objects.failures_table} ("
            "RECORD_CONTENT_BASE64 VARCHAR, ERROR_MESSAGE VARCHAR, ERROR_COLUMN VARCHAR, KINESISMETADATA OBJECT)",
        ),
        SupportObjectDDL("stage", f"CREATE STAGE IF NOT EXISTS {objects.stage}"),
        *generations,
        outcomes_ddl(destination, names),
    )


@dataclass(frozen=True)
class CommitResult:
    rows_loaded: int
    failures_loaded: int


@dataclass(frozen=True)
class OutcomeKey:
    """Whose outcome a row is: the batch, and the submission (attempt) that ran it.

    Each spark-submit of a batch has an attempt id of its own, so a retried batch (same batch id)
    records a new row and its reader finds its own.
    """

    application_name: str
    generation_id: str
    batch_id: str
    attempt_id: str


def execute(connection: Any, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
    """Run one statement on ``connection``; the rows it returned (none for a statement without a result)."""
    cur = connection.cursor()
    try:
        cur.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []
    finally:
        cur.close()


def rowcount(connection: Any, sql: str, params: Sequence[Any]) -> int:
    """Run one DML statement on ``connection``; the rows it changed."""
    cur = connection.cursor()
    try:
        cur.execute(sql, params)
        return int(cur.rowcount or 0)
    finally:
        cur.close()


class SupportObjects:
    """The one owner of a destination's support objects in Snowflake, for every sink: its ledger of
    shard marks, its batch outcomes, its stage and parse-failure table, and the destination's columns.

    Each sink (:class:`SnowflakeSink` appends, :class:`~.dynamodb_sink.DynamoDBSink` merges) is one of
    these plus its load method; what every source's engine reads and writes here is written once.

    :param names: the support objects of the source it loads (a Kinesis connector's by default;
        :data:`DYNAMODB_SUPPORT_NAMES` for a DynamoDB connector's).
    """

    def __init__(self, connection: Any, destination: Destination, names: SupportNames = KINESIS_SUPPORT_NAMES) -> None:
        self.connection = connection
        self.destination = destination
        self.names = names
        objects = SinkObjects.for_destination(destination, names)
        self.table = objects.table
        self.failures_table = objects.failures_table
        self.ledger = objects.ledger
        self.stage = objects.stage
        self.outcomes = objects.outcomes

    def _execute(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        return execute(self.connection, sql, params)

    def _rowcount(self, sql: str, params: Sequence[Any]) -> int:
        return rowcount(self.connection, sql, params)

    # -- the destination's columns --------------------------------------------------------------

    def describe_columns(self) -> list[TableColumn]:
        """The destination's columns in table order; a clear error when the table is missing."""
        d = self.destination
        rows = self._execute(
            f"SELECT column_name, data_type, is_nullable, numeric_scale, numeric_precision, character_maximum_length "
            f"FROM {quote_identifier(d.database)}.information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
            (d.schema, d.table),
        )
        if not rows:
            raise LookupError(
                f"destination table {self.table} does not exist or has no columns; create it "
                "(with a KINESISMETADATA OBJECT column) or run the provisioning DAG"
            )
        return [
            TableColumn(
                name=r[0],
                data_type=str(r[1]),
                nullable=str(r[2]).upper() == "YES",
                numeric_scale=int(r[3] or 0),
                numeric_precision=int(r[4]) if r[4] is not None else None,
                # Snowflake reports 16 MB for an unbounded VARCHAR: only a declared limit matters.
                max_length=int(r[5]) if r[5] is not None and int(r[5]) < 16_777_216 else None,
            )
            for r in rows
        ]

    def evolve(
        self,
        add: Sequence[tuple[str, str]],
        drop_not_null: Sequence[str],
        *,
        attempts: int = 3,
        sleep: Callable[[float], None] = time.sleep,
    ) -> list[TableColumn]:
        """Add columns ``(name, type)`` and drop NOT NULL constraints; the columns as they are then.

        Run outside any transaction. Every statement is idempotent, and one that fails (say, racing
        another batch's identical change) is taken as done when the table has the change anyway;
        otherwise it is tried again, up to ``attempts`` times, after waits of about 1 s, 2 s and so on
        (:mod:`~airflow_kinesis_snowflake.core.retry`).
        """
        for name, column_type in add:
            self._change(add_column_sql(self.table, name, column_type), _has_column, name, attempts, sleep)
        for name in drop_not_null:
            self._change(drop_not_null_sql(self.table, name), _is_nullable, name, attempts, sleep)
        columns = self.describe_columns()
        absent = [name for name, _ in add if not _has_column(columns, name)]
        if absent:
            raise EvolutionError(f"columns {absent} of {self.table} are missing after adding them")
        return columns

    def _change(
        self,
        sql: str,
        done: Callable[[list[TableColumn], str], bool],
        column: str,
        attempts: int,
        sleep: Callable[[float], None],
    ) -> None:
        def change() -> None:
            try:
                self._execute(sql)
            except Exception as err:
                # Whatever failed, the table says whether it matters.
                if not done(self.describe_columns(), column):
                    raise _NotApplied(err) from err

        policy = Backoff(attempts, EVOLUTION_FIRST_WAIT_SECONDS, EVOLUTION_MAX_WAIT_SECONDS)
        try:
            call_with_retries(
                change, policy=policy, retry_on=lambda err: isinstance(err, _NotApplied), what=sql, sleep=sleep
            )
        except _NotApplied as failed:
            raise EvolutionError(f"{sql} failed {attempts} times: {failed.cause}") from failed.cause

    def ensure_support_objects(self) -> None:
        """Ledger, parse-failure table, stage, generations and outcomes tables; idempotent DDL, run
        outside any transaction."""
        for ddl in support_objects_ddl(self.destination, self.names):
            self._execute(ddl.sql)

    # -- ledger ---------------------------------------------------------------------------------

    def read_ledger(self, application_name: str, generation_id: str) -> dict[str, Checkpoint]:
        rows = self._execute(
            f"SELECT SHARD_ID, SEQUENCE_NUMBER, SUB_SEQUENCE_NUMBER FROM {self.ledger} "
            "WHERE APPLICATION_NAME = %s AND GENERATION_ID = %s",
            (application_name, generation_id),
        )
        return {r[0]: Checkpoint(str(r[1]), int(r[2])) for r in rows}

    def last_ledger_update(self, application_name: str) -> datetime | None:
        """When the ledger last moved for ``application_name``, any generation; None if it never did.

        Clean-up reads it to tell a table in use from an orphan: every batch updates its rows in
        the transaction that loads them.
        """
        rows = self._execute(
            f"SELECT UPDATED_AT FROM {self.ledger} WHERE APPLICATION_NAME = %s AND UPDATED_AT IS NOT NULL "
            "ORDER BY UPDATED_AT DESC LIMIT 1",
            (application_name,),
        )
        value = rows[0][0] if rows else None
        if value is None:
            return None
        if not isinstance(value, datetime):
            value = datetime.fromisoformat(str(value))
        return value if value.tzinfo else value.replace(tzinfo=UTC)

    def ledger_generations(self, application_name: str) -> list[str]:
        """The generations the ledger holds marks for under ``application_name``, newest mark first."""
        rows = self._execute(
            f"SELECT GENERATION_ID, MAX(UPDATED_AT) AS LAST_MARK FROM {self.ledger} WHERE APPLICATION_NAME = %s "
            "GROUP BY GENERATION_ID ORDER BY LAST_MARK DESC, GENERATION_ID",
            (application_name,),
        )
        return [str(r[0]) for r in rows]

    def advance_ledger(
        self,
        application_name: str,
        generation_id: str,
        batch_id: str,
        shard_id: str,
        start: Checkpoint | None,
        end: Checkpoint,
    ) -> None:
        """Move one shard's ledger mark from ``start`` to ``end`` inside the caller's transaction.

        :raises StaleBatchError: the mark is no longer ``start``.
        """
        key = (application_name, generation_id, shard_id)
        first_mark = (
            f"INSERT INTO {self.ledger} (APPLICATION_NAME, GENERATION_ID, SHARD_ID, SEQUENCE_NUMBER, "
            "SUB_SEQUENCE_NUMBER, BATCH_ID) SELECT %s, %s, %s, %s, %s, %s WHERE NOT EXISTS ("
            f"SELECT 1 FROM {self.ledger} WHERE APPLICATION_NAME = %s AND GENERATION_ID = %s "
            "AND SHARD_ID = %s)"
        )
        first_mark_params = (*key, end.sequence_number, end.sub_sequence_number, batch_id, *key)
        if start is None:
            changed = self._rowcount(first_mark, first_mark_params)
        else:
            changed = self._rowcount(
                f"UPDATE {self.ledger} SET SEQUENCE_NUMBER = %s, SUB_SEQUENCE_NUMBER = %s, BATCH_ID = %s, "
                "UPDATED_AT = CURRENT_TIMESTAMP() WHERE APPLICATION_NAME = %s AND GENERATION_ID = %s "
                "AND SHARD_ID = %s AND SEQUENCE_NUMBER = %s AND SUB_SEQUENCE_NUMBER = %s",
                (
                    end.sequence_number,
                    end.sub_sequence_number,
                    batch_id,
                    *key,
                    start.sequence_number,
                    start.sub_sequence_number,
                ),
            )
            if changed == 0:
                # A checkpoint the ledger has never seen (migrated from a KCL lease table): nothing
                # was loaded from it yet, so the first batch sets the mark; once any batch has, a
                # writer starting anywhere but at that mark is stale as before.
                changed = self._rowcount(first_mark, first_mark_params)
        if changed != 1:
            raise StaleBatchError(
                f"ledger mark of shard {shard_id} for application {application_name!r} is no longer "
                f"{start.to_dict() if start else 'empty'}: another batch loaded it first; nothing was loaded"
            )

    # -- batch outcomes -------------------------------------------------------------------------

    def record_outcome(self, key: OutcomeKey, result: BatchResult, now: datetime | None = None) -> None:
        """Append the outcome of one run of a batch (inside the caller's transaction, if any), and
        delete the application's outcomes older than :data:`OUTCOME_RETENTION_DAYS`.

        :param now: the time the retention counts back from; the current time when None.
        """
        self._execute(
            f"INSERT INTO {self.outcomes} (APPLICATION_NAME, GENERATION_ID, BATCH_ID, ATTEMPT_ID, STAGE_DIR, "
            "COMMITTED, RESULT) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (
                key.application_name,
                key.generation_id,
                key.batch_id,
                key.attempt_id,
                result.stage_dir,
                result.committed,
                json.dumps(result.to_dict(), sort_keys=True),
            ),
        )
        cutoff = (now or datetime.now(UTC)) - timedelta(days=OUTCOME_RETENTION_DAYS)
        self._execute(
            f"DELETE FROM {self.outcomes} WHERE APPLICATION_NAME = %s AND RECORDED_AT < %s",
            (key.application_name, cutoff.isoformat()),
        )

    def record_outcome_alone(self, key: OutcomeKey, result: BatchResult) -> None:
        """Record the outcome of a run that committed nothing, in a transaction of its own: it is
        kept whatever the connection's ``autocommit`` (a connection with autocommit off would roll
        it back when it closes)."""
        self._execute("BEGIN")
        try:
            self.record_outcome(key, result)
            self._execute("COMMIT")
        except BaseException:
            self._execute("ROLLBACK")
            raise

    def read_outcome(self, key: OutcomeKey) -> BatchResult | None:
        """The outcome the run ``key`` recorded; None when it recorded none.

        Should one submission have run its driver twice (YARN runs the application master again
        after a failure), the run that committed wins, then the latest.
        """
        rows = self._execute(
            f"SELECT RESULT FROM {self.outcomes} WHERE APPLICATION_NAME = %s AND GENERATION_ID = %s "
            "AND BATCH_ID = %s AND ATTEMPT_ID = %s ORDER BY COMMITTED DESC, RECORDED_AT DESC LIMIT 1",
            (key.application_name, key.generation_id, key.batch_id, key.attempt_id),
        )
        return BatchResult.from_dict(json.loads(rows[0][0])) if rows else None

    def recent_outcomes(self, application_name: str, limit: int = 20) -> list[BatchResult]:
        """The application's latest ``limit`` batches, newest first: per batch id, the run that
        committed, else the latest (what ``status`` and the lag page show)."""
        rows = self._execute(
            f"SELECT BATCH_ID, RESULT FROM {self.outcomes} WHERE APPLICATION_NAME = %s "
            "ORDER BY RECORDED_AT DESC, COMMITTED DESC LIMIT %s",
            (application_name, limit * 4),
        )
        chosen: dict[str, BatchResult] = {}
        for batch_id, text in rows:
            result = BatchResult.from_dict(json.loads(text))
            if batch_id not in chosen or (result.committed and not chosen[batch_id].committed):
                chosen[batch_id] = result
        return list(chosen.values())[:limit]

    def read_attempt_outcomes(self, attempt_id: str) -> list[tuple[str, BatchResult]]:
        """Every outcome the submission ``attempt_id`` recorded (a continuous application records one
        per micro-batch), oldest first, each with the application name it read with."""
        rows = self._execute(
            f"SELECT APPLICATION_NAME, RESULT FROM {self.outcomes} WHERE ATTEMPT_ID = %s ORDER BY RECORDED_AT",
            (attempt_id,),
        )
        return [(str(name), BatchResult.from_dict(json.loads(result))) for name, result in rows]

    # -- staging --------------------------------------------------------------------------------

    def put_file(self, local_path: str | Path, stage_dir: str) -> None:
        """Upload one local file to ``@stage/<stage_dir>/`` under its own name."""
        if not _STAGE_PATH.match(stage_dir):
            raise ValueError(f"unsafe stage path {stage_dir!r}")
        path = Path(local_path).resolve()
        if "'" in str(path):
            raise ValueError(f"unsafe local path {path}")
        self._execute(f"PUT 'file://{path}' @{self.stage}/{stage_dir}/ AUTO_COMPRESS=FALSE OVERWRITE=TRUE")

    def remove_staged(self, stage_dir: str) -> None:
        if not _STAGE_PATH.match(stage_dir):
            raise ValueError(f"unsafe stage path {stage_dir!r}")
        self._execute(f"REMOVE @{self.stage}/{stage_dir}/")

    def run_copy(self, sql: str, table: str, stage_dir: str, expected_rows: int) -> int:
        """Run the COPY INTO ``sql``; the rows loaded, or :class:`LoadError` unless every file loaded
        and the rows are ``expected_rows``."""
        try:
            rows = self._execute(sql)
        except Exception as err:
            # Snowflake's message names the file, line and column; say which load it was.
            raise LoadError(f"{sql} failed: {err}") from err
        statuses = {str(r[1]) for r in rows}
        loaded = sum(int(r[3] or 0) for r in rows)
        if statuses - {"LOADED"} or loaded != expected_rows:
            raise LoadError(
                f"COPY INTO {table} from {stage_dir} loaded {loaded} of {expected_rows} rows "
                f"(file statuses: {sorted(statuses)})"
            )
        return loaded


class SnowflakeSink(SupportObjects):
    """The append sink: a Kinesis connector's batches staged and loaded with COPY INTO (or through a
    pipe's SELECT), the ledger moved in the same transaction; its lease-table generations.

    :param pipe_definition: PIPE destinations: the pipe's COPY statement; staged rows are then
        JSON lines loaded through its SELECT (see :mod:`~.pipe`) instead of Parquet matched by
        column name.
    :param names: the support objects of the source it loads (a Kinesis connector's by default;
        :data:`DYNAMODB_SUPPORT_NAMES` for a DynamoDB connector's).
    """

    load_method = "append"

    def __init__(
        self,
        connection: Any,
        destination: Destination,
        pipe_definition: str | None = None,
        names: SupportNames = KINESIS_SUPPORT_NAMES,
    ) -> None:
        super().__init__(connection, destination, names)
        self.pipe_definition = pipe_definition
        self._generations = SinkObjects.for_destination(destination, names).generations

    @property
    def generations(self) -> str:
        """The generations table; :class:`ValueError` for a source that records its generations elsewhere."""
        if self._generations is None:
            raise ValueError(f"the sink of {self.table} keeps no lease-table generations table ({self.names})")
        return self._generations

    def table_properties(self) -> TableProperties:
        """ENABLE_SCHEMA_EVOLUTION and whether the destination is an Iceberg table."""
        d = self.destination
        cur = self.connection.cursor()
        try:
            cur.execute(
                f"SHOW TABLES LIKE {_string_literal(d.table)} "
                f"IN SCHEMA {quote_identifier(d.database)}.{quote_identifier(d.schema)}"
            )
            names = [c[0] for c in cur.description or []]
            rows = list(cur.fetchall()) if cur.description else []
        finally:
            cur.close()
        return table_properties_from_show(names, rows, d.table)

    # -- generations ----------------------------------------------------------------------------

    def ensure_generations_table(self) -> None:
        """The generations table alone (reset and restore record in it; idempotent DDL)."""
        for ddl in (generations_ddl(self.destination), *generations_columns_ddl(self.destination)):
            self._execute(ddl.sql)

    def latest_generation(self, configured_application_name: str) -> GenerationRecord | None:
        """The newest record of the connector whose connector file names ``configured_application_name``.

        A record whose application name is ``configured_application_name`` counts too: a connector
        file changed to the active name after a reset still finds its history.
        """
        rows = self._execute(
            "SELECT CONFIGURED_APPLICATION_NAME, APPLICATION_NAME, GENERATION_ID, REASON, START_POSITION, "
            "START_TIMESTAMP, CONNECTOR_ID, STREAM_ARN, STREAM_CREATED_AT, RECORDED_AT, REPLACED_GENERATION_ID, "
            f"DESTINATION FROM {self.generations} "
            "WHERE CONFIGURED_APPLICATION_NAME = %s OR APPLICATION_NAME = %s ORDER BY RECORDED_AT DESC LIMIT 1",
            (configured_application_name, configured_application_name),
        )
        if not rows:
            return None
        r = rows[0]
        start = StartPosition.from_dict({"position": r[4], "timestamp": r[5]}) if r[4] else None
        return GenerationRecord(
            configured_application_name=str(r[0]),
            application_name=str(r[1]),
            generation_id=str(r[2]),
            reason=GenerationReason(str(r[3])),
            start=start,
            connector_id=r[6],
            stream_arn=r[7],
            stream_created_at=r[8],
            recorded_at=r[9] if isinstance(r[9], datetime) else None,
            replaces=r[10],
            destination=r[11],
        )

    def destination_loaders(self, stream_arn: str) -> list[Loader]:
        """The applications whose generations read ``stream_arn`` into this destination, each known by its
        configured and active names, with when it last recorded a generation."""
        rows = self._execute(
            "SELECT CONFIGURED_APPLICATION_NAME, APPLICATION_NAME, MAX(CONNECTOR_ID), MAX(RECORDED_AT) "
            f"FROM {self.generations} WHERE DESTINATION = %s AND STREAM_ARN = %s "
            "GROUP BY CONFIGURED_APPLICATION_NAME, APPLICATION_NAME",
            (self.destination.qualified_name, stream_arn),
        )
        loaders: list[Loader] = []
        for configured, active, connector, at in rows:
            if at is None:
                continue
            loaders.append(Loader(frozenset({str(configured), str(active)}), recorded_at(at), connector))
        return loaders

    def record_generation(self, record: GenerationRecord) -> None:
        """Append ``record``; it becomes the connector's newest (committed on its own)."""
        start = record.start.to_dict() if record.start is not None else {"position": None, "timestamp": None}
        self._execute(
            f"INSERT INTO {self.generations} (CONFIGURED_APPLICATION_NAME, APPLICATION_NAME, GENERATION_ID, "
            "REASON, START_POSITION, START_TIMESTAMP, CONNECTOR_ID, STREAM_ARN, STREAM_CREATED_AT, "
            "REPLACED_GENERATION_ID, DESTINATION) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                record.configured_application_name,
                record.application_name,
                record.generation_id,
                record.reason.value,
                start["position"],
                start["timestamp"],
                record.connector_id,
                record.stream_arn,
                record.stream_created_at,
                record.replaces,
                record.destination,
            ),
        )

    # -- loading --------------------------------------------------------------------------------

    def copy_sql(self, table: str, stage_dir: str, staged: Sequence[TableColumn] = ()) -> str:
        """The COPY INTO loading ``@stage/<stage_dir>/`` into ``table`` (quoted).

        :param staged: the destination columns the staged Parquet files were built for.
        """
        location = f"@{self.stage}/{stage_dir}/"
        if table == self.table and self.pipe_definition is not None:
            return pipe_load_sql(self.pipe_definition, location)
        if table == self.table and any(_holds_json_text(c) for c in staged):
            return semi_structured_copy_sql(table, location, staged)
        return (
            f"COPY INTO {table} FROM {location} "
            "FILE_FORMAT = (TYPE = PARQUET) MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE ON_ERROR = ABORT_STATEMENT"
        )

    def _copy(self, table: str, stage_dir: str, expected_rows: int, staged: Sequence[TableColumn] = ()) -> int:
        return self.run_copy(self.copy_sql(table, stage_dir, staged), table, stage_dir, expected_rows)

    def commit_batch(
        self,
        *,
        application_name: str,
        generation_id: str,
        batch_id: str,
        stage_dir: str,
        starts: Mapping[str, Checkpoint | None],
        ends: Mapping[str, Checkpoint],
        rows: int,
        failures: int,
        columns: Sequence[TableColumn],
        outcome: Callable[[CommitResult], tuple[OutcomeKey, BatchResult]] | None = None,
    ) -> CommitResult:
        """Load the staged batch and move the ledger, all or nothing.

        :param starts: per shard, the ledger mark the batch started from (None: no mark yet).
        :param ends: per shard that delivered records, the last record delivered.
        :param columns: the destination columns the staged rows were built for.
        :param outcome: given what was loaded, the batch's outcome and whose it is; recorded in the
            same transaction, just before COMMIT (:meth:`record_outcome`).
        """
        # Run the load in the destination's context, whatever the connection's defaults are.
        self._execute(
            f"USE SCHEMA {quote_identifier(self.destination.database)}.{quote_identifier(self.destination.schema)}"
        )
        self._execute("BEGIN")
        try:
            for shard_id in sorted(ends):
                self.advance_ledger(
                    application_name, generation_id, batch_id, shard_id, starts.get(shard_id), ends[shard_id]
                )
            loaded = self._copy(self.table, f"{stage_dir}/{ROWS_DIR}", rows, columns) if rows else 0
            failed = self._copy(self.failures_table, f"{stage_dir}/{FAILURES_DIR}", failures) if failures else 0
            if outcome is not None:
                self.record_outcome(*outcome(CommitResult(rows_loaded=loaded, failures_loaded=failed)))
            self._execute("COMMIT")
        except BaseException:
            self._execute("ROLLBACK")
            raise
        return CommitResult(rows_loaded=loaded, failures_loaded=failed)
