"""Which lease tables, migration tables and fan-out consumers clean-up may remove, and why.

Pure functions over facts gathered by the clean-up operator, so every rule is tested without AWS.
Each resource gets one :class:`Decision`: delete it under a named rule, or keep it for a named
reason. The reasons to keep are checked first, and some are absolute:

* a table without this provider's ``created-by`` tag is never touched;
* a table with a live lease (a batch holds a shard) is never touched;
* a table a reset or restore is working on is never touched;
* the active and the configured application of any connector are never removed (the configured
  table holds the pointer to the active one after a reset to a new name);
* whether a table is in use is decided from the table itself and from the exactly-once ledger,
  not from the connectors one DAG folder knows: a checkpoint, heartbeat, ingest run or ledger
  commit within the retention keeps it, and the retention is never shorter than the stream's
  own retention period. When that cannot be established (the stream or the ledger cannot be
  read, the table does not say where its ledger is), the table is kept and the reason given;
* a superseded table is kept while the table it points to is kept: some connector, perhaps in
  another DAG folder, may start from it;
* a ``<application>_migration`` table is removed only once the migration wrote every lease into
  the new table, never while the copy is the only place some checkpoint lives;
* a fan-out consumer is removed only when its name is an application this provider knows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any

from airflow_kinesis_snowflake.core.leases import APPLICATION_TAG, CREATED_BY, CREATED_BY_TAG

DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600

LEASE_TABLE = "lease-table"
MIGRATION_TABLE = "migration-table"
FAN_OUT_CONSUMER = "fan-out-consumer"


class Rule(StrEnum):
    """Why a resource is removed (the first five) or kept (the others)."""

    ORPHANED_LEASE_TABLE = "orphaned-lease-table"
    SUPERSEDED_LEASE_TABLE = "superseded-lease-table"
    LEFTOVER_MIGRATION_TABLE = "leftover-migration-table"
    UNUSED_FAN_OUT_CONSUMER = "unused-fan-out-consumer"
    NOT_ENHANCED_FAN_OUT = "connector-not-enhanced-fan-out"

    UNTAGGED = "untagged"
    OUT_OF_SCOPE = "out-of-scope"
    NO_METADATA = "no-metadata"
    LIVE_LEASE = "live-lease"
    RESET_IN_PROGRESS = "reset-in-progress"
    ACTIVE_APPLICATION = "active-application"
    CONFIGURED_APPLICATION = "configured-application"
    WITHIN_RETENTION = "within-retention"
    MIGRATION_IN_PROGRESS = "migration-in-progress"
    CONSUMER_IN_USE = "consumer-in-use"
    CONSUMER_NOT_ACTIVE = "consumer-not-active"
    UNKNOWN_CONSUMER = "unknown-consumer"
    RECENT_INGEST_RUN = "recent-ingest-run"
    RECENT_LOAD = "recent-load"
    STREAM_UNKNOWN = "stream-unknown"
    LEDGER_UNREADABLE = "ledger-unreadable"
    POINTS_TO_LIVE_TABLE = "points-to-live-table"

    @property
    def deletes(self) -> bool:
        return self in _DELETE_RULES


_DELETE_RULES = frozenset(
    {
        Rule.ORPHANED_LEASE_TABLE,
        Rule.SUPERSEDED_LEASE_TABLE,
        Rule.LEFTOVER_MIGRATION_TABLE,
        Rule.UNUSED_FAN_OUT_CONSUMER,
        Rule.NOT_ENHANCED_FAN_OUT,
    }
)


@dataclass(frozen=True)
class ConnectorUse:
    """What one configured connector uses.

    :param configured_application: the application name in its connector file.
    :param active_application: the one its ingestions use (after a reset, the new name).
    """

    connector_id: str
    stream_name: str
    configured_application: str
    active_application: str
    enhanced_fan_out: bool = False

    @property
    def applications(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.active_application, self.configured_application)))


@dataclass(frozen=True)
class LeaseTableFacts:
    """One DynamoDB table as clean-up sees it.

    :param tags: the table's tags (empty: not created by this provider).
    :param application_name: from its metadata item; None when it has none.
    :param live_leases: shard ids whose lease is held now.
    :param last_activity: epoch seconds of the last checkpoint, heartbeat, supersession or creation.
    :param connector_id: the connector its metadata item names (None: not recorded).
    :param destination: ``DATABASE.SCHEMA.TABLE`` its metadata item names; its ledger is in that schema.
    :param stream_arn: the ARN of the stream its metadata item records; its retention is read from there.
    :param last_ingest_at: epoch seconds of the last ingest run its metadata item records.
    :param stream_retention_seconds: the stream's retention period (DescribeStreamSummary
        ``RetentionPeriodHours``); None when it could not be read.
    :param stream_problem: why the stream's retention period could not be read.
    :param last_load_at: epoch seconds of the latest ledger commit of its application (the ledger's
        ``UPDATED_AT``); None when the ledger has none or could not be read.
    :param ledger_problem: why the ledger could not be read (None: it was read).
    """

    name: str
    tags: Mapping[str, str] = field(default_factory=dict)
    application_name: str | None = None
    stream_name: str | None = None
    superseded_by: str | None = None
    live_leases: tuple[str, ...] = ()
    reset_in_progress: bool = False
    last_activity: float | None = None
    connector_id: str | None = None
    destination: str | None = None
    stream_arn: str | None = None
    last_ingest_at: float | None = None
    stream_retention_seconds: float | None = None
    stream_problem: str | None = None
    last_load_at: float | None = None
    ledger_problem: str | None = None

    @property
    def tagged(self) -> bool:
        return self.tags.get(CREATED_BY_TAG) == CREATED_BY


@dataclass(frozen=True)
class MigrationTableFacts:
    """A ``<application>_migration`` table and where its migration stands.

    :param state: :class:`~.migration.MigrationState` value of the migration, or None if unreadable.
    :param fully_written: every migrated lease is in the new table (only the copy is left to drop).
    :param migrated_at: epoch seconds when the copy was verified, if it was.
    """

    name: str
    migration_of: str
    tags: Mapping[str, str] = field(default_factory=dict)
    state: str | None = None
    fully_written: bool = False
    migrated_at: float | None = None

    @property
    def tagged(self) -> bool:
        return self.tags.get(CREATED_BY_TAG) == CREATED_BY


@dataclass(frozen=True)
class ConsumerFacts:
    stream_name: str
    consumer_name: str
    consumer_arn: str
    status: str = "ACTIVE"


@dataclass(frozen=True)
class Decision:
    """Delete or keep one resource, by the rule that matched."""

    kind: str
    resource: str
    rule: Rule
    detail: str
    application_name: str | None = None
    stream_name: str | None = None
    arn: str | None = None

    @property
    def delete(self) -> bool:
        return self.rule.deletes

    def describe(self) -> str:
        verb = "DELETE" if self.delete else "keep"
        return f"{verb} {self.kind} {self.resource} [{self.rule.value}]: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "resource": self.resource,
            "delete": self.delete,
            "rule": self.rule.value,
            "detail": self.detail,
            "application_name": self.application_name,
            "stream_name": self.stream_name,
            "arn": self.arn,
        }


def in_scope(name: str, patterns: Sequence[str]) -> bool:
    """True when ``name`` matches one of the glob ``patterns`` (case-sensitive, like table names)."""
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def _users(connectors: Iterable[ConnectorUse], application: str) -> tuple[list[str], list[str]]:
    active = [c.connector_id for c in connectors if c.active_application == application]
    configured = [c.connector_id for c in connectors if c.configured_application == application]
    return active, configured


def _age(seconds: float) -> str:
    days = seconds / 86400
    return f"{days:.1f} days" if days >= 1 else f"{seconds / 3600:.1f} hours"


def decide_lease_table(
    facts: LeaseTableFacts,
    connectors: Sequence[ConnectorUse],
    *,
    now: float,
    retention_seconds: float = DEFAULT_RETENTION_SECONDS,
    patterns: Sequence[str] = ("*",),
) -> Decision:
    """Delete a lease table only when it is this provider's, idle, unused and older than the retention."""

    def keep(rule: Rule, detail: str) -> Decision:
        return Decision(LEASE_TABLE, facts.name, rule, detail, facts.application_name, facts.stream_name)

    if not facts.tagged:
        return keep(Rule.UNTAGGED, f"not tagged {CREATED_BY_TAG}={CREATED_BY}: not this provider's table")
    application = facts.application_name or facts.tags.get(APPLICATION_TAG) or facts.name
    if not in_scope(application, patterns):
        return keep(Rule.OUT_OF_SCOPE, f"application {application!r} matches none of {list(patterns)}")
    if facts.application_name is None:
        return keep(Rule.NO_METADATA, "no metadata item: being created, or not a lease table this provider can read")
    if facts.live_leases:
        return keep(Rule.LIVE_LEASE, f"leases held now on {', '.join(facts.live_leases)}")
    if facts.reset_in_progress:
        return keep(Rule.RESET_IN_PROGRESS, "a reset or restore is working on it")
    active, configured = _users(connectors, application)
    if active:
        return keep(Rule.ACTIVE_APPLICATION, f"active application of connector {', '.join(active)}")
    if configured:
        points = f"; it points to the active table {facts.superseded_by!r}" if facts.superseded_by else ""
        return keep(Rule.CONFIGURED_APPLICATION, f"configured application of connector {', '.join(configured)}{points}")
    kept = _in_use(facts, now=now, retention_seconds=retention_seconds)
    if kept is not None:
        return keep(*kept)
    retention = effective_retention(facts, retention_seconds)
    idle = now - (facts.last_activity or 0.0)
    if facts.superseded_by:
        rule, why = Rule.SUPERSEDED_LEASE_TABLE, f"superseded by {facts.superseded_by!r} (a reset)"
    else:
        rule, why = Rule.ORPHANED_LEASE_TABLE, "no configured connector uses this application"
    detail = f"{why}; no live lease; last used {_age(idle)} ago (retention {_age(retention)}"
    detail += f"{_retention_source(facts, retention_seconds)}); {_ledger_text(facts, now)}"
    return Decision(LEASE_TABLE, facts.name, rule, detail, facts.application_name, facts.stream_name)


