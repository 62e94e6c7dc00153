"""Which lease tables, migration tables and fan-out consumers clean-up may remove, and why.

Pure functions over facts gathered by the clean-up operator, so every rule is tested without AWS.
Each resource gets one :class:`Decision`: delete it under a named rule, or keep it for a named
reason. The reasons to keep are checked first, and some are absolute:

* a table without this provider's ``created-by`` tag is never touched;
* a table with a live lease (a batch holds a shard) is never touched;
* a table holding a DynamoDB source's leases (keys ``<table>/g<generation>/<shard or segment>``)
  is never touched: its metadata names a DynamoDB table, not a Kinesis stream, so neither a stream's
  retention nor its fan-out consumers say anything about it, and its gap check (the age of each
  stream shard's last read) lives in those leases. Its stream and ledger are not read;
* a table a reset or restore is working on is never touched, nor one that DynamoDB reports as not
  ACTIVE;
* the active and the configured application of the connectors given (one DAG folder's) are never
  removed (the configured table holds the pointer to the active one after a reset to a new name);
  other folders' connectors are kept by the evidence below;
* whether a table is in use is decided from the table itself and from the exactly-once ledger,
  not from the connectors one DAG folder knows: a checkpoint, heartbeat, ingest run or ledger
  commit within the retention keeps it, and the retention is never shorter than the stream's
  own retention period plus a margin (:data:`RETENTION_MARGIN_SECONDS`). A table that holds
  checkpoints goes only when the ledger shows its application's last commit, older than the
  retention: no commit at all may mean its loads are recorded in another deployment's ledger.
  When that cannot be established (the stream or the ledger cannot be read, the table does not
  say where its ledger is), the table is kept and the reason given;
* a superseded table is kept while the table it points to is kept, is not ACTIVE, or cannot be
  seen; it goes after its successor is confirmed gone with no ledger commit within the
  retention. Some connector, perhaps in another DAG folder, may start from it;
* every table a kept table reaches through ``superseded_by`` is kept;
* a ``<application>_migration`` table is removed only once the migration wrote every lease into
  the new table, never while the copy is the only place some checkpoint lives;
* a fan-out consumer is removed only when its name is an application this provider knows, and
  one that follows its lease table only after that table was checked again and deleted.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any

from airflow_kinesis_snowflake.core.sources.dynamodb.progress import parse_lease_key
from airflow_kinesis_snowflake.core.state.chain import ChainEnd, walk_chain
from airflow_kinesis_snowflake.core.state.metadata import APPLICATION_TAG, CREATED_BY, CREATED_BY_TAG

DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600
# Added to the stream's retention period: Kinesis trims expired records lazily, so records a little
# older than the retention period may still be read by a table created again.
RETENTION_MARGIN_SECONDS = 24 * 3600

# DescribeTable's TableStatus of a table clean-up may decide on, and the status of a table
# confirmed gone (ResourceNotFoundException), which clean-up only looks at as a successor.
ACTIVE = "ACTIVE"
GONE = "GONE"

LEASE_TABLE = "lease-table"
MIGRATION_TABLE = "migration-table"
FAN_OUT_CONSUMER = "fan-out-consumer"


class Rule(StrEnum):
    """Why a resource is removed (the first six) or kept (the others)."""

    ORPHANED_LEASE_TABLE = "orphaned-lease-table"
    SUPERSEDED_LEASE_TABLE = "superseded-lease-table"
    LEFTOVER_MIGRATION_TABLE = "leftover-migration-table"
    UNUSED_FAN_OUT_CONSUMER = "unused-fan-out-consumer"
    NOT_ENHANCED_FAN_OUT = "connector-not-enhanced-fan-out"
    SUPERSEDED_GENERATION = "superseded-generation"

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
    NO_DESTINATION = "no-destination"
    NO_LEDGER_COMMIT = "no-ledger-commit"
    TABLE_NOT_ACTIVE = "table-not-active"
    DYNAMODB_SOURCE = "dynamodb-source"
    SUCCESSOR_UNKNOWN = "successor-unknown"
    REACHED_FROM_KEPT_TABLE = "reached-from-kept-table"
    LEASE_TABLE_KEPT = "lease-table-kept"
    CURRENT_GENERATION = "current-generation"
    NO_RECORDED_GENERATION = "no-recorded-generation"

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
        Rule.SUPERSEDED_GENERATION,
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
    :param status: DescribeTable's ``TableStatus``, or :data:`GONE` for a successor that does not exist.
    :param has_checkpoints: some lease of it holds a checkpoint (it loaded something).
    :param dynamodb_source_leases: lease keys of a DynamoDB source's tables
        (:func:`dynamodb_source_keys`); a table holding any is left alone.
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
    status: str = ACTIVE
    has_checkpoints: bool = True
    dynamodb_source_leases: tuple[str, ...] = ()

    @property
    def tagged(self) -> bool:
        return self.tags.get(CREATED_BY_TAG) == CREATED_BY

    @property
    def kinesis(self) -> bool:
        """Whether it is a Kinesis stream's lease table: its ``stream_name`` names a Kinesis stream."""
        return not self.dynamodb_source_leases


