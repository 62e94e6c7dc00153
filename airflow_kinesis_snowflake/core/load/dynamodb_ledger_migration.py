"""Carry a DynamoDB table's stream marks and batch outcomes over from the Kinesis-named support objects.

Earlier releases kept a DynamoDB connector's stream-shard marks and batch outcomes in the Kinesis
connectors' ``KINESIS_INGEST_LEDGER`` and ``KINESIS_INGEST_BATCH_OUTCOMES`` (and staged in
``KINESIS_INGEST_STAGE``); a DynamoDB connector now has its own, ``DYNAMODB_INGEST_*``
(:data:`~.snowflake_sink.DYNAMODB_SUPPORT_NAMES`). A sync that found an empty ledger would read
each stream shard again from its start (or not at all, past the safe age: a gap and a new
snapshot), so the rows of the table are copied over before any of them is read:

1. **Create** the new ledger and outcomes tables (``CREATE ... IF NOT EXISTS``, with the other
   support objects: :meth:`~.dynamodb_sink.DynamoDBSink.ensure_support_objects`).
2. **Look** for the old tables in the destination's schema (the information schema); a schema
   without them has nothing to copy, and the migration ends here.
3. **Copy**, in one transaction, the old rows of this application and this DynamoDB table (their
   generation ids are ``<table>/g<n>``, :func:`generation_prefix`) that the new tables lack: ledger
   rows keyed as the ledger is (application, generation id, shard id), outcome rows keyed by
   application, generation id, batch id, attempt id, committed flag and time, the outcomes within
   :data:`~.snowflake_sink.OUTCOME_RETENTION_DAYS` only (older ones would be deleted at the next
   outcome). Each ``INSERT ... SELECT ... WHERE NOT EXISTS`` writes a row at most once. First the
   rows to copy are counted: a run that finds none (every run after the first) opens no transaction.

Every sync of a table runs these steps first (step 0 of :func:`~..dynamodb_sync.sync_table`, before
it reads a mark, claims or records anything), and so does the provision DAG's ``provision_table``:
whichever runs first after the upgrade copies, the others find the rows there and copy nothing.

*Crash* after step 1: the new tables exist and are empty; the next run creates nothing and copies
(nothing read the empty ledger: the copy comes first in every run). *In* step 3, before COMMIT:
nothing was copied (the transaction rolls back); the next run copies all of it. *After* COMMIT: the
next run finds every row and copies nothing; a mark the new ledger moved since is never put back,
for a row already there is never written.

The old rows are left where they are: a Kinesis connector of the same schema reads and moves its own
rows of those tables, and nothing of this table is read there again. Once every DynamoDB connector
of a schema has synced after the upgrade, they can be deleted by hand (the CHANGELOG's upgrading
note gives the statements). A Spark job of the earlier release still running during the upgrade
moves only the old ledger; its changes are applied again from the copied marks, which the MERGE's
version guard makes a no-op (:mod:`.dynamodb_sink`): upgrade with the sync DAGs paused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_kinesis_snowflake.core.load.snowflake_sink import (
    DYNAMODB_SUPPORT_NAMES,
    KINESIS_SUPPORT_NAMES,
    OUTCOME_RETENTION_DAYS,
    qualified_name,
    quote_identifier,
)
from airflow_kinesis_snowflake.core.model import Destination

log = logging.getLogger(__name__)

_LEDGER_COLUMNS = (
    "APPLICATION_NAME",
    "GENERATION_ID",
    "SHARD_ID",
    "SEQUENCE_NUMBER",
    "SUB_SEQUENCE_NUMBER",
    "BATCH_ID",
    "UPDATED_AT",
)
_LEDGER_KEY = ("APPLICATION_NAME", "GENERATION_ID", "SHARD_ID")
_OUTCOME_COLUMNS = (
    "APPLICATION_NAME",
    "GENERATION_ID",
    "BATCH_ID",
    "ATTEMPT_ID",
    "STAGE_DIR",
    "COMMITTED",
    "RESULT",
    "RECORDED_AT",
)
_OUTCOME_KEY = ("APPLICATION_NAME", "GENERATION_ID", "BATCH_ID", "ATTEMPT_ID", "COMMITTED", "RECORDED_AT")


def generation_prefix(table: str) -> str:
    """How the ledger's generation ids of a DynamoDB table's stream marks begin: ``<table>/g``
    (:func:`~..dynamodb_job.generation_id`; a DynamoDB table's name has no ``/``, so the prefix is
    of this table alone)."""
    return f"{table}/g"


@dataclass(frozen=True)
class CopiedRows:
    """What one migration copied: ledger rows and outcome rows."""

    ledger: int = 0
    outcomes: int = 0


def _missing_rows(old: str, new: str, key: tuple[str, ...], where: str) -> str:
    """``FROM ... WHERE ...`` of the rows of ``old`` (an application's, of one table) that ``new`` lacks."""
    matches = " AND ".join(f"n.{k} = o.{k}" for k in key)
    return (
        f"FROM {old} AS o WHERE o.APPLICATION_NAME = %s AND STARTSWITH(o.GENERATION_ID, %s){where} "
        f"AND NOT EXISTS (SELECT 1 FROM {new} AS n WHERE {matches})"
    )


def _copy_sql(old: str, new: str, columns: tuple[str, ...], key: tuple[str, ...], where: str) -> str:
    names = ", ".join(columns)
    return (
        f"INSERT INTO {new} ({names}) SELECT {', '.join(f'o.{c}' for c in columns)} "
        f"{_missing_rows(old, new, key, where)}"
    )


def _count_sql(copy_sql: str) -> str:
    """How many rows ``copy_sql`` would copy (the same parameters)."""
    return "SELECT COUNT(*) " + copy_sql[copy_sql.index(" FROM ") + 1 :]


def ledger_copy_sql(destination: Destination) -> str:
    """Copy an application's ledger rows of one table (parameters: application name, generation
    prefix) from the Kinesis ledger into the DynamoDB ledger of ``destination``'s schema, each
    row unless the DynamoDB ledger has its key."""
    db, schema = destination.database, destination.schema
    return _copy_sql(
        qualified_name(db, schema, KINESIS_SUPPORT_NAMES.ledger),
        qualified_name(db, schema, DYNAMODB_SUPPORT_NAMES.ledger),
        _LEDGER_COLUMNS,
        _LEDGER_KEY,
        "",
    )


def outcomes_copy_sql(destination: Destination) -> str:
    """Copy an application's outcome rows of one table recorded since a time (parameters:
    application name, generation prefix, the time) from the Kinesis outcomes table into the
    DynamoDB one, each row unless it is there."""
    db, schema = destination.database, destination.schema
    return _copy_sql(
        qualified_name(db, schema, KINESIS_SUPPORT_NAMES.outcomes),
        qualified_name(db, schema, DYNAMODB_SUPPORT_NAMES.outcomes),
        _OUTCOME_COLUMNS,
        _OUTCOME_KEY,
        " AND o.RECORDED_AT >= %s",
    )


def _run(connection: Any, sql: str, params: tuple[Any, ...] = ()) -> tuple[list[tuple[Any, ...]], int]:
    cursor = connection.cursor()
    try:
        cursor.execute(sql, params)
        rows = list(cursor.fetchall()) if cursor.description else []
        return rows, int(cursor.rowcount or 0)
    finally:
        cursor.close()


def old_tables(connection: Any, destination: Destination) -> set[str]:
    """Which of the Kinesis ledger and outcomes tables exist in ``destination``'s schema."""
    wanted = (KINESIS_SUPPORT_NAMES.ledger, KINESIS_SUPPORT_NAMES.outcomes)
    rows, _ = _run(
        connection,
        f"SELECT TABLE_NAME FROM {quote_identifier(destination.database)}.information_schema.tables "
        "WHERE table_schema = %s AND table_name IN (%s, %s)",
        (destination.schema, *wanted),
    )
    return {str(r[0]) for r in rows}


def copy_kinesis_named_rows(
    connection: Any,
    destination: Destination,
    application_name: str,
    table: str,
    now: datetime | None = None,
) -> CopiedRows:
    """Steps 2 and 3 of the module docstring for one DynamoDB table (the new tables exist).

    :param destination: the table's destination: the schema both sets of tables are in.
    :param application_name: the connector's application name.
    :param table: the DynamoDB table.
    :param now: the time the outcomes' retention counts back from; the current time when None.
    """
    present = old_tables(connection, destination)
    if not present:
        return CopiedRows()
    prefix = generation_prefix(table)
    since = ((now or datetime.now(UTC)) - timedelta(days=OUTCOME_RETENTION_DAYS)).isoformat()
    copies: list[tuple[str, tuple[str, ...]]] = []
    if KINESIS_SUPPORT_NAMES.ledger in present:
        copies.append((ledger_copy_sql(destination), (application_name, prefix)))
    if KINESIS_SUPPORT_NAMES.outcomes in present:
        copies.append((outcomes_copy_sql(destination), (application_name, prefix, since)))
    # Most runs find every row copied already (or none to copy): they read, and open no transaction.
    if not any(_run(connection, _count_sql(sql), params)[0][0][0] for sql, params in copies):
        return CopiedRows()
    _run(connection, "BEGIN")
    try:
        ledger = outcomes = 0
        if KINESIS_SUPPORT_NAMES.ledger in present:
            _, ledger = _run(connection, ledger_copy_sql(destination), (application_name, prefix))
        if KINESIS_SUPPORT_NAMES.outcomes in present:
            _, outcomes = _run(connection, outcomes_copy_sql(destination), (application_name, prefix, since))
        _run(connection, "COMMIT")
    except BaseException:
        _run(connection, "ROLLBACK")
        raise
    copied = CopiedRows(ledger, outcomes)
    if ledger or outcomes:
        log.info(
            "%s: copied %d ledger rows and %d batch outcomes of application %r from %s.%s's %s and %s into %s and %s",
            table,
            ledger,
            outcomes,
            application_name,
            destination.database,
            destination.schema,
            KINESIS_SUPPORT_NAMES.ledger,
            KINESIS_SUPPORT_NAMES.outcomes,
            DYNAMODB_SUPPORT_NAMES.ledger,
            DYNAMODB_SUPPORT_NAMES.outcomes,
        )
    return copied
