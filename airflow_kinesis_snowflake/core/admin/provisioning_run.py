"""Run a provisioning plan over a Snowflake connection, and check that a connector's objects exist.

The plan itself (:mod:`.provisioning`) is text; this module is the I/O: statements run one by one
in order, each skipped when its check query says it is in effect, and a failure is reported with
the statement redacted and how far the plan got (every statement can run again).
"""

from __future__ import annotations

import logging
from typing import Any

from snowflake.connector.errors import Error as SnowflakeError

from airflow_kinesis_snowflake.core.admin.provisioning import ExpectedObjects, ProvisioningPlan, Query, missing_objects
from airflow_kinesis_snowflake.core.load.snowflake_sink import qualified_name

log = logging.getLogger(__name__)


class SnowflakeObjectsError(RuntimeError):
    """Provisioning stopped, or the objects could not be read or are missing; the message shows no secret."""


def rows(connection: Any, query: Query) -> list[tuple[Any, ...]]:
    """The rows of ``query`` (none for a statement that returns no result set)."""
    cursor = connection.cursor()
    try:
        cursor.execute(query.sql, query.params or None)
        return list(cursor.fetchall()) if cursor.description else []
    finally:
        cursor.close()


def plan_target(plan: ProvisioningPlan) -> str:
    """The destination table the plan provisions, quoted."""
    return qualified_name(plan.spec.database, plan.spec.schema, plan.spec.table)


def run_plan(connection: Any, plan: ProvisioningPlan, *, progress: Any = log) -> list[str]:
    """Run every statement of ``plan`` in order; returns each one's status (``executed`` or ``skipped``).

    :param progress: the logger each statement (redacted) is reported to as it runs; this module's
        by default (an operator passes its task logger, which pytest's ``capfd`` also sees).

    :raises SnowflakeObjectsError: at the first statement Snowflake refuses, with the statement
        redacted, Snowflake's error redacted, and how many statements took effect before it. When
        the statement holds a secret, the original error (which may echo it) is not chained.
    """
    table, total = plan_target(plan), len(plan.statements)
    statuses: list[str] = []
    for number, statement in enumerate(plan.statements, start=1):
        try:
            if statement.skip_if is not None and rows(connection, statement.skip_if):
                progress.info("%d/%d %s: already in effect, skipped", number, total, statement.purpose)
                statuses.append("skipped")
                continue
            progress.info("%d/%d %s: %s", number, total, statement.purpose, statement.redacted)
            rows(connection, Query(statement.sql))
            statuses.append("executed")
        except SnowflakeError as err:
            raise SnowflakeObjectsError(
                f"provisioning {table} stopped at statement {number}/{total} ({statement.purpose}): "
                f"{statement.redacted}\nSnowflake error: {plan.redact(str(err))}\n"
                f"The {number - 1} statements before it took effect; every statement can run again."
            ) from (None if statement.redactions else err)
    progress.info(
        "Provisioned %s: %d statements executed, %d already in effect",
        table,
        statuses.count("executed"),
        statuses.count("skipped"),
    )
    return statuses


def plan_summary(plan: ProvisioningPlan, statuses: list[str], *, preview_only: bool) -> dict[str, Any]:
    """The task's result: the table, its type, each statement (redacted) with its status, and counts."""
    statements = [dict(s, status=status) for s, status in zip(plan.describe(), statuses, strict=True)]
    return {
        "table": plan_target(plan),
        "destination_type": plan.spec.destination_type.value,
        "dry_run": preview_only,
        "executed": statuses.count("executed"),
        "skipped": statuses.count("skipped"),
        "statements": statements,
    }


def stage_names(connection: Any, query: Query) -> list[str]:
    """The ``name`` column of a ``SHOW STAGES`` result."""
    cursor = connection.cursor()
    try:
        cursor.execute(query.sql)
        names = [str(d[0]).lower() for d in cursor.description or []]
        found = cursor.fetchall() if names else []
    finally:
        cursor.close()
    if "name" not in names:
        return []
    index = names.index("name")
    return [str(row[index]) for row in found]


def find_missing(connection: Any, expected: ExpectedObjects) -> list[str]:
    """What of ``expected`` Snowflake lacks (see :func:`~.provisioning.missing_objects`); empty when complete.

    :raises SnowflakeObjectsError: when the objects cannot be read (no database, or no privilege).
    """
    table = qualified_name(expected.database, expected.schema, expected.tables[0])
    try:
        schemas = [r[0] for r in rows(connection, expected.schema_query())]
        tables = [r[0] for r in rows(connection, expected.tables_query())]
        columns = [r[0] for r in rows(connection, expected.columns_query())]
        stages = stage_names(connection, expected.stage_query()) if schemas else []
        pipe_query = expected.pipe_query()
        pipes = [r[0] for r in rows(connection, pipe_query)] if pipe_query and schemas else []
    except SnowflakeError as err:
        raise SnowflakeObjectsError(
            f"cannot read the objects of {table} (does database {expected.database} exist, and may "
            f"this connection's role use it?): {err}"
        ) from err
    return missing_objects(expected, schemas=schemas, tables=tables, columns=columns, stages=stages, pipes=pipes)