def dynamodb_source_keys(lease_keys: Iterable[str]) -> tuple[str, ...]:
    """The lease keys of a DynamoDB source (``<table>/g<generation>/<shard or segment>``), sorted."""
    return tuple(sorted(k for k in lease_keys if parse_lease_key(k) is not None))


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

    if facts.status != ACTIVE:
        return keep(Rule.TABLE_NOT_ACTIVE, f"table status {facts.status}: decided on once it is ACTIVE")
    if not facts.tagged:
        return keep(Rule.UNTAGGED, f"not tagged {CREATED_BY_TAG}={CREATED_BY}: not this provider's table")
    application = facts.application_name or facts.tags.get(APPLICATION_TAG) or facts.name
    if not in_scope(application, patterns):
        return keep(Rule.OUT_OF_SCOPE, f"application {application!r} matches none of {list(patterns)}")
    if facts.application_name is None:
        return keep(Rule.NO_METADATA, "no metadata item: being created, or not a lease table this provider can read")
    if facts.dynamodb_source_leases:
        tables = sorted({k.split("/", 1)[0] for k in facts.dynamodb_source_leases})
        return keep(
            Rule.DYNAMODB_SOURCE,
            f"holds the leases of a DynamoDB source (tables {', '.join(tables)}; keys <table>/g<generation>/...): "
            "clean-up does not decide on a DynamoDB source's lease table; delete it by hand once no connector "
            "syncs those tables",
        )
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
    retention = effective_retention(facts, retention_seconds)
    kept = _in_use(facts, now=now, retention=retention, retention_seconds=retention_seconds)
    if kept is not None:
        return keep(*kept)
    idle = now - (facts.last_activity or 0.0)
    if facts.superseded_by:
        rule, why = Rule.SUPERSEDED_LEASE_TABLE, f"superseded by {facts.superseded_by!r} (a reset)"
    else:
        rule, why = Rule.ORPHANED_LEASE_TABLE, "no configured connector uses this application"
    detail = f"{why}; no live lease; last used {_age(idle)} ago (retention {_age(retention)}"
    detail += f"{_retention_source(facts, retention_seconds)}); {_ledger_text(facts, now)}"
    return Decision(LEASE_TABLE, facts.name, rule, detail, facts.application_name, facts.stream_name)


def effective_retention(facts: LeaseTableFacts, retention_seconds: float) -> float:
    """The retention applied to a table: the one asked for, never shorter than its stream's retention
    period plus :data:`RETENTION_MARGIN_SECONDS`."""
    if facts.stream_retention_seconds is None:
        return retention_seconds
    return max(retention_seconds, facts.stream_retention_seconds + RETENTION_MARGIN_SECONDS)


def _retention_source(facts: LeaseTableFacts, retention_seconds: float) -> str:
    if effective_retention(facts, retention_seconds) > retention_seconds:
        return (
            f": the retention period of stream {facts.stream_name!r} plus {_age(RETENTION_MARGIN_SECONDS)}, longer "
            f"than the {_age(retention_seconds)} asked"
        )
    return ""


def _ledger_text(facts: LeaseTableFacts, now: float) -> str:
    if facts.last_load_at is None:
        return f"the ledger of {facts.destination} holds no commit of this application, and it holds no checkpoint"
    return f"last ledger commit {_age(now - facts.last_load_at)} ago"


