"""The maintenance marks in lease tables' metadata items, and which application is active.

A connector's connector file names its **configured** application name. A reset to a new
application name leaves the old table in place and records, in the metadata item of the old
table and of the configured one, ``superseded_by = <new name>``. Every ingestion resolves the
**active** application name from there (:func:`resolve_application`), so the switch needs no
change to the connector file. The pointer lives next to the checkpoints it points to: it survives
a rebuilt Airflow database, and every process that shares the application sees the same answer.

While a reset or restore works on a connector, the metadata items of the configured and the
active table carry a **reset mark** (owner, mode, expiry). Ingest runs that see a live mark end
skipped instead of racing the reset; a mark whose task died expires by itself.

A table's generation (which keys the ledger's marks) is set with :func:`set_generation`, only on
the table a run decided on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from airflow_kinesis_snowflake.core.state.chain import Chain, ChainEnd, walk_chain
from airflow_kinesis_snowflake.core.state.dynamodb import ConditionFailed, TableMissing
from airflow_kinesis_snowflake.core.state.errors import MaintenanceError
from airflow_kinesis_snowflake.core.state.metadata import (
    METADATA_KEY,
    RESET_EXPIRES_AT,
    RESET_MODE,
    RESET_OWNER,
    RESET_STARTED_AT,
    SUPERSEDED_AT,
    SUPERSEDED_BY,
    ResetMark,
    TableMarks,
    lease_table_items,
    read_marks,
)


class ResetMode(StrEnum):
    """The two resets of Snowflake's Openflow connector for Kinesis."""

    NEW_APPLICATION_NAME = "new_application_name"  # a new table; the old one stays, superseded
    DELETE_TABLE = "delete_table"  # the same table, deleted and created again (new generation)


def set_reset_mark(client: Any, table_name: str, mark: ResetMark, *, now: float | None = None) -> None:
    """Put ``mark`` on a table, unless another live reset holds it.

    :raises MaintenanceError: when another reset's mark is live, or the table has no metadata item.
    """
    now = time.time() if now is None else now
    try:
        lease_table_items(client, table_name).update(
            METADATA_KEY,
            f"SET {RESET_OWNER} = :owner, {RESET_MODE} = :mode, "
            f"{RESET_STARTED_AT} = :started, {RESET_EXPIRES_AT} = :expires",
            condition=f"attribute_exists(#k) AND (attribute_not_exists({RESET_OWNER}) "
            f"OR {RESET_OWNER} = :owner OR {RESET_EXPIRES_AT} < :now)",
            values={
                ":owner": {"S": mark.owner},
                ":mode": {"S": mark.mode},
                ":started": {"N": str(mark.started_at)},
                ":expires": {"N": str(mark.expires_at)},
                ":now": {"N": str(now)},
            },
        )
    except TableMissing as err:
        raise MaintenanceError(
            f"lease table {table_name!r} does not exist (no metadata item); nothing to reset"
        ) from err
    except ConditionFailed as err:
        marks = read_marks(client, table_name)
        if marks is None:
            raise MaintenanceError(f"lease table {table_name!r} has no metadata item; nothing to reset") from err
        other = marks.live_reset(now)
        held = f"{other.mode} by {other.owner}, until {other.to_dict()['expires_at']}" if other else "changed meanwhile"
        raise MaintenanceError(
            f"another reset or restore is working on {table_name!r} ({held}); wait until it ends or its mark expires"
        ) from err


def clear_reset_mark(client: Any, table_name: str, owner: str) -> bool:
    """Remove our mark; False when the table is gone or the mark is not ours (nothing to do)."""
    try:
        lease_table_items(client, table_name).update(
            METADATA_KEY,
            f"REMOVE {RESET_OWNER}, {RESET_MODE}, {RESET_STARTED_AT}, {RESET_EXPIRES_AT}",
            condition=f"{RESET_OWNER} = :owner",
            values={":owner": {"S": owner}},
        )
    except (ConditionFailed, TableMissing):
        return False
    return True


def mark_superseded(client: Any, table_name: str, by: str, *, now: float | None = None) -> None:
    """Record that ``by`` replaced this table; ingestions resolving through it read ``by``."""
    now = time.time() if now is None else now
    lease_table_items(client, table_name).update(
        METADATA_KEY,
        f"SET {SUPERSEDED_BY} = :by, {SUPERSEDED_AT} = :at",
        condition="attribute_exists(#k)",
        values={":by": {"S": by}, ":at": {"N": str(now)}},
    )


