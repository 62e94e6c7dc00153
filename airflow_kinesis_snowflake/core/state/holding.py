"""Holding every lease of a table while a reset, restore or clean-up works on it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from airflow_kinesis_snowflake.core.state.errors import MaintenanceError
from airflow_kinesis_snowflake.core.state.leases import Lease, LeaseTable, takes_over


def held_by_others(leases: Iterable[Lease], owner: str | None, now: float) -> list[Lease]:
    """The leases another worker than ``owner`` holds at ``now``: what :func:`hold_leases` waits for."""
    return sorted(
        (lease for lease in leases if lease.is_held(now) and lease.lease_owner != owner), key=lambda x: x.shard_id
    )


def hold_leases(
    table: LeaseTable,
    owner: str,
    *,
    hold_seconds: float,
    timeout_seconds: float,
    poll_seconds: float = 2.0,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Lease]:
    """Take every lease of ``table`` as ``owner``, waiting for live ones to be released or expire.

    Leases are taken with the same conditional write as an ingestion's, so no batch can hold a
    shard or move a checkpoint while the reset works; they expire after ``hold_seconds`` if the
    reset dies. A lease an earlier try of ``owner``'s task holds is taken at once
    (:func:`~.leases.takes_over`). Returns the held leases by shard id. Reads the whole table
    (a scan) on each pass: maintenance must see every lease, not only the listed shards'.

    :raises MaintenanceError: when some lease is still held by another worker after ``timeout_seconds``.
    """
    deadline = clock() + timeout_seconds
    held: dict[str, Lease] = {}
    while True:
        now = clock()
        leases = table.leases()
        waiting: list[Lease] = []
        for shard_id, lease in leases.items():
            if lease.lease_owner == owner and lease.is_held(now):
                held[shard_id] = lease
                continue
            if lease.is_held(now) and not takes_over(owner, lease.lease_owner):
                waiting.append(lease)
                continue
            taken = table.take(lease, owner, hold_seconds, now=now)
            if taken is None:
                waiting.append(lease)  # changed between scan and take: look again
            else:
                held[shard_id] = taken
        for gone in set(held) - set(leases):
            del held[gone]
        if not waiting:
            # A batch that started before the reset mark may have created leases meanwhile.
            if set(table.leases()) <= set(held):
                return held
            continue
        if now >= deadline:
            owners = ", ".join(sorted(f"{lease.shard_id} by {lease.lease_owner}" for lease in waiting))
            raise MaintenanceError(
                f"leases of {table.table_name!r} still held after {timeout_seconds:.0f}s: {owners}. A batch is "
                "running; wait for it to finish (or for its leases to expire) and trigger again"
            )
        sleep(max(0.0, min(poll_seconds, deadline - now)))


def release_leases(table: LeaseTable, held: Iterable[Lease]) -> None:
    """Give back leases taken by :func:`hold_leases` (conditional: one that changed is left alone)."""
    for lease in held:
        table.release(lease)