def effective_retention(facts: LeaseTableFacts, retention_seconds: float) -> float:
    """The retention applied to a table: the one asked for, never shorter than its stream's retention period."""
    return max(retention_seconds, facts.stream_retention_seconds or 0.0)


def _retention_source(facts: LeaseTableFacts, retention_seconds: float) -> str:
    stream = facts.stream_retention_seconds
    if stream is not None and stream > retention_seconds:
        return (
            f": the retention period of stream {facts.stream_name!r}, longer than the {_age(retention_seconds)} asked"
        )
    return ""


def _ledger_text(facts: LeaseTableFacts, now: float) -> str:
    if facts.last_load_at is None:
        return f"the ledger of {facts.destination} holds no commit of this application"
    return f"last ledger commit {_age(now - facts.last_load_at)} ago"


def _in_use(facts: LeaseTableFacts, *, now: float, retention_seconds: float) -> tuple[Rule, str] | None:
    """Why a table no configured connector of this folder names is still in use, or not known to be idle.

    Evidence read from the table and the ledger, so that a connector in another DAG folder (or
    another deployment) keeps its table: a checkpoint or heartbeat, an ingest run, a ledger
    commit within the retention. The retention is never shorter than the stream's retention
    period: a table removed earlier would be created again at its initial position and read
    records it already loaded. Missing evidence keeps the table, naming what could not be read.
    """
    retention = effective_retention(facts, retention_seconds)
    within = f"within the retention of {_age(retention)}{_retention_source(facts, retention_seconds)}"
    idle = now - (facts.last_activity or 0.0)
    if idle < retention:
        return Rule.WITHIN_RETENTION, f"last checkpoint, heartbeat or supersession {_age(idle)} ago, {within}"
    if facts.last_ingest_at is not None and now - facts.last_ingest_at < retention:
        ran = _age(now - facts.last_ingest_at)
        owner = f" of connector {facts.connector_id}" if facts.connector_id else ""
        return Rule.RECENT_INGEST_RUN, f"an ingest run{owner} used it {ran} ago, {within}"
    if facts.ledger_problem is None and facts.last_load_at is not None and now - facts.last_load_at < retention:
        return Rule.RECENT_LOAD, (
            f"the ledger of {facts.destination} has a commit of this application {_age(now - facts.last_load_at)} "
            f"ago, {within}"
        )
    if facts.stream_retention_seconds is None:
        problem = facts.stream_problem or "not read"
        return Rule.STREAM_UNKNOWN, (
            f"the retention period of stream {facts.stream_name!r} is unknown ({problem}), so clean-up cannot tell "
            "whether the table is still needed; it is kept"
        )
    if facts.ledger_problem is not None:
        return Rule.LEDGER_UNREADABLE, (
            f"cannot tell whether records were loaded recently: {facts.ledger_problem}; it is kept"
        )
    return None