def _in_use(
    facts: LeaseTableFacts, *, now: float, retention: float, retention_seconds: float
) -> tuple[Rule, str] | None:
    """Why a table no configured connector of this folder names is still in use, or not known to be idle.

    Evidence read from the table and the ledger, so that a connector in another DAG folder (or
    another deployment) keeps its table: a checkpoint or heartbeat, an ingest run, a ledger
    commit within the retention. The retention is never shorter than the stream's retention
    period: a table removed earlier would be created again at its initial position and read
    records it already loaded. Missing evidence keeps the table, naming what could not be read;
    so does a table that holds checkpoints while its ledger holds no commit of its application.
    """
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
    if facts.destination is None:
        return Rule.NO_DESTINATION, (
            "its metadata item records no destination (a table of an earlier version, not used by an ingest run "
            "since), so its ledger cannot be found; an ingest run of its connector records it, or delete the table "
            "by hand once you know it is unused"
        )
    if facts.ledger_problem is not None:
        return Rule.LEDGER_UNREADABLE, (
            f"cannot tell whether records were loaded recently: {facts.ledger_problem}; it is kept"
        )
    if facts.has_checkpoints and facts.last_load_at is None:
        return Rule.NO_LEDGER_COMMIT, (
            f"it holds checkpoints, but the ledger of {facts.destination} holds no commit of application "
            f"{facts.application_name!r}: its loads may be recorded in another ledger (another deployment, account "
            "or role loading a schema of the same name), so it is not known to be idle; it is kept. Delete it by "
            "hand once you know it is unused"
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
    """:func:`decide_lease_table` for each table, by name, then what the ``superseded_by`` chains keep.

    After a reset to a new name, the connector file's table holds the pointer to the active one and
    every ingest run starts there. Clean-up cannot tell from the table whether some connector file
    (in another DAG folder, perhaps) names it, so:

    * a superseded table is kept while a table on its chain is kept, is not ACTIVE, cannot be seen
      (not among ``tables``), or is gone (:data:`GONE`) while its application's ledger has a commit
      within the retention or cannot be read: deleting the pointer would start that connector over;
    * every table a kept table reaches through ``superseded_by`` is kept.

    ``tables`` may hold successors confirmed gone (status :data:`GONE`); they get no decision.
    """
    ordered = sorted((t for t in tables if t.status != GONE), key=lambda t: t.name)
    by_name = {t.name: t for t in tables}
    decisions = {
        t.name: decide_lease_table(t, connectors, now=now, retention_seconds=retention_seconds, patterns=patterns)
        for t in ordered
    }

    def keep(facts: LeaseTableFacts, rule: Rule, detail: str) -> Decision:
        return Decision(LEASE_TABLE, facts.name, rule, detail, facts.application_name, facts.stream_name)

    def pointer_kept(facts: LeaseTableFacts) -> Decision | None:
        chain = walk_chain(facts.name, by_name.get, lambda t: t.superseded_by)
        start = f"superseded by {facts.superseded_by!r}"
        for successor in chain.found[1:]:
            if successor.status == GONE:
                problem = _gone_successor_problem(successor, now=now, retention_seconds=retention_seconds)
                if problem is not None:
                    return keep(facts, *problem)
                continue
            if successor.status != ACTIVE:
                return keep(
                    facts,
                    Rule.POINTS_TO_LIVE_TABLE,
                    f"{start}; lease table {successor.name!r} on its chain is {successor.status}, so counts as in use",
                )
            decision = decisions[successor.name]
            if not decision.delete:
                return keep(
                    facts,
                    Rule.POINTS_TO_LIVE_TABLE,
                    f"{start}, and lease table {successor.name!r} it leads to is kept [{decision.rule.value}]: a "
                    f"connector configured with {facts.name!r} starts here",
                )
        if chain.end is ChainEnd.END:
            return None
        if chain.end is ChainEnd.MISSING:
            why = f"lease table {chain.last!r} on its chain was not seen (not listed, or not readable)"
        else:
            why = chain.describe()
        return keep(facts, Rule.SUCCESSOR_UNKNOWN, f"{start}; {why}: a connector may start here; it is kept")

    changed = True
    while changed:
        changed = False
        for facts in ordered:
            if decisions[facts.name].delete and facts.superseded_by:
                kept = pointer_kept(facts)
                if kept is not None:
                    decisions[facts.name], changed = kept, True
        for facts in ordered:
            decision = decisions[facts.name]
            if decision.delete or not facts.superseded_by:
                continue
            for reached in walk_chain(facts.name, by_name.get, lambda t: t.superseded_by).found[1:]:
                if reached.name in decisions and decisions[reached.name].delete:
                    decisions[reached.name] = keep(
                        reached,
                        Rule.REACHED_FROM_KEPT_TABLE,
                        f"lease table {facts.name!r}, which is kept [{decision.rule.value}], leads to it through "
                        "superseded_by: a connector starting there reads this one",
                    )
                    changed = True
    return [decisions[t.name] for t in ordered]


def _gone_successor_problem(
    successor: LeaseTableFacts, *, now: float, retention_seconds: float
) -> tuple[Rule, str] | None:
    """Why a pointer to a table that no longer exists is kept: its application loaded recently, or that is unknown."""
    gone = f"lease table {successor.name!r} it leads to does not exist"
    if successor.destination is None:
        return Rule.SUCCESSOR_UNKNOWN, f"{gone}, and no destination is recorded to read its ledger; it is kept"
    if successor.ledger_problem is not None:
        return Rule.SUCCESSOR_UNKNOWN, f"{gone}, and {successor.ledger_problem}; it is kept"
    retention = effective_retention(successor, retention_seconds)
    if successor.last_load_at is not None and now - successor.last_load_at < retention:
        return Rule.POINTS_TO_LIVE_TABLE, (
            f"{gone}, but the ledger of {successor.destination} has a commit of it "
            f"{_age(now - successor.last_load_at)} ago, within the retention of {_age(retention)}: its connector "
            "needs a restore, not a new start"
        )
    return None


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
    """Every decision: lease tables, then migration tables, then consumers (removed after their tables)."""
    decided = [t for t in tables if t.status != GONE]
    ordered = sorted(decided, key=lambda t: t.name)
    table_decisions = decide_lease_tables(
        tables, connectors, now=now, retention_seconds=retention_seconds, patterns=patterns
    )
    by_application: dict[tuple[str, str], Decision] = {}
    for t, d in zip(ordered, table_decisions, strict=True):
        if t.tagged and t.kinesis and t.stream_name and t.application_name:
            by_application[(t.stream_name, t.application_name)] = d
    consumer_decisions = [
        decide_consumer(c, connectors, by_application, patterns=patterns)
        for c in sorted(consumers, key=lambda c: (c.stream_name, c.consumer_name))
    ]
    migration_decisions = [
        decide_migration_table(m, now=now, retention_seconds=retention_seconds, patterns=patterns)
        for m in sorted(migrations, key=lambda m: m.name)
    ]
    return [*table_decisions, *migration_decisions, *consumer_decisions]


def deletion_order(decisions: Sequence[Decision], tables: Sequence[LeaseTableFacts]) -> list[Decision]:
    """The candidates in the order to remove them: lease tables that point nowhere, then the superseded
    ones, then migration copies, then fan-out consumers.

    A table pointing to another is removed after it, so that if the successor turns out to be in use
    when it is checked again, the pointer to it is still there (and is kept too). A consumer that
    follows its lease table goes after that table was checked again and deleted
    (:func:`confirm_consumer`).
    """
    superseded = {t.name for t in tables if t.superseded_by}
    kinds = {LEASE_TABLE: 0, MIGRATION_TABLE: 2, FAN_OUT_CONSUMER: 3}

    def rank(decision: Decision) -> tuple[int, str]:
        at = kinds.get(decision.kind, 4)
        if decision.kind == LEASE_TABLE and decision.resource in superseded:
            at = 1
        return at, decision.resource

    return sorted((d for d in decisions if d.delete), key=rank)


def confirm_consumer(decision: Decision, deleted_tables: Collection[tuple[str | None, str | None]]) -> Decision:
    """A consumer that goes with its lease table goes only if that table was deleted in this run.

    :param deleted_tables: (stream name, application name) of the lease tables deleted, each after
        being checked again just before.
    """
    if decision.rule is not Rule.UNUSED_FAN_OUT_CONSUMER:
        return decision
    if (decision.stream_name, decision.application_name) in deleted_tables:
        return decision
    return replace(
        decision,
        rule=Rule.LEASE_TABLE_KEPT,
        detail="its lease table was kept when checked again just before deletion, so the consumer stays too",
    )


def confirm_pointer(decision: Decision, successors: Sequence[str], kept: Collection[str]) -> Decision:
    """A superseded table stays if a table it leads to was kept at its own final check in this run.

    :param successors: the tables its ``superseded_by`` chain leads to, in order.
    :param kept: lease tables that were candidates but were kept when checked again (a batch had
        started on one, say): a connector may reach them through this table.
    """
    if decision.kind != LEASE_TABLE or not decision.delete:
        return decision
    reached = next((name for name in successors if name in kept), None)
    if reached is None:
        return decision
    return replace(
        decision,
        rule=Rule.POINTS_TO_LIVE_TABLE,
        detail=f"lease table {reached!r} it leads to was kept when checked again just before deletion",
    )
