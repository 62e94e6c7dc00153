"""The maintenance window that reset, restore and clean-up open on a lease table.

While one of them works on a table, a reset mark on the table's metadata item makes ingest runs
skip it, and every lease is held by the maintenance task's owner, so that no batch moves a
checkpoint. Both expire on their own, :data:`LOCK_MARGIN_SECONDS` after the wait for leases,
should the task die without giving them back; giving them back is best effort for the same reason.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from typing import Any

from airflow_kinesis_snowflake.core.state.leases import Lease, LeaseTable
from airflow_kinesis_snowflake.core.state.marks import clear_reset_mark

log = logging.getLogger(__name__)

# How long a reset mark and the leases a reset holds outlive the wait for leases, should the task
# die without clearing them: ingestions resume on their own after that.
LOCK_MARGIN_SECONDS = 900


class AdminError(RuntimeError):
    """A reset, restore or clean-up refused to start, or stopped; the message says why and what changed."""


def maintenance_owner(kind: str, task_instance: Any = None) -> str:
    """The owner a maintenance task marks tables and holds leases as: ``<kind>/<dag>/<run>/<try>/<random>``.

    :param kind: ``reset``, ``restore`` or ``cleanup``.
    :param task_instance: the running task instance (``dag_id``, ``run_id``, ``try_number``); None
        outside a DAG run (``manual``).
    """
    ti = task_instance
    where = f"{ti.dag_id}/{ti.run_id}/{ti.try_number}" if ti is not None else "manual"
    return f"{kind}/{where}/{uuid.uuid4().hex[:8]}"


def release_quietly(table: LeaseTable, held: Iterable[Lease]) -> None:
    """Give back held leases, logging (not raising) a failure: a held lease also expires on its own."""
    for lease in held:
        try:
            table.release(lease)
        except Exception:  # best effort: a held lease also expires on its own
            log.warning("Could not release the lease on %s in %s", lease.shard_id, table.table_name, exc_info=True)


def clear_marks_quietly(client: Any, tables: Iterable[str], owner: str) -> None:
    """Remove ``owner``'s reset mark from each table, logging (not raising) a failure: a mark expires."""
    for name in tables:
        try:
            clear_reset_mark(client, name, owner)
        except Exception:  # it expires on its own; say so rather than hide the first error
            log.warning("Could not remove the reset mark of %s; it expires by itself", name, exc_info=True)