def decide_migration_table(
    facts: MigrationTableFacts,
    *,
    now: float,
    retention_seconds: float = DEFAULT_RETENTION_SECONDS,
    patterns: Sequence[str] = ("*",),
) -> Decision:
    """Delete a migration copy only when its migration is finished except for dropping the copy."""

    def decide(rule: Rule, detail: str) -> Decision:
        return Decision(MIGRATION_TABLE, facts.name, rule, detail, facts.migration_of)

    if not facts.tagged:
        return decide(Rule.UNTAGGED, f"not tagged {CREATED_BY_TAG}={CREATED_BY}: not this provider's table")
    if not in_scope(facts.migration_of, patterns):
        return decide(Rule.OUT_OF_SCOPE, f"application {facts.migration_of!r} matches none of {list(patterns)}")
    if facts.state != "WRITING" or not facts.fully_written:
        where = facts.state or "unknown"
        return decide(
            Rule.MIGRATION_IN_PROGRESS,
            f"migration of {facts.migration_of!r} is at {where}; the copy may hold the only checkpoints "
            "(the provisioning DAG finishes it)",
        )
    idle = now - (facts.migrated_at or 0.0)
    if idle < retention_seconds:
        return decide(Rule.WITHIN_RETENTION, f"migrated {_age(idle)} ago, within the retention")
    return decide(
        Rule.LEFTOVER_MIGRATION_TABLE,
        f"the migration of {facts.migration_of!r} wrote every lease into the new table; only this copy was left",
    )


