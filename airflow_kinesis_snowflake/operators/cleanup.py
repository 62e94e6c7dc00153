"""Remove what connectors left behind: lease tables, migration copies, enhanced fan-out consumers."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowException
from botocore.exceptions import BotoCoreError, ClientError

from airflow_kinesis_snowflake.backups import write_backup, write_checkpoint_backup
from airflow_kinesis_snowflake.core.admin.cleanup import (
    ACTIVE,
    DEFAULT_RETENTION_SECONDS,
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
    in_scope,
    plan_cleanup,
)
from airflow_kinesis_snowflake.core.load.snowflake_sink import SnowflakeSink, destination_from_text
from airflow_kinesis_snowflake.core.model import ConsumerType
from airflow_kinesis_snowflake.core.state.backups import optional_text, snapshot
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
from airflow_kinesis_snowflake.hooks.kinesis import DynamoDBTablesHook, KinesisStreamHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.operators.reset import LOCK_MARGIN_SECONDS, as_bool, as_number, maintenance_owner

CONFIRMATION = "DELETE"


class CleanupOrphanedTablesOperator(BaseOperator):
    """Find, and on request remove, lease tables, migration copies and fan-out consumers no connector uses.

    Candidates, each reported with the rule that matched:

    * ``orphaned-lease-table`` / ``superseded-lease-table``: a lease table tagged as this provider's
      whose application is neither active nor configured for any connector, with no live lease and
      no heartbeat, checkpoint, ingest run, ledger commit or supersession within the retention;
    * ``leftover-migration-table``: a ``<application>_migration`` copy whose migration wrote every
      lease into the new table (never while a migration is under way);
    * ``unused-fan-out-consumer``: a consumer named after such a lease table's application;
    * ``connector-not-enhanced-fan-out``: a consumer named after an application of a connector that
      now reads with SHARED_THROUGHPUT.

    Never touched: untagged tables, tables with a live lease or a running reset, the active and
    configured application of this DAG's connectors, and consumers whose name is no application
    this provider knows. Whether a table is in use is read from the table and the ledger, not only
    from ``connectors``, so that a connector in another DAG folder keeps its table: a checkpoint,
    heartbeat, ingest run (``last_ingest_at`` of its metadata item) or ledger commit
    (``UPDATED_AT`` of ``KINESIS_INGEST_LEDGER`` in the schema of the destination its metadata item
    names) within ``retention_days``, or within the stream's retention period plus a day if that is
    longer, keeps it; so does a stream or ledger that cannot be read, a destination not recorded,
    and checkpoints with no commit of the application in that ledger. A superseded table stays
    while the table it leads to is kept, not ACTIVE, or gone with a recent ledger commit; every
    table a kept table leads to stays. A dry run (the default) only reports. To delete,
    ``confirm`` must be ``DELETE``; each lease table is then marked as under maintenance and its
    leases held (ingest runs skip it), decided on again, backed up and deleted; a consumer that
    follows its lease table goes only once that table went.

    :param connectors: the configured connectors of this AWS connection and region, as mappings
        with ``connector_id``, ``application_name``, ``stream_name`` and ``consumer_type``.
    :param retention_days: how long an unused lease table is kept after its last activity.
    :param application_name_patterns: glob patterns of application names clean-up may consider
        (default all); narrow it when several deployments share an AWS account and region.
    :param preview_only: only report, delete nothing (default; the DAG's ``dry_run``).
    :param confirm: must be ``DELETE`` to delete.
    :param backup_dir: directory path or URL for the backups.
    :param aws_conn_id: the Airflow AWS connection.
    :param region_name: AWS region; defaults to the connection's.
    :param snowflake_conn_id: the Airflow Snowflake connection the ledgers are read through.
    """

    template_fields: Sequence[str] = (
        "retention_days",
        "application_name_patterns",
        "preview_only",
        "confirm",
        "backup_dir",
        "aws_conn_id",
        "region_name",
        "snowflake_conn_id",
    )
    ui_color = "#ffc9c9"

    def __init__(
        self,
        *,
        connectors: Sequence[Mapping[str, Any]],
        retention_days: float | str = DEFAULT_RETENTION_SECONDS / 86400,
        application_name_patterns: Sequence[str] | str = ("*",),
        preview_only: bool | str = True,
        confirm: str | None = None,
        backup_dir: str | None = None,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        snowflake_conn_id: str = "snowflake_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.connectors = connectors
        self.snowflake_conn_id = snowflake_conn_id
        self.retention_days = retention_days
        self.application_name_patterns = application_name_patterns
        self.preview_only = preview_only
        self.confirm = confirm
        self.backup_dir = backup_dir
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name

    def _patterns(self) -> list[str]:
        value = self.application_name_patterns
        if isinstance(value, str):
            # A Param rendered through a template (``| tojson``) arrives as JSON text.
            text = value.strip()
            try:
                value = json.loads(text) if text.startswith("[") else text.split(",")
            except json.JSONDecodeError:
                raise AirflowException(f"application_name_patterns is not a list: {text!r}") from None
        patterns = [str(p).strip() for p in value if str(p).strip()]
        if not patterns:
            raise AirflowException("application_name_patterns is empty: give at least one pattern, e.g. '*'")
        return patterns

    def execute(self, context: Context) -> dict[str, Any]:
        preview_only = as_bool(self.preview_only, "preview_only")
        retention = as_number(self.retention_days, "retention_days") * 86400
        patterns = self._patterns()
        dynamodb = DynamoDBTablesHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).conn
        kinesis = KinesisStreamHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        now = time.time()
        uses = [self._use(dynamodb, connector) for connector in self.connectors]
        evidence = _Evidence(kinesis.conn, self.snowflake_conn_id)
        owner = maintenance_owner(context, "cleanup")
        try:
            return self._run(dynamodb, kinesis, evidence, uses, now, preview_only, retention, patterns, owner)
        finally:
            evidence.close()

    def _run(
        self,
        dynamodb: Any,
        kinesis: KinesisStreamHook,
        evidence: _Evidence,
        uses: Sequence[ConnectorUse],
        now: float,
        preview_only: bool,
        retention: float,
        patterns: Sequence[str],
        owner: str,
    ) -> dict[str, Any]:
        known: dict[str, LeaseTableFacts] = {}
        migrations: list[MigrationTableFacts] = []
        for name in list_table_names(dynamodb):
            facts = self._table_facts(dynamodb, name, now)
            if isinstance(facts, MigrationTableFacts):
                migrations.append(facts)
            elif facts is not None:
                known[facts.name] = evidence.add_to(facts, patterns)
        # Successors not listed (created or deleted since): read, or confirmed gone with their ledger.
        for facts in list(known.values()):
            if facts.superseded_by:
                self._chain(dynamodb, evidence, facts.name, now, patterns, known=known)
        tables = list(known.values())
        streams = {use.stream_name for use in uses} | {t.stream_name for t in tables if t.tagged and t.stream_name}
        consumers = self._consumers(kinesis, sorted(streams))
        decisions = plan_cleanup(
            tables=tables,
            migrations=migrations,
            consumers=consumers,
            connectors=uses,
            now=now,
            retention_seconds=retention,
            patterns=patterns,
        )
        candidates = [d for d in decisions if d.delete]
        self.log.info(
            "Clean-up: %d candidates among %d tables and %d fan-out consumers (retention %.1f days, applications %s)",
            len(candidates),
            len(tables) + len(migrations),
            len(consumers),
            retention / 86400,
            ", ".join(patterns),
        )
        for decision in decisions:
            if decision.delete or decision.rule is not Rule.UNTAGGED:
                self.log.info("  %s", decision.describe())
        result: dict[str, Any] = {
            "dry_run": preview_only,
            "candidates": [d.to_dict() for d in candidates],
            "kept": [d.to_dict() for d in decisions if not d.delete],
            "deleted": [],
            "backups": {},
        }
        if preview_only:
            self.log.info(
                "Dry run: nothing was deleted. To delete, trigger with dry_run false and confirm %r.", CONFIRMATION
            )
            return result
        if optional_text(self.confirm) != CONFIRMATION:
            raise AirflowException(
                f"confirm must be {CONFIRMATION!r} to delete (got {self.confirm!r}); nothing was deleted"
            )
        deleted_tables: set[tuple[str | None, str | None]] = set()
        kept_after_all: set[str] = set()
        for decision in deletion_order(candidates, tables):
            if decision.kind == FAN_OUT_CONSUMER:
                decision = confirm_consumer(decision, deleted_tables)
            successors = walk_chain(decision.resource, known.get, lambda f: f.superseded_by).names[1:]
            decision = confirm_pointer(decision, successors, kept_after_all)
            if not decision.delete:
                self.log.warning("Kept %s after all: %s", decision.resource, decision.describe())
                kept_after_all.add(decision.resource)
                continue
            pointing = [
                t.name
                for t in tables
                if decision.resource in walk_chain(t.name, known.get, lambda f: f.superseded_by).names[1:]
            ]
            if self._delete(
                dynamodb, kinesis, evidence, decision, uses, retention, patterns, owner, pointing, result["backups"]
            ):
                result["deleted"].append(decision.to_dict())
                if decision.kind == LEASE_TABLE:
                    deleted_tables.add((decision.stream_name, decision.application_name))
            elif decision.kind == LEASE_TABLE:
                kept_after_all.add(decision.resource)
        self.log.info("Clean-up deleted %d of %d candidates", len(result["deleted"]), len(candidates))
        return result

    # -- facts ----------------------------------------------------------------------------------

    def _use(self, client: Any, connector: Mapping[str, Any]) -> ConnectorUse:
        configured = str(connector["application_name"])
        try:
            active = resolve_application(client, configured).active
        except MaintenanceError as err:
            # Its configured table is kept anyway; the broken pointer is for a restore to repair.
            self.log.warning("Connector %s: %s", connector["connector_id"], err)
            active = configured
        return ConnectorUse(
            connector_id=str(connector["connector_id"]),
            stream_name=str(connector["stream_name"]),
            configured_application=configured,
            active_application=active,
            enhanced_fan_out=str(connector.get("consumer_type", "")) == ConsumerType.ENHANCED_FAN_OUT,
        )

    def _table_facts(
        self, client: Any, name: str, now: float, *, owner: str | None = None
    ) -> LeaseTableFacts | MigrationTableFacts | None:
        """What DynamoDB says of one table; None when it does not exist.

        :param owner: a clean-up working on the table: its own reset mark and held leases are not
            counted as someone else's.
        """
        table = LeaseTable(client, name)
        description = table.describe()
        if description is None:
            return None
        if description.get("TableStatus") != ACTIVE:
            return LeaseTableFacts(name=name, status=str(description.get("TableStatus")))  # decided on next run
        tags = table_tags(client, description["TableArn"])
        if tags.get(CREATED_BY_TAG) != CREATED_BY:
            return LeaseTableFacts(name=name, tags=tags)
        if MIGRATION_OF_TAG in tags:
            return self._migration_facts(client, name, tags)
        marks = read_marks(client, name)
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
        )

    def _chain(
        self,
        client: Any,
        evidence: _Evidence,
        start: str,
        now: float,
        patterns: Sequence[str],
        *,
        known: dict[str, LeaseTableFacts] | None = None,
        owner: str | None = None,
    ) -> list[LeaseTableFacts]:
        """The lease tables from ``start`` along ``superseded_by``, read fresh unless in ``known`` (which
        gets what was read). A successor that does not exist comes back with status :data:`GONE`, the
        destination of the table pointing to it, and its application's last ledger commit there."""
        cache = known if known is not None else {}
        previous: list[LeaseTableFacts] = []

        def lookup(name: str) -> LeaseTableFacts | None:
            facts: LeaseTableFacts | MigrationTableFacts | None = cache.get(name)
            if facts is None:
                facts = self._table_facts(client, name, now, owner=owner)
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
                    facts = evidence.add_to(facts, ("*",))
                elif isinstance(facts, LeaseTableFacts):
                    facts = evidence.add_to(facts, patterns)
            if not isinstance(facts, LeaseTableFacts):
                return None  # not there, or a migration copy where a lease table should be: unknown
            cache[name] = facts
            previous.append(facts)
            return facts

        return list(walk_chain(start, lookup, lambda facts: facts.superseded_by).found)

    def _migration_facts(self, client: Any, name: str, tags: Mapping[str, str]) -> MigrationTableFacts:
        application = tags[MIGRATION_OF_TAG]
        base = MigrationTableFacts(name=name, migration_of=application, tags=tags)
        try:
            state = migration_state(client, application, wait_seconds=0)
            marker = LegacyMigration(client, application, "").marker()
            if state is not MigrationState.WRITING or marker is None:
                return MigrationTableFacts(name, application, tags, state.value)
            translation, _ = LegacyMigration(client, application, marker.stream_name).translation()
            present = LeaseTable(client, application).leases()
        except MigrationError as err:
            self.log.warning("Migration table %s: %s", name, err)
            return base
        written = all(
            lease.shard_id in present and lease_agrees(present[lease.shard_id], lease) for lease in translation.leases
        )
        return MigrationTableFacts(name, application, tags, state.value, written, marker.migrated_at.timestamp())

    def _consumers(self, kinesis: KinesisStreamHook, streams: Sequence[str]) -> list[ConsumerFacts]:
        consumers: list[ConsumerFacts] = []
        for stream in streams:
            try:
                listed = kinesis.list_consumers(stream)
            except ClientError as err:
                code = err.response.get("Error", {}).get("Code", "")
                if code != "ResourceNotFoundException":
                    self.log.warning("Cannot list the fan-out consumers of stream %s (%s); skipped", stream, code)
                continue
            consumers.extend(
                ConsumerFacts(stream, c["ConsumerName"], c["ConsumerARN"], c.get("ConsumerStatus", "ACTIVE"))
                for c in listed
            )
        return consumers

    # -- deleting -------------------------------------------------------------------------------

    def _delete(
        self,
        dynamodb: Any,
        kinesis: KinesisStreamHook,
        evidence: _Evidence,
        decision: Decision,
        uses: Sequence[ConnectorUse],
        retention: float,
        patterns: Sequence[str],
        owner: str,
        pointing: Sequence[str],
        backups: dict[str, str],
    ) -> bool:
        if decision.kind == FAN_OUT_CONSUMER:
            assert decision.arn is not None
            kinesis.deregister_consumer(decision.arn)
            self.log.info("Deregistered fan-out consumer %s of stream %s", decision.resource, decision.stream_name)
            return True
        if decision.kind == LEASE_TABLE:
            return self._delete_lease_table(
                dynamodb, evidence, decision, uses, retention, patterns, owner, pointing, backups
            )
        # A migration may have moved on since the plan: decide again on fresh facts.
        now = time.time()
        facts = self._table_facts(dynamodb, decision.resource, now)
        if decision.kind == MIGRATION_TABLE and isinstance(facts, MigrationTableFacts):
            again = decide_migration_table(facts, now=now, retention_seconds=retention, patterns=patterns)
            if not again.delete:
                self.log.warning("Kept %s after all: %s", decision.resource, again.describe())
                return False
            document = {
                "format": "airflow-kinesis-snowflake/migration-copy",
                "table_name": decision.resource,
                "migration_of": facts.migration_of,
                "created_at": datetime.now(UTC).isoformat(),
                "items": list(scan_items(dynamodb, decision.resource)),
            }
            name = f"{facts.migration_of}/{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}-cleanup-migration-copy.json"
            backups[decision.resource] = write_backup(json.dumps(document, indent=2), name, self.backup_dir)
            marker = LegacyMigration(dynamodb, facts.migration_of, "").marker()
            assert marker is not None  # fully written implies a verified, marked copy
            # The migration's own last step, with its own checks.
            LegacyMigration(dynamodb, facts.migration_of, marker.stream_name, wait_seconds=300).drop_copy()
            self.log.info("Deleted migration table %s (%s)", decision.resource, decision.rule.value)
            return True
        self.log.warning("Kept %s after all: it changed since the plan", decision.resource)
        return False

    def _delete_lease_table(
        self,
        dynamodb: Any,
        evidence: _Evidence,
        decision: Decision,
        uses: Sequence[ConnectorUse],
        retention: float,
        patterns: Sequence[str],
        owner: str,
        pointing: Sequence[str],
        backups: dict[str, str],
    ) -> bool:
        """Mark the table as under maintenance and hold its leases, as a reset does, so that no ingest run
        starts on it; decide again on fresh facts; back it up and delete it, or give it back."""
        name = decision.resource
        table = LeaseTable(dynamodb, name)
        now = time.time()
        try:
            set_reset_mark(dynamodb, name, ResetMark(owner, "cleanup", now, now + LOCK_MARGIN_SECONDS))
        except MaintenanceError as err:
            self.log.warning("Kept %s after all: %s", name, err)
            return False
        held: dict[str, Any] = {}
        deleted = False
        try:
            try:
                # No waiting: a batch holding a lease means the table is in use.
                held = hold_leases(table, owner, hold_seconds=LOCK_MARGIN_SECONDS, timeout_seconds=0)
            except MaintenanceError as err:
                self.log.warning("Kept %s after all: %s", name, err)
                return False
            now = time.time()
            fresh: dict[str, LeaseTableFacts] = {}
            # With the tables it leads to (a successor in use keeps it) and those leading to it (a kept one keeps it).
            for start in (name, *pointing):
                self._chain(dynamodb, evidence, start, now, patterns, known=fresh, owner=owner)
            if name not in fresh:
                self.log.warning("Kept %s after all: it changed since the plan", name)
                return False
            decided = decide_lease_tables(
                list(fresh.values()), uses, now=now, retention_seconds=retention, patterns=patterns
            )
            mine = next(d for d in decided if d.resource == name)
            if not mine.delete:
                self.log.warning("Kept %s after all: %s", name, mine.describe())
                return False
            backup = snapshot(table, reason="cleanup")
            backups[name] = write_checkpoint_backup(backup, self.backup_dir)
            self.log.info(
                "Backed up %s (connector %s, destination %s) to %s",
                name,
                backup.connector_id or "not recorded",
                backup.destination or "not recorded",
                backups[name],
            )
            delete_table(dynamodb, name)
            deleted = True
            self.log.info("Deleted lease table %s (%s)", name, decision.rule.value)
            return True
        finally:
            if not deleted:
                self._give_back(dynamodb, table, held, owner)

    def _give_back(self, dynamodb: Any, table: LeaseTable, held: Mapping[str, Any], owner: str) -> None:
        """Release the leases and remove the mark of a table kept after all (best effort: both expire)."""
        try:
            release_leases(table, held.values())
            clear_reset_mark(dynamodb, table.table_name, owner)
        except (ClientError, BotoCoreError) as err:
            self.log.warning(
                "Could not give back %s (%s); its mark and leases expire within %d s",
                table.table_name,
                err,
                LOCK_MARGIN_SECONDS,
            )


class _Evidence:
    """What clean-up reads outside DynamoDB to tell a table in use: stream retention periods and ledger commits.

    Each stream is described once per run; the Snowflake connection is opened on the first ledger
    read and closed by :meth:`close`. A read that fails is recorded as the reason the table is kept.

    :param kinesis: a boto3 Kinesis client.
    :param snowflake_conn_id: the Airflow Snowflake connection the ledgers are read through.
    """

    def __init__(self, kinesis: Any, snowflake_conn_id: str) -> None:
        self.kinesis = kinesis
        self.snowflake_conn_id = snowflake_conn_id
        self._streams: dict[str, tuple[float | None, str | None]] = {}
        self._connection: Any = None
        self._connection_problem: str | None = None

    def add_to(self, facts: LeaseTableFacts, patterns: Sequence[str]) -> LeaseTableFacts:
        """``facts`` with the stream's retention period and the ledger's last commit of its application.

        Only for this provider's tables with a metadata item, in scope: nothing else is decided on them.
        """
        if not facts.tagged or facts.application_name is None or not in_scope(facts.application_name, patterns):
            return facts
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
            return None, f"cannot connect to Snowflake through {self.snowflake_conn_id!r}: {self._connection_problem}"
        try:
            updated = SnowflakeSink(connection, target).last_ledger_update(application)
        except Exception as err:  # noqa: BLE001 - any failure means: not known to be idle
            return None, f"reading the ledger {target.database}.{target.schema}.KINESIS_INGEST_LEDGER failed: {err}"
        return (updated.timestamp() if updated is not None else None), None

    def _connect(self) -> Any:
        if self._connection is None and self._connection_problem is None:
            try:
                self._connection = KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id).get_conn()
            except Exception as err:  # noqa: BLE001 - recorded as the reason tables are kept
                self._connection_problem = f"{type(err).__name__}: {err}"
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