def clear_superseded(client: Any, table_name: str) -> None:
    """Make the table active again (a restore to it)."""
    lease_table_items(client, table_name).update(
        METADATA_KEY, f"REMOVE {SUPERSEDED_BY}, {SUPERSEDED_AT}", condition="attribute_exists(#k)"
    )


def set_generation(
    client: Any,
    table_name: str,
    generation_id: str,
    *,
    expected: str | None = None,
    owner: str | None = None,
    now: float | None = None,
) -> None:
    """Give a table a generation id; a restore brings back the one the ledger marks belong to.

    Conditional: the table must still hold ``expected`` (when given), and no live reset or restore
    mark but ``owner``'s may be on it, so a run that decided on an older view changes nothing.

    :raises MaintenanceError: when the table changed meanwhile or another reset's mark is live.
    """
    now = time.time() if now is None else now
    condition = (
        f"attribute_exists(#k) AND (attribute_not_exists({RESET_OWNER}) OR {RESET_EXPIRES_AT} < :now"
        + (f" OR {RESET_OWNER} = :owner)" if owner is not None else ")")
        + (" AND generation_id = :expected" if expected is not None else "")
    )
    values: dict[str, Any] = {":g": {"S": generation_id}, ":now": {"N": str(now)}}
    if owner is not None:
        values[":owner"] = {"S": owner}
    if expected is not None:
        values[":expected"] = {"S": expected}
    try:
        lease_table_items(client, table_name).update(
            METADATA_KEY, "SET generation_id = :g", condition=condition, values=values
        )
    except ConditionFailed as err:
        raise MaintenanceError(
            f"lease table {table_name!r} changed while its generation was being set to {generation_id} "
            f"(expected {expected or 'any'}; a reset or restore may be working on it); nothing was changed"
        ) from err


# -- which application is active ------------------------------------------------------------------


@dataclass(frozen=True)
class Resolution:
    """Where a connector's progress lives now.

    :param configured: the application name in the connector file.
    :param active: the application name ingestions use: ``configured``, or what superseded it.
    :param chain: the tables read to get there, ``configured`` first.
    :param reset: a live reset mark on one of them, if a reset or restore is running.
    :param reset_table: the table that mark is on.
    :param metadata: the metadata item of ``active`` as read on the way (None: it has none, or the
        table does not exist), so that nothing needs to read it again.
    """

    configured: str
    active: str
    chain: tuple[str, ...]
    reset: ResetMark | None = None
    reset_table: str | None = None
    metadata: TableMarks | None = None

    @property
    def superseded(self) -> bool:
        return self.active != self.configured


def marks_chain(client: Any, configured: str) -> Chain[TableMarks]:
    """The ``superseded_by`` chain from ``configured``, read from the metadata items (see :func:`walk_chain`)."""
    return walk_chain(configured, lambda name: read_marks(client, name), lambda marks: marks.superseded_by)


def resolve_application(client: Any, configured: str, *, now: float | None = None) -> Resolution:
    """Follow ``superseded_by`` from the configured table to the active one.

    A configured table that does not exist (yet) is active: the ingest DAG creates it.

    :raises MaintenanceError: when the chain leads to a missing table, loops or is too long.
    """
    now = time.time() if now is None else now
    chain = marks_chain(client, configured)
    if chain.end is ChainEnd.MISSING and len(chain.names) > 1:
        raise MaintenanceError(
            f"lease table {chain.names[-2]!r} was superseded by {chain.last!r}, which does not exist or has no "
            "metadata item; restore a checkpoint backup with the connector's restore DAG"
        )
    if chain.end in (ChainEnd.LOOP, ChainEnd.HOP_LIMIT):
        raise MaintenanceError(chain.describe())
    reset, reset_table = None, None
    for marks in chain.found:
        if (live := marks.live_reset(now)) is not None:
            reset, reset_table = live, marks.table_name
            break
    active = chain.found[-1] if chain.complete and chain.found else None
    return Resolution(
        configured=configured,
        active=chain.last,
        chain=chain.names,
        reset=reset,
        reset_table=reset_table,
        metadata=active,
    )