def decide_consumer(
    consumer: ConsumerFacts,
    connectors: Sequence[ConnectorUse],
    table_decisions: Mapping[tuple[str, str], Decision],
    *,
    patterns: Sequence[str] = ("*",),
) -> Decision:
    """Deregister a consumer named after an application no enhanced fan-out connector uses.

    :param table_decisions: the lease-table decisions by (stream name, application name).
    """

    def decide(rule: Rule, detail: str) -> Decision:
        return Decision(
            FAN_OUT_CONSUMER,
            consumer.consumer_name,
            rule,
            detail,
            consumer.consumer_name,
            consumer.stream_name,
            consumer.consumer_arn,
        )

    name, stream = consumer.consumer_name, consumer.stream_name
    if consumer.status != "ACTIVE":
        return decide(Rule.CONSUMER_NOT_ACTIVE, f"status {consumer.status}")
    if not in_scope(name, patterns):
        return decide(Rule.OUT_OF_SCOPE, f"matches none of {list(patterns)}")
    on_stream = [c for c in connectors if c.stream_name == stream and name in c.applications]
    fan_out = [c.connector_id for c in on_stream if c.enhanced_fan_out]
    if fan_out:
        return decide(Rule.CONSUMER_IN_USE, f"application of enhanced fan-out connector {', '.join(fan_out)}")
    if on_stream:
        ids = ", ".join(c.connector_id for c in on_stream)
        return decide(Rule.NOT_ENHANCED_FAN_OUT, f"connector {ids} reads with SHARED_THROUGHPUT; nothing uses it")
    table = table_decisions.get((stream, name))
    if table is None:
        return decide(Rule.UNKNOWN_CONSUMER, "no lease table of this provider has this application name")
    if table.delete:
        return decide(Rule.UNUSED_FAN_OUT_CONSUMER, f"its lease table goes too: {table.detail}")
    return decide(table.rule, f"its lease table is kept: {table.detail}")


