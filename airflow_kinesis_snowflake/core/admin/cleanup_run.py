"""The clean-up run: gather the facts, decide (:mod:`.cleanup`), and remove what may go, checking again.

:func:`run_cleanup` goes in this order:

1. gather the facts: every DynamoDB table (tags, metadata item, leases, heartbeats), the tables
   their ``superseded_by`` chains reach (read, or confirmed gone), the fan-out consumers of the
   streams involved, and what the tables cannot say themselves (:class:`Evidence`: the stream's
   retention period, the ledger's last commit of each application);
2. decide on every resource (:func:`~.cleanup.plan_cleanup`, pure) and report. A dry run stops here;
3. check the confirmation (``DELETE``);
4. remove the candidates in :func:`~.cleanup.deletion_order`, each confirmed again first:

   * a lease table is marked as under maintenance (a reset mark: ingest runs skip it) and its
     leases held without waiting (a batch holding one means the table is in use); then the facts
     of the table, of the tables it leads to and of those leading to it are read again and decided
     on again; it is backed up, then deleted. A table kept after all gets its mark and leases back;
   * a migration copy is decided on again on fresh facts, its items backed up, and it is dropped
     through the migration's own last step;
   * a consumer that follows its lease table goes only once that table was deleted in this run.

Crash windows. A run that dies while a table is marked and held leaves the mark and the leases,
which expire :data:`~.window.LOCK_MARGIN_SECONDS` later (ingestion resumes then); one that dies
after a backup and before the deletion leaves only the backup file. Nothing is deleted before its
backup is written. A run that dies between deleting a lease table and deregistering the consumer
that followed it leaves the consumer, which a later run keeps (no table names it any more) for
removal by hand.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from airflow_kinesis_snowflake.core.admin.cleanup import (
    ACTIVE,
    FAN_OUT_CONSUMER,
    GONE,
    LEASE_TABLE,
    MIGRATION_TABLE,
    ConnectorUse,
    ConsumerFacts,
    Decision,
    LeaseTableFacts,
    MigrationTableFacts,
    Rule,
    confirm_consumer,
    confirm_pointer,
    decide_lease_tables,
    decide_migration_table,
    deletion_order,
    dynamodb_source_keys,
    in_scope,
    plan_cleanup,
)
from airflow_kinesis_snowflake.core.admin.params import ParameterError, as_bool, as_number
from airflow_kinesis_snowflake.core.admin.window import LOCK_MARGIN_SECONDS, AdminError
from airflow_kinesis_snowflake.core.aws import error_code
from airflow_kinesis_snowflake.core.load.snowflake_sink import SnowflakeSink, destination_from_text
from airflow_kinesis_snowflake.core.model import ConsumerType
from airflow_kinesis_snowflake.core.state.backups import CheckpointBackup, optional_text, snapshot
from airflow_kinesis_snowflake.core.state.chain import walk_chain
from airflow_kinesis_snowflake.core.state.dynamodb import delete_table, list_table_names, scan_items, table_tags
from airflow_kinesis_snowflake.core.state.errors import MaintenanceError
from airflow_kinesis_snowflake.core.state.holding import hold_leases, release_leases
from airflow_kinesis_snowflake.core.state.leases import LeaseTable, last_activity
from airflow_kinesis_snowflake.core.state.marks import clear_reset_mark, resolve_application, set_reset_mark
from airflow_kinesis_snowflake.core.state.metadata import CREATED_BY, CREATED_BY_TAG, ResetMark, read_marks
from airflow_kinesis_snowflake.core.state.migration import (
    MIGRATION_OF_TAG,
    LegacyMigration,
    MigrationError,
    MigrationState,
    lease_agrees,
    migration_state,
)

log = logging.getLogger(__name__)

CONFIRMATION = "DELETE"


class CleanupStream(Protocol):
    """What clean-up needs of Kinesis (the Kinesis hook provides it)."""

    @property
    def conn(self) -> Any: ...

    def list_consumers(self, stream_name: str) -> list[dict[str, Any]]: ...

    def deregister_consumer(self, consumer_arn: str) -> None: ...


class CleanupBackups(Protocol):
    """Where clean-up writes what it removes (see :class:`airflow_kinesis_snowflake.backups.BackupStore`)."""

    def checkpoints(self, backup: CheckpointBackup) -> str: ...

    def migration_copy(self, table_name: str, migration_of: str, items: Sequence[Mapping[str, Any]]) -> str: ...


@dataclass(frozen=True)
class CleanupRequest:
    """A clean-up run, every parameter checked (see :func:`parse_cleanup_request`).

    :param retention_seconds: how long an unused lease table is kept after its last activity.
    :param patterns: glob patterns of the application names clean-up may consider.
    :param preview_only: only report, delete nothing.
    :param confirm: must be :data:`CONFIRMATION` to delete.
    """

    retention_seconds: float
    patterns: tuple[str, ...]
    preview_only: bool
    confirm: str | None


def parse_cleanup_request(
    *,
    retention_days: float | str,
    application_name_patterns: Sequence[str] | str,
    preview_only: bool | str,
    confirm: str | None,
) -> CleanupRequest:
    """Every parameter checked before any call, as rendered by a template; no I/O.

    :param application_name_patterns: a list, JSON list text (a Param rendered with ``| tojson``)
        or comma-separated text.
    :raises ParameterError: naming the first parameter that is not allowed.
    """
    preview = as_bool(preview_only, "preview_only")
    retention = as_number(retention_days, "retention_days") * 86400
    value = application_name_patterns
    if isinstance(value, str):
        text = value.strip()
        try:
            value = json.loads(text) if text.startswith("[") else text.split(",")
        except json.JSONDecodeError:
            raise ParameterError(f"application_name_patterns is not a list: {text!r}") from None
    patterns = tuple(str(p).strip() for p in value if str(p).strip())
    if not patterns:
        raise ParameterError("application_name_patterns is empty: give at least one pattern, e.g. '*'")
    return CleanupRequest(retention, patterns, preview, optional_text(confirm))


def connector_use(dynamodb: Any, connector: Mapping[str, Any]) -> ConnectorUse:
    """How a configured connector uses its tables: its configured and active application.

    :param connector: ``connector_id``, ``application_name``, ``stream_name`` and ``consumer_type``.
    """
    configured = str(connector["application_name"])
    try:
        active = resolve_application(dynamodb, configured).active
    except MaintenanceError as err:
        # Its configured table is kept anyway; the broken pointer is for a restore to repair.
        log.warning("Connector %s: %s", connector["connector_id"], err)
        active = configured
    return ConnectorUse(
        connector_id=str(connector["connector_id"]),
        stream_name=str(connector["stream_name"]),
        configured_application=configured,
        active_application=active,
        enhanced_fan_out=str(connector.get("consumer_type", "")) == ConsumerType.ENHANCED_FAN_OUT,
    )


class Evidence:
    """What clean-up reads outside DynamoDB to tell a table in use: stream retention periods and ledger commits.

    Each stream is described once per run; the Snowflake connection is opened on the first ledger
    read and closed by :meth:`close`. A read that fails is recorded as the reason the table is kept.

    :param kinesis: a boto3 Kinesis client.
    :param connect: opens a Snowflake DB-API connection to read the ledgers through.
    :param connection_name: how that connection is named in messages (the Airflow connection id).
    """

    def __init__(self, kinesis: Any, connect: Callable[[], Any], connection_name: str) -> None:
        self.kinesis = kinesis
        self.connect = connect
        self.connection_name = connection_name
        self._streams: dict[str, tuple[float | None, str | None]] = {}
        self._connection: Any = None
        self._connection_problem: str | None = None

    def add_to(self, facts: LeaseTableFacts, patterns: Sequence[str]) -> LeaseTableFacts:
        """``facts`` with the stream's retention period and the ledger's last commit of its application.

        Only for this provider's tables with a metadata item, in scope: nothing else is decided on them.
        """
        if not facts.tagged or facts.application_name is None or not in_scope(facts.application_name, patterns):
            return facts
        if not facts.kinesis:
            return facts  # a DynamoDB source's table: its stream_name is a DynamoDB table, and it is kept
        retention, stream_problem = self._stream_retention(facts.stream_name or "", facts.stream_arn)
        last_load, ledger_problem = self._last_load(facts.destination, facts.application_name)
        return replace(
            facts,
            stream_retention_seconds=retention,
            stream_problem=stream_problem,
            last_load_at=last_load,
            ledger_problem=ledger_problem,
        )

    def _stream_retention(self, stream_name: str, stream_arn: str | None) -> tuple[float | None, str | None]:
        key = stream_arn or stream_name
        if key not in self._streams:
            where = {"StreamARN": stream_arn} if stream_arn else {"StreamName": stream_name}
            try:
                summary = self.kinesis.describe_stream_summary(**where)["StreamDescriptionSummary"]
                self._streams[key] = (float(summary["RetentionPeriodHours"]) * 3600, None)
            except ClientError as err:
                error = err.response.get("Error", {})
                problem = f"DescribeStreamSummary of {key} failed: {error.get('Code', '')} {error.get('Message', '')}"
                self._streams[key] = (None, problem.strip())
            except BotoCoreError as err:
                self._streams[key] = (None, f"DescribeStreamSummary of {key} failed: {err}")
        return self._streams[key]

    def _last_load(self, destination: str | None, application: str) -> tuple[float | None, str | None]:
        if destination is None:
            return None, None  # the decision names it: no destination recorded, so kept
        try:
            target = destination_from_text(destination)
        except ValueError as err:
            return None, str(err)
        connection = self._connect()
        if connection is None:
            return None, f"cannot connect to Snowflake through {self.connection_name!r}: {self._connection_problem}"
        try:
            updated = SnowflakeSink(connection, target).last_ledger_update(application)
        except Exception as err:  # noqa: BLE001 - any failure means: not known to be idle
            return None, f"reading the ledger {target.database}.{target.schema}.KINESIS_INGEST_LEDGER failed: {err}"
        return (updated.timestamp() if updated is not None else None), None

    def _connect(self) -> Any:
        if self._connection is None and self._connection_problem is None:
            try:
                self._connection = self.connect()
            except Exception as err:  # noqa: BLE001 - recorded as the reason tables are kept
                self._connection_problem = f"{type(err).__name__}: {err}"
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def run_cleanup(
    request: CleanupRequest,
    *,
    dynamodb: Any,
    stream: CleanupStream,
    evidence: Evidence,
    connectors: Sequence[ConnectorUse],
    backups: CleanupBackups,
    owner: str,
) -> dict[str, Any]:
    """Carry out (or, with ``preview_only``, only report) one clean-up; the steps are the module's.

    :param dynamodb: a boto3 DynamoDB client.
    :param stream: Kinesis access (consumers are listed and deregistered through it).
    :param evidence: what is read outside DynamoDB; closed when the run ends.
    :param connectors: the configured connectors of this AWS account and region (one DAG folder's).
    :param backups: where what is deleted is backed up first.
    :param owner: whom the marks and held leases belong to.
    :return: the task's result: candidates, kept, deleted, and where each table's backup went.
    :raises AdminError: when the confirmation is wrong (nothing was deleted).
    """
    try:
        return _Cleanup(request, dynamodb, stream, evidence, connectors, backups, owner).run()
    finally:
        evidence.close()


@dataclass
class _Cleanup:
    request: CleanupRequest
    dynamodb: Any
    stream: CleanupStream
    evidence: Evidence
    uses: Sequence[ConnectorUse]
    backups: CleanupBackups
    owner: str

    def run(self) -> dict[str, Any]:
        now, patterns, retention = time.time(), self.request.patterns, self.request.retention_seconds
        known: dict[str, LeaseTableFacts] = {}
        migrations: list[MigrationTableFacts] = []
        for name in list_table_names(self.dynamodb):
            facts = self._table_facts(name, now)
            if isinstance(facts, MigrationTableFacts):
                migrations.append(facts)
            elif facts is not None:
                known[facts.name] = self.evidence.add_to(facts, patterns)
        # Successors not listed (created or deleted since): read, or confirmed gone with their ledger.
        for facts in list(known.values()):
            if facts.superseded_by:
                self._chain(facts.name, now, known=known)
        tables = list(known.values())
        streams = {u.stream_name for u in self.uses}
        streams |= {t.stream_name for t in tables if t.tagged and t.kinesis and t.stream_name}
        consumers = self._consumers(sorted(streams))
        decisions = plan_cleanup(
            tables=tables,
            migrations=migrations,
            consumers=consumers,
            connectors=self.uses,
            now=now,
            retention_seconds=retention,
            patterns=patterns,
        )
        candidates = [d for d in decisions if d.delete]
        log.info(
            "Clean-up: %d candidates among %d tables and %d fan-out consumers (retention %.1f days, applications %s)",
            len(candidates),
            len(tables) + len(migrations),
            len(consumers),
            retention / 86400,
            ", ".join(patterns),
        )
        for decision in decisions:
            if decision.delete or decision.rule is not Rule.UNTAGGED:
                log.info("  %s", decision.describe())
        result: dict[str, Any] = {
            "dry_run": self.request.preview_only,
            "candidates": [d.to_dict() for d in candidates],
            "kept": [d.to_dict() for d in decisions if not d.delete],
            "deleted": [],
            "backups": {},
        }
        if self.request.preview_only:
            log.info(
                "Dry run: nothing was deleted. To delete, trigger with dry_run false and confirm %r.", CONFIRMATION
            )
            return result
        if self.request.confirm != CONFIRMATION:
            raise AdminError(
                f"confirm must be {CONFIRMATION!r} to delete (got {self.request.confirm!r}); nothing was deleted"
            )
        deleted_tables: set[tuple[str | None, str | None]] = set()
        kept_after_all: set[str] = set()
        for decision in deletion_order(candidates, tables):
            if decision.kind == FAN_OUT_CONSUMER:
                decision = confirm_consumer(decision, deleted_tables)
            successors = walk_chain(decision.resource, known.get, lambda f: f.superseded_by).names[1:]
            decision = confirm_pointer(decision, successors, kept_after_all)
            if not decision.delete:
                log.warning("Kept %s after all: %s", decision.resource, decision.describe())
                kept_after_all.add(decision.resource)
                continue
            pointing = [
                t.name
                for t in tables
                if decision.resource in walk_chain(t.name, known.get, lambda f: f.superseded_by).names[1:]
            ]
            if self._delete(decision, pointing, result["backups"]):
                result["deleted"].append(decision.to_dict())
                if decision.kind == LEASE_TABLE:
                    deleted_tables.add((decision.stream_name, decision.application_name))
            elif decision.kind == LEASE_TABLE:
                kept_after_all.add(decision.resource)
        log.info("Clean-up deleted %d of %d candidates", len(result["deleted"]), len(candidates))
        return result

    # -- facts ----------------------------------------------------------------------------------

    def _table_facts(
        self, name: str, now: float, *, owner: str | None = None
    ) -> LeaseTableFacts | MigrationTableFacts | None:
        """What DynamoDB says of one table; None when it does not exist.

        :param owner: a clean-up working on the table: its own reset mark and held leases are not
            counted as someone else's.
        """
        table = LeaseTable(self.dynamodb, name)
        description = table.describe()
        if description is None:
            return None
        if description.get("TableStatus") != ACTIVE:
            return LeaseTableFacts(name=name, status=str(description.get("TableStatus")))  # decided on next run
        tags = table_tags(self.dynamodb, description["TableArn"])
        if tags.get(CREATED_BY_TAG) != CREATED_BY:
            return LeaseTableFacts(name=name, tags=tags)
        if MIGRATION_OF_TAG in tags:
            return self._migration_facts(name, tags)
        marks = read_marks(self.dynamodb, name)
        if marks is None:
            return LeaseTableFacts(name=name, tags=tags)
        leases = table.leases()
        live = sorted(s for s, lease in leases.items() if lease.is_held(now) and lease.lease_owner != owner)
        reset = marks.live_reset(now)
        return LeaseTableFacts(
            name=name,
            tags=tags,
            application_name=marks.application_name,
            stream_name=marks.stream_name,
            superseded_by=marks.superseded_by,
            live_leases=tuple(live),
            reset_in_progress=reset is not None and reset.owner != owner,
            last_activity=last_activity(marks, leases.values(), table.workers().values()),
            connector_id=marks.connector_id,
            destination=marks.destination,
            last_ingest_at=marks.last_ingest_at,
            stream_arn=marks.stream_arn,
            has_checkpoints=any(lease.checkpoint is not None for lease in leases.values()),
            dynamodb_source_leases=dynamodb_source_keys(leases),
        )

    def _chain(
        self, start: str, now: float, *, known: dict[str, LeaseTableFacts] | None = None, owner: str | None = None
    ) -> list[LeaseTableFacts]:
        """The lease tables from ``start`` along ``superseded_by``, read fresh unless in ``known`` (which
        gets what was read). A successor that does not exist comes back with status :data:`GONE`, the
        destination of the table pointing to it, and its application's last ledger commit there."""
        cache = known if known is not None else {}
        previous: list[LeaseTableFacts] = []

        def lookup(name: str) -> LeaseTableFacts | None:
            facts: LeaseTableFacts | MigrationTableFacts | None = cache.get(name)
            if facts is None:
                facts = self._table_facts(name, now, owner=owner)
                if facts is None and previous:
                    pointer = previous[-1]
                    facts = LeaseTableFacts(
                        name=name,
                        tags={CREATED_BY_TAG: CREATED_BY},
                        application_name=name,
                        stream_name=pointer.stream_name,
                        destination=pointer.destination,
                        stream_arn=pointer.stream_arn,
                        status=GONE,
                    )
                    # Whatever the patterns: a pointer goes only when this is known.
                    facts = self.evidence.add_to(facts, ("*",))
                elif isinstance(facts, LeaseTableFacts):
                    facts = self.evidence.add_to(facts, self.request.patterns)
            if not isinstance(facts, LeaseTableFacts):
                return None  # not there, or a migration copy where a lease table should be: unknown
            cache[name] = facts
            previous.append(facts)
            return facts

        return list(walk_chain(start, lookup, lambda facts: facts.superseded_by).found)

    def _migration_facts(self, name: str, tags: Mapping[str, str]) -> MigrationTableFacts:
        application = tags[MIGRATION_OF_TAG]
        base = MigrationTableFacts(name=name, migration_of=application, tags=tags)
        try:
            state = migration_state(self.dynamodb, application, wait_seconds=0)
            marker = LegacyMigration(self.dynamodb, application, "").marker()
            if state is not MigrationState.WRITING or marker is None:
                return MigrationTableFacts(name, application, tags, state.value)
            translation, _ = LegacyMigration(self.dynamodb, application, marker.stream_name).translation()
            present = LeaseTable(self.dynamodb, application).leases()
        except MigrationError as err:
            log.warning("Migration table %s: %s", name, err)
            return base
        written = all(
            lease.shard_id in present and lease_agrees(present[lease.shard_id], lease) for lease in translation.leases
        )
        return MigrationTableFacts(name, application, tags, state.value, written, marker.migrated_at.timestamp())

    def _consumers(self, streams: Sequence[str]) -> list[ConsumerFacts]:
        consumers: list[ConsumerFacts] = []
        for stream in streams:
            try:
                listed = self.stream.list_consumers(stream)
            except ClientError as err:
                code = error_code(err)
                if code != "ResourceNotFoundException":
                    log.warning("Cannot list the fan-out consumers of stream %s (%s); skipped", stream, code)
                continue
            consumers.extend(
                ConsumerFacts(stream, c["ConsumerName"], c["ConsumerARN"], c.get("ConsumerStatus", "ACTIVE"))
                for c in listed
            )
        return consumers

    # -- deleting -------------------------------------------------------------------------------

    def _delete(self, decision: Decision, pointing: Sequence[str], backups: dict[str, str]) -> bool:
        if decision.kind == FAN_OUT_CONSUMER:
            assert decision.arn is not None
            self.stream.deregister_consumer(decision.arn)
            log.info("Deregistered fan-out consumer %s of stream %s", decision.resource, decision.stream_name)
            return True
        if decision.kind == LEASE_TABLE:
            return self._delete_lease_table(decision, pointing, backups)
        # A migration may have moved on since the plan: decide again on fresh facts.
        now = time.time()
        facts = self._table_facts(decision.resource, now)
        if decision.kind == MIGRATION_TABLE and isinstance(facts, MigrationTableFacts):
            again = decide_migration_table(
                facts, now=now, retention_seconds=self.request.retention_seconds, patterns=self.request.patterns
            )
            if not again.delete:
                log.warning("Kept %s after all: %s", decision.resource, again.describe())
                return False
            items = list(scan_items(self.dynamodb, decision.resource))
            backups[decision.resource] = self.backups.migration_copy(decision.resource, facts.migration_of, items)
            marker = LegacyMigration(self.dynamodb, facts.migration_of, "").marker()
            assert marker is not None  # fully written implies a verified, marked copy
            # The migration's own last step, with its own checks.
            LegacyMigration(self.dynamodb, facts.migration_of, marker.stream_name, wait_seconds=300).drop_copy()
            log.info("Deleted migration table %s (%s)", decision.resource, decision.rule.value)
            return True
        log.warning("Kept %s after all: it changed since the plan", decision.resource)
        return False

    def _delete_lease_table(self, decision: Decision, pointing: Sequence[str], backups: dict[str, str]) -> bool:
        """Mark the table as under maintenance and hold its leases, as a reset does, so that no ingest run
        starts on it; decide again on fresh facts; back it up and delete it, or give it back."""
        name, owner = decision.resource, self.owner
        table = LeaseTable(self.dynamodb, name)
        now = time.time()
        try:
            set_reset_mark(self.dynamodb, name, ResetMark(owner, "cleanup", now, now + LOCK_MARGIN_SECONDS))
        except MaintenanceError as err:
            log.warning("Kept %s after all: %s", name, err)
            return False
        held: dict[str, Any] = {}
        deleted = False
        try:
            try:
                # No waiting: a batch holding a lease means the table is in use.
                held = hold_leases(table, owner, hold_seconds=LOCK_MARGIN_SECONDS, timeout_seconds=0)
            except MaintenanceError as err:
                log.warning("Kept %s after all: %s", name, err)
                return False
            now = time.time()
            fresh: dict[str, LeaseTableFacts] = {}
            # With the tables it leads to (a successor in use keeps it) and those leading to it (a kept one keeps it).
            for start in (name, *pointing):
                self._chain(start, now, known=fresh, owner=owner)
            if name not in fresh:
                log.warning("Kept %s after all: it changed since the plan", name)
                return False
            decided = decide_lease_tables(
                list(fresh.values()),
                self.uses,
                now=now,
                retention_seconds=self.request.retention_seconds,
                patterns=self.request.patterns,
            )
            mine = next(d for d in decided if d.resource == name)
            if not mine.delete:
                log.warning("Kept %s after all: %s", name, mine.describe())
                return False
            backup = snapshot(table, reason="cleanup")
            backups[name] = self.backups.checkpoints(backup)
            log.info(
                "Backed up %s (connector %s, destination %s) to %s",
                name,
                backup.connector_id or "not recorded",
                backup.destination or "not recorded",
                backups[name],
            )
            delete_table(self.dynamodb, name)
            deleted = True
            log.info("Deleted lease table %s (%s)", name, decision.rule.value)
            return True
        finally:
            if not deleted:
                self._give_back(table, held)

    def _give_back(self, table: LeaseTable, held: Mapping[str, Any]) -> None:
        """Release the leases and remove the mark of a table kept after all (best effort: both expire)."""
        try:
            release_leases(table, held.values())
            clear_reset_mark(self.dynamodb, table.table_name, self.owner)
        except (ClientError, BotoCoreError) as err:
            log.warning(
                "Could not give back %s (%s); its mark and leases expire within %d s",
                table.table_name,
                err,
                LOCK_MARGIN_SECONDS,
            )
