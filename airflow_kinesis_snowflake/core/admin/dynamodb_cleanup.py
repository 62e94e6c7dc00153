"""Which lease items of a DynamoDB source clean-up may remove: those of superseded generations.

A DynamoDB source's lease table holds one lease per unit (snapshot segment, stream shard) of each
generation of each table, keyed ``<table>/g<generation>/<unit>``
(:func:`~..sources.dynamodb.progress.lease_key`). Once Snowflake records a newer generation of a
table (a gap, or a reset), no batch reads, takes or checkpoints the older generations' leases, and
the sink refuses a batch of an older generation still in flight. Those leases stay as the last
batch released them: harmless, but they add to every maintenance scan of the table, and a table
reset often holds many segments per generation.

:func:`decide_generation_leases` decides on each lease, a pure function over the leases and the
generations Snowflake records (the generations table is the truth, the lease table a cache of it):

* ``superseded-generation`` removes a lease of a generation older than the newest one recorded for
  its table, no batch holding it;
* ``current-generation`` keeps the leases of the newest recorded generation (and of any newer one);
* ``no-recorded-generation`` keeps the leases of a table the ledger records no generation of (the
  destination schema was replaced, or the ledger is another deployment's): which generation is
  current cannot be told;
* ``ledger-unreadable`` keeps every lease when the generations table cannot be read;
* ``live-lease`` keeps a lease a batch holds now (a batch of the old generation still running: the
  sink refuses its commit, and the next clean-up removes the lease);
* ``out-of-scope`` keeps everything of an application matching none of the patterns.

:func:`prune_generations` carries them out. A dry run reports only. Otherwise every lease of the
table is backed up first (the backup every clean-up, reset and restore writes), then each
superseded lease is deleted on the condition that it is unchanged since it was read, so a lease
taken or moved meanwhile stays. *Crash windows:* a run that dies after the backup leaves the
backup file and the leases not yet deleted, which the next run decides on again; no lease of the
current generation is ever deleted, so a sync run beside it reads as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from airflow_kinesis_snowflake.core.admin.cleanup import Decision, Rule, in_scope
from airflow_kinesis_snowflake.core.admin.cleanup_run import CONFIRMATION, CleanupBackups, CleanupRequest
from airflow_kinesis_snowflake.core.admin.window import AdminError
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import LeaseKey, parse_lease_key
from airflow_kinesis_snowflake.core.state.backups import snapshot
from airflow_kinesis_snowflake.core.state.leases import Lease, LeaseTable

log = logging.getLogger(__name__)

#: The kind of resource in a :class:`~.cleanup.Decision` on one of these leases.
DYNAMODB_SOURCE_LEASE = "dynamodb-source-lease"
BACKUP_REASON = "cleanup-superseded-generations"


def decide_generation_leases(
    leases: Iterable[Lease],
    recorded: Mapping[str, int] | None,
    *,
    application_name: str,
    now: float,
    ledger_problem: str | None = None,
    patterns: Sequence[str] = ("*",),
) -> list[Decision]:
    """One decision per DynamoDB source lease of ``application_name``'s table, by key.

    :param leases: the table's leases (other keys, such as a Kinesis shard's, are passed over).
    :param recorded: the newest generation Snowflake records per DynamoDB table
        (:func:`~..load.dynamodb_sink.recorded_generations`); None when it could not be read.
    :param now: epoch seconds, to tell a lease held now.
    :param ledger_problem: why ``recorded`` could not be read.
    """

    decisions = []
    for lease in sorted(leases, key=lambda lease: lease.shard_id):
        key = parse_lease_key(lease.shard_id)
        if key is None:
            continue
        if not in_scope(application_name, patterns):
            rule, detail = Rule.OUT_OF_SCOPE, f"application {application_name!r} matches none of {list(patterns)}"
        elif recorded is None:
            rule, detail = Rule.LEDGER_UNREADABLE, f"the generations of {key.table} cannot be read: {ledger_problem}"
        else:
            rule, detail = _generation_rule(lease, key, recorded.get(key.table), application_name, now)
        decisions.append(Decision(DYNAMODB_SOURCE_LEASE, lease.shard_id, rule, detail, application_name, key.table))
    return decisions


def _generation_rule(
    lease: Lease, key: LeaseKey, newest: int | None, application_name: str, now: float
) -> tuple[Rule, str]:
    if newest is None:
        return Rule.NO_RECORDED_GENERATION, (
            f"the ledger records no generation of table {key.table} for application {application_name!r}, so which "
            "generation is current cannot be told; delete the leases by hand once no connector syncs it"
        )
    if key.generation >= newest:
        return Rule.CURRENT_GENERATION, f"generation {key.generation}; the newest recorded is {newest}"
    if lease.is_held(now):
        return Rule.LIVE_LEASE, (
            f"generation {key.generation}, superseded by {newest}, is held by {lease.lease_owner} now (a batch of "
            "the old generation, whose commit the ledger refuses); decided on at a later run"
        )
    return Rule.SUPERSEDED_GENERATION, (
        f"generation {key.generation} of table {key.table}, superseded by generation {newest} recorded in "
        "Snowflake: no batch reads it again"
    )


def prune_generations(
    request: CleanupRequest,
    table: LeaseTable,
    read_recorded: Callable[[], Mapping[str, int]],
    *,
    backups: CleanupBackups,
    connector_id: str,
    destination: str,
    now: float | None = None,
) -> dict[str, Any]:
    """Decide on every DynamoDB source lease of ``table``, and unless a dry run, delete the superseded ones.

    :param read_recorded: reads the newest generation per DynamoDB table from Snowflake; any error
        it raises keeps every lease (``ledger-unreadable``).
    :param destination: ``DATABASE.SCHEMA`` of the connector's tables, where its generations are.
    :return: ``dry_run``, ``candidates``, ``kept``, ``deleted`` (decisions as mappings) and ``backups``.
    :raises AdminError: when it is not a dry run and ``confirm`` is not ``DELETE`` (as the Kinesis clean-up).
    """
    now = time.time() if now is None else now
    if not table.exists():
        log.info("Lease table %s does not exist: nothing to clean up", table.table_name)
        return {"dry_run": request.preview_only, "candidates": [], "kept": [], "deleted": [], "backups": {}}
    try:
        recorded: Mapping[str, int] | None = read_recorded()
        problem = None
    except Exception as err:  # noqa: BLE001  whatever the reason, nothing is decided on without the ledger
        recorded, problem = None, f"{type(err).__name__}: {err}"
    leases = table.leases()
    decisions = decide_generation_leases(
        leases.values(),
        recorded,
        application_name=table.table_name,
        now=now,
        ledger_problem=problem,
        patterns=request.patterns,
    )
    candidates = [d for d in decisions if d.delete]
    log.info(
        "Lease table %s (DynamoDB source, generations in %s): %d superseded leases of %d",
        table.table_name,
        destination,
        len(candidates),
        len(decisions),
    )
    for decision in decisions:
        log.info("  %s", decision.describe())
    result: dict[str, Any] = {
        "dry_run": request.preview_only,
        "candidates": [d.to_dict() for d in candidates],
        "kept": [d.to_dict() for d in decisions if not d.delete],
        "deleted": [],
        "backups": {},
    }
    if request.preview_only:
        log.info("Dry run: nothing was deleted. To delete, trigger with dry_run false and confirm %r.", CONFIRMATION)
        return result
    if request.confirm != CONFIRMATION:
        raise AdminError(f"confirm must be {CONFIRMATION!r} to delete (got {request.confirm!r}); nothing was deleted")
    if not candidates:
        return result
    backup = snapshot(table, reason=BACKUP_REASON, connector_id=connector_id, destination=destination)
    result["backups"][table.table_name] = backups.checkpoints(backup)
    log.info("Backed up every lease of %s to %s", table.table_name, result["backups"][table.table_name])
    for decision in candidates:
        if table.remove_unchanged(leases[decision.resource]):
            result["deleted"].append(decision.to_dict())
        else:
            log.warning("Kept %s after all: it changed since it was read", decision.resource)
    log.info("Deleted %d of %d superseded leases of %s", len(result["deleted"]), len(candidates), table.table_name)
    return result


__all__ = ["BACKUP_REASON", "DYNAMODB_SOURCE_LEASE", "decide_generation_leases", "prune_generations"]