def decide_lease_tables(
    tables: Sequence[LeaseTableFacts],
    connectors: Sequence[ConnectorUse],
    *,
    now: float,
    retention_seconds: float = DEFAULT_RETENTION_SECONDS,
    patterns: Sequence[str] = ("*",),
) -> list[Decision]:
    """:func:`decide_lease_table` for each table, by name, and a superseded table kept while its successor is.

    After a reset to a new name, the connector file's table holds the pointer to the active one and
    every ingest run starts there. Clean-up cannot tell from the table whether some connector file
    (in another DAG folder, perhaps) names it, so a superseded table goes only with, or after, the
    table it points to.
    """
    ordered = sorted(tables, key=lambda t: t.name)
    decisions = {
        t.name: decide_lease_table(t, connectors, now=now, retention_seconds=retention_seconds, patterns=patterns)
        for t in ordered
    }
    by_name = {t.name: t for t in ordered}

    def kept_successor(facts: LeaseTableFacts) -> Decision | None:
        seen = {facts.name}
        following = facts.superseded_by
        while following is not None and following not in seen and following in by_name:
            decision = decisions[following]
            if not decision.delete:
                return decision
            seen.add(following)
            following = by_name[following].superseded_by
        return None

    result = []
    for facts in ordered:
        decision = decisions[facts.name]
        if decision.delete and facts.superseded_by:
            successor = kept_successor(facts)
            if successor is not None:
                decision = Decision(
                    LEASE_TABLE,
                    facts.name,
                    Rule.POINTS_TO_LIVE_TABLE,
                    f"superseded by {facts.superseded_by!r}, and lease table {successor.resource!r} it leads to is "
                    f"kept [{successor.rule.value}]: a connector configured with {facts.name!r} starts here",
                    facts.application_name,
                    facts.stream_name,
                )
        result.append(decision)
    return result


def plan_cleanup(
    *,
    tables: Sequence[LeaseTableFacts],
    migrations: Sequence[MigrationTableFacts],
    consumers: Sequence[ConsumerFacts],
    connectors: Sequence[ConnectorUse],
    now: float,
    retention_seconds: float = DEFAULT_RETENTION_SECONDS,
    patterns: Sequence[str] = ("*",),
) -> list[Decision]:
    """Every decision: consumers first (deleted before their tables), then lease and migration tables."""
    ordered = sorted(tables, key=lambda t: t.name)
    table_decisions = decide_lease_tables(
        ordered, connectors, now=now, retention_seconds=retention_seconds, patterns=patterns
    )
    by_application: dict[tuple[str, str], Decision] = {}
    for t, d in zip(ordered, table_decisions, strict=True):
        if t.tagged and t.stream_name and t.application_name:
            by_application[(t.stream_name, t.application_name)] = d
    consumer_decisions = [
        decide_consumer(c, connectors, by_application, patterns=patterns)
        for c in sorted(consumers, key=lambda c: (c.stream_name, c.consumer_name))
    ]
    migration_decisions = [
        decide_migration_table(m, now=now, retention_seconds=retention_seconds, patterns=patterns)
        for m in sorted(migrations, key=lambda m: m.name)
    ]
    return [*consumer_decisions, *table_decisions, *migration_decisions]


def deletion_order(decisions: Sequence[Decision], tables: Sequence[LeaseTableFacts]) -> list[Decision]:
    """The candidates in the order to remove them: consumers, then lease tables that point nowhere, then the
    superseded ones, then migration copies.

    A table pointing to another is removed after it, so that if the successor turns out to be in use
    when it is checked again, the pointer to it is still there (and is kept too).
    """
    superseded = {t.name for t in tables if t.superseded_by}
    kinds = {FAN_OUT_CONSUMER: 0, LEASE_TABLE: 1, MIGRATION_TABLE: 3}

    def rank(decision: Decision) -> tuple[int, str]:
        at = kinds.get(decision.kind, 4)
        if decision.kind == LEASE_TABLE and decision.resource in superseded:
            at = 2
        return at, decision.resource

    return sorted((d for d in decisions if d.delete), key=rank)
