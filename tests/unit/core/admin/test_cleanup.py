"""Clean-up's candidate rules: what may be removed, and everything that must never be."""

from __future__ import annotations

from dataclasses import replace

import pytest

from airflow_kinesis_snowflake.core.admin.cleanup import (
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
    decide_consumer,
    decide_lease_table,
    decide_lease_tables,
    decide_migration_table,
    deletion_order,
    in_scope,
    plan_cleanup,
)
from airflow_kinesis_snowflake.core.state.metadata import APPLICATION_TAG, CREATED_BY, CREATED_BY_TAG
from airflow_kinesis_snowflake.core.state.migration import MIGRATION_OF_TAG

NOW = 1_800_000_000.0
DAY = 86400.0
WEEK = 7 * DAY
TAGS = {CREATED_BY_TAG: CREATED_BY}

ORDERS = ConnectorUse("orders", "orders", "orders-app", "orders-app")
# After a reset to a new name: the configured table points to the active one.
PAYMENTS = ConnectorUse("payments", "payments", "payments-app", "payments-v2", enhanced_fan_out=True)
CONNECTORS = (ORDERS, PAYMENTS)


def table(name: str, **kwargs: object) -> LeaseTableFacts:
    """An idle table: checkpoints and a ledger commit 30 days old, on a stream keeping records 24 hours."""
    facts = LeaseTableFacts(
        name=name,
        tags={**TAGS, APPLICATION_TAG: name},
        application_name=name,
        stream_name="orders",
        last_activity=NOW - 30 * DAY,
        last_load_at=NOW - 30 * DAY,
        destination="ANALYTICS.RAW.ORDERS",
        stream_retention_seconds=DAY,
    )
    return replace(facts, **kwargs)  # type: ignore[arg-type]


def decide(facts: LeaseTableFacts, **kwargs: object) -> Decision:
    return decide_lease_table(facts, CONNECTORS, now=NOW, retention_seconds=WEEK, **kwargs)  # type: ignore[arg-type]


def test_an_idle_table_no_connector_names_is_an_orphan() -> None:
    decision = decide(table("old-app"))
    assert (decision.kind, decision.resource, decision.rule, decision.delete) == (
        LEASE_TABLE,
        "old-app",
        Rule.ORPHANED_LEASE_TABLE,
        True,
    )
    assert "no configured connector uses this application" in decision.detail
    assert "30.0 days ago" in decision.detail
    assert decision.describe().startswith("DELETE lease-table old-app [orphaned-lease-table]")


def test_an_idle_superseded_table_says_what_replaced_it() -> None:
    decision = decide(table("orders-app-v0", superseded_by="orders-app"))
    assert decision.rule is Rule.SUPERSEDED_LEASE_TABLE and decision.delete
    assert "superseded by 'orders-app'" in decision.detail


@pytest.mark.parametrize(
    ("facts", "rule"),
    [
        (LeaseTableFacts(name="someone-elses", tags={}), Rule.UNTAGGED),
        (LeaseTableFacts(name="other-tool", tags={CREATED_BY_TAG: "terraform"}), Rule.UNTAGGED),
        (table("old-app", live_leases=("shardId-000000000001",)), Rule.LIVE_LEASE),
        (table("old-app", reset_in_progress=True), Rule.RESET_IN_PROGRESS),
        (table("orders-app"), Rule.ACTIVE_APPLICATION),
        (table("payments-v2", stream_name="payments"), Rule.ACTIVE_APPLICATION),
        (table("payments-app", stream_name="payments", superseded_by="payments-v2"), Rule.CONFIGURED_APPLICATION),
        (table("old-app", last_activity=NOW - 6 * DAY), Rule.WITHIN_RETENTION),
        (table("being-created", application_name=None), Rule.NO_METADATA),
    ],
    ids=[
        "untagged",
        "tagged-by-someone-else",
        "live-lease",
        "reset-in-progress",
        "active",
        "active-after-reset",
        "configured-pointer",
        "within-retention",
        "no-metadata",
    ],
)
def test_tables_that_are_never_candidates(facts: LeaseTableFacts, rule: Rule) -> None:
    decision = decide(facts)
    assert decision.rule is rule
    assert decision.delete is False
    assert decision.describe().startswith("keep ")


def test_never_rules_win_over_age_and_supersession() -> None:
    # Old and superseded, but a batch holds a lease right now: kept.
    ancient = table("old-app", superseded_by="new-app", last_activity=0.0, live_leases=("shardId-000000000000",))
    assert decide(ancient).rule is Rule.LIVE_LEASE
    # Untagged is checked before anything read from the table.
    assert decide(replace(ancient, tags={})).rule is Rule.UNTAGGED


def test_the_active_table_is_kept_however_old() -> None:
    assert decide(table("orders-app", last_activity=0.0)).rule is Rule.ACTIVE_APPLICATION


def test_retention_boundary() -> None:
    assert decide(table("a", last_activity=NOW - WEEK + 1)).rule is Rule.WITHIN_RETENTION
    assert decide(table("a", last_activity=NOW - WEEK)).rule is Rule.ORPHANED_LEASE_TABLE
    longer_retention = decide_lease_table(table("a"), CONNECTORS, now=NOW, retention_seconds=60 * DAY)
    assert longer_retention.rule is Rule.WITHIN_RETENTION


def test_patterns_limit_what_is_considered() -> None:
    assert decide(table("old-app"), patterns=["orders-*"]).rule is Rule.OUT_OF_SCOPE
    assert decide(table("orders-old"), patterns=["orders-*"]).rule is Rule.ORPHANED_LEASE_TABLE
    assert in_scope("orders-old", ["payments-*", "orders-*"])
    assert not in_scope("Orders-old", ["orders-*"])  # table names are case-sensitive


def migration(**kwargs: object) -> MigrationTableFacts:
    facts = MigrationTableFacts(
        name="legacy-app_migration",
        migration_of="legacy-app",
        tags={**TAGS, MIGRATION_OF_TAG: "legacy-app"},
        state="WRITING",
        fully_written=True,
        migrated_at=NOW - 10 * DAY,
    )
    return replace(facts, **kwargs)  # type: ignore[arg-type]


def test_a_finished_migrations_copy_is_leftover() -> None:
    decision = decide_migration_table(migration(), now=NOW, retention_seconds=WEEK)
    assert (decision.kind, decision.rule, decision.delete) == (MIGRATION_TABLE, Rule.LEFTOVER_MIGRATION_TABLE, True)
    assert decision.application_name == "legacy-app"


def test_the_retention_is_never_shorter_than_the_streams() -> None:
    # Asked for no retention at all, on a stream that keeps a week: a table used 2 days ago stays.
    facts = table("elsewhere-app", last_activity=NOW - 2 * DAY, stream_retention_seconds=WEEK)
    decision = decide_lease_table(facts, CONNECTORS, now=NOW, retention_seconds=0)
    assert decision.rule is Rule.WITHIN_RETENTION and not decision.delete
    assert "the retention period of stream 'orders' plus 1.0 days" in decision.detail
    assert "8.0 days" in decision.detail
    # Kinesis trims lazily: just past the stream's retention period, records may still be read. Kept.
    trimming = replace(facts, last_activity=NOW - WEEK - 3600, last_load_at=NOW - WEEK - 3600)
    assert decide_lease_table(trimming, CONNECTORS, now=NOW, retention_seconds=0).rule is Rule.WITHIN_RETENTION
    # Past the stream's retention and the margin, it goes.
    gone = decide_lease_table(replace(facts, last_activity=NOW - 8 * DAY), CONNECTORS, now=NOW, retention_seconds=0)
    assert gone.rule is Rule.ORPHANED_LEASE_TABLE


@pytest.mark.parametrize(
    ("kwargs", "rule", "says"),
    [
        ({"last_ingest_at": NOW - DAY, "connector_id": "clicks"}, Rule.RECENT_INGEST_RUN, "connector clicks"),
        ({"last_load_at": NOW - 3600}, Rule.RECENT_LOAD, "ledger of ANALYTICS.RAW.ORDERS"),
        (
            {"stream_retention_seconds": None, "stream_problem": "ResourceNotFoundException"},
            Rule.STREAM_UNKNOWN,
            "ResourceNotFoundException",
        ),
        (
            {"ledger_problem": "reading the ledger ANALYTICS.RAW.KINESIS_INGEST_LEDGER failed: no such table"},
            Rule.LEDGER_UNREADABLE,
            "no such table",
        ),
    ],
    ids=["recent-ingest-run", "recent-ledger-commit", "stream-unknown", "ledger-unreadable"],
)
def test_a_table_no_connector_here_names_is_kept_while_in_use_elsewhere_or_unknown(
    kwargs: dict[str, object], rule: Rule, says: str
) -> None:
    # Old checkpoints, and no connector of this DAG folder names it: what the table and the ledger say decides.
    decision = decide(table("elsewhere-app", **kwargs))
    assert decision.rule is rule and not decision.delete
    assert says in decision.detail


def test_an_old_ledger_commit_does_not_keep_a_table() -> None:
    decision = decide(table("old-app", last_load_at=NOW - 20 * DAY, last_ingest_at=NOW - 20 * DAY))
    assert decision.rule is Rule.ORPHANED_LEASE_TABLE
    assert "last ledger commit 20.0 days ago" in decision.detail


def test_a_superseded_table_is_kept_while_the_table_it_points_to_is() -> None:
    # Another folder's connector, reset to a new name: its configured table points to the active one.
    pointer = table("clicks-app", superseded_by="clicks-v2")
    active = table("clicks-v2", last_activity=NOW - 3600)
    kept = decide_lease_tables([pointer, active], CONNECTORS, now=NOW, retention_seconds=WEEK)
    assert [(d.resource, d.rule) for d in kept] == [
        ("clicks-app", Rule.POINTS_TO_LIVE_TABLE),
        ("clicks-v2", Rule.WITHIN_RETENTION),
    ]
    assert "lease table 'clicks-v2' it leads to is kept [within-retention]" in kept[0].detail
    # Both idle: both go, the active one first so that a pointer is never left to a table in use.
    idle = replace(active, last_activity=NOW - 30 * DAY)
    plan = decide_lease_tables([pointer, idle], CONNECTORS, now=NOW, retention_seconds=WEEK)
    assert [(d.resource, d.rule) for d in plan] == [
        ("clicks-app", Rule.SUPERSEDED_LEASE_TABLE),
        ("clicks-v2", Rule.ORPHANED_LEASE_TABLE),
    ]
    assert [d.resource for d in deletion_order(plan, [pointer, idle])] == ["clicks-v2", "clicks-app"]


@pytest.mark.parametrize(
    ("facts", "rule"),
    [
        (migration(tags={MIGRATION_OF_TAG: "legacy-app"}), Rule.UNTAGGED),
        (migration(state="COPYING", fully_written=False), Rule.MIGRATION_IN_PROGRESS),
        (migration(state="COPIED", fully_written=False), Rule.MIGRATION_IN_PROGRESS),
        (migration(fully_written=False), Rule.MIGRATION_IN_PROGRESS),
        (migration(state=None, fully_written=False), Rule.MIGRATION_IN_PROGRESS),
        (migration(migrated_at=NOW - DAY), Rule.WITHIN_RETENTION),
    ],
    ids=["untagged", "copying", "copied-only-copy-left", "writing-unfinished", "state-unknown", "recent"],
)
def test_migration_copies_that_are_never_candidates(facts: MigrationTableFacts, rule: Rule) -> None:
    decision = decide_migration_table(facts, now=NOW, retention_seconds=WEEK)
    assert decision.rule is rule and not decision.delete


def test_copied_state_says_the_copy_may_hold_the_only_checkpoints() -> None:
    decision = decide_migration_table(migration(state="COPIED", fully_written=False), now=NOW)
    assert "COPIED" in decision.detail and "only checkpoints" in decision.detail


def consumer(name: str, stream: str = "orders", status: str = "ACTIVE") -> ConsumerFacts:
    return ConsumerFacts(
        stream, name, f"arn:aws:kinesis:us-east-1:123456789012:stream/{stream}/consumer/{name}:1", status
    )


def test_consumer_of_a_shared_throughput_connector_is_deregistered() -> None:
    decision = decide_consumer(consumer("orders-app"), CONNECTORS, {})
    assert (decision.kind, decision.rule, decision.delete) == (FAN_OUT_CONSUMER, Rule.NOT_ENHANCED_FAN_OUT, True)
    assert decision.arn is not None and decision.arn.endswith("consumer/orders-app:1")


def test_consumers_of_fan_out_connectors_are_kept_for_the_active_and_configured_name() -> None:
    for name in ("payments-v2", "payments-app"):
        decision = decide_consumer(consumer(name, "payments"), CONNECTORS, {})
        assert decision.rule is Rule.CONSUMER_IN_USE and not decision.delete


def test_consumer_of_a_removed_connector_follows_its_lease_table() -> None:
    orphan = decide(table("removed-app"))
    kept = decide(table("removed-app", last_activity=NOW - DAY))
    assert decide_consumer(consumer("removed-app"), CONNECTORS, {("orders", "removed-app"): orphan}).rule is (
        Rule.UNUSED_FAN_OUT_CONSUMER
    )
    within = decide_consumer(consumer("removed-app"), CONNECTORS, {("orders", "removed-app"): kept})
    assert within.rule is Rule.WITHIN_RETENTION and not within.delete
    assert "its lease table is kept" in within.detail


@pytest.mark.parametrize(
    ("facts", "rule"),
    [
        (consumer("lambda-reader"), Rule.UNKNOWN_CONSUMER),
        (consumer("orders-app", status="CREATING"), Rule.CONSUMER_NOT_ACTIVE),
        # Same name as a connector's application, but on another stream: not that connector's.
        (consumer("orders-app", stream="clicks"), Rule.UNKNOWN_CONSUMER),
    ],
    ids=["unknown-name", "not-active", "other-stream"],
)
def test_consumers_that_are_never_candidates(facts: ConsumerFacts, rule: Rule) -> None:
    decision = decide_consumer(facts, CONNECTORS, {})
    assert decision.rule is rule and not decision.delete


def test_plan_lists_tables_before_consumers_and_keys_consumers_by_stream() -> None:
    tables = [table("zz-removed"), table("orders-app"), LeaseTableFacts(name="untagged", tags={})]
    plan = plan_cleanup(
        tables=tables,
        migrations=[migration()],
        consumers=[consumer("zz-removed"), consumer("orders-app"), consumer("zz-removed", stream="clicks")],
        connectors=CONNECTORS,
        now=NOW,
        retention_seconds=WEEK,
    )
    assert [(d.kind, d.resource, d.stream_name, d.rule) for d in plan] == [
        (LEASE_TABLE, "orders-app", "orders", Rule.ACTIVE_APPLICATION),
        (LEASE_TABLE, "untagged", None, Rule.UNTAGGED),
        (LEASE_TABLE, "zz-removed", "orders", Rule.ORPHANED_LEASE_TABLE),
        (MIGRATION_TABLE, "legacy-app_migration", None, Rule.LEFTOVER_MIGRATION_TABLE),
        (FAN_OUT_CONSUMER, "zz-removed", "clicks", Rule.UNKNOWN_CONSUMER),
        (FAN_OUT_CONSUMER, "orders-app", "orders", Rule.NOT_ENHANCED_FAN_OUT),
        (FAN_OUT_CONSUMER, "zz-removed", "orders", Rule.UNUSED_FAN_OUT_CONSUMER),
    ]
    assert [d.to_dict()["delete"] for d in plan] == [False, False, True, True, False, True, True]


def test_rules_that_delete() -> None:
    assert {r for r in Rule if r.deletes} == {
        Rule.ORPHANED_LEASE_TABLE,
        Rule.SUPERSEDED_LEASE_TABLE,
        Rule.LEFTOVER_MIGRATION_TABLE,
        Rule.UNUSED_FAN_OUT_CONSUMER,
        Rule.NOT_ENHANCED_FAN_OUT,
        Rule.SUPERSEDED_GENERATION,
    }


def test_what_is_known_to_keep_a_table_is_said_before_what_is_unknown() -> None:
    unknown_stream = {"stream_retention_seconds": None, "stream_problem": "AccessDeniedException"}
    assert decide(table("old-app", last_activity=NOW - DAY, **unknown_stream)).rule is Rule.WITHIN_RETENTION
    assert decide(table("orders-app", **unknown_stream)).rule is Rule.ACTIVE_APPLICATION
    unreadable = {"ledger_problem": "cannot connect to Snowflake"}
    assert decide(table("old-app", last_ingest_at=NOW - DAY, **unreadable)).rule is Rule.RECENT_INGEST_RUN


def test_a_table_whose_destination_is_not_recorded_is_kept() -> None:
    # Its ledger cannot be found, so whether it loaded recently is unknown: with or without checkpoints.
    for facts in (table("old-app", destination=None), table("old-app", destination=None, has_checkpoints=False)):
        decision = decide(facts)
        assert decision.rule is Rule.NO_DESTINATION and not decision.delete
        assert "records no destination" in decision.detail


def test_checkpoints_without_a_ledger_commit_are_not_proof_of_idleness() -> None:
    # Another deployment's table loading into a schema of the same name: this ledger has no row of it.
    decision = decide(table("other-deployment-app", last_load_at=None))
    assert decision.rule is Rule.NO_LEDGER_COMMIT and not decision.delete
    assert "holds checkpoints" in decision.detail and "ANALYTICS.RAW.ORDERS" in decision.detail
    # A table that never checkpointed anything loaded nothing: it may go.
    empty = decide(table("never-loaded-app", last_load_at=None, has_checkpoints=False))
    assert empty.rule is Rule.ORPHANED_LEASE_TABLE
    assert "holds no commit of this application, and it holds no checkpoint" in empty.detail


def test_a_table_that_is_not_active_is_kept() -> None:
    decision = decide(table("old-app", status="UPDATING"))
    assert decision.rule is Rule.TABLE_NOT_ACTIVE and not decision.delete


POINTER = table("clicks-app", superseded_by="clicks-v2")


def decide_all(*tables: LeaseTableFacts) -> dict[str, Rule]:
    return {d.resource: d.rule for d in decide_lease_tables(tables, CONNECTORS, now=NOW, retention_seconds=WEEK)}


@pytest.mark.parametrize(
    ("successor", "rule"),
    [
        (None, Rule.SUCCESSOR_UNKNOWN),  # not listed: cannot be seen
        (table("clicks-v2", status="CREATING"), Rule.POINTS_TO_LIVE_TABLE),
        (table("clicks-v2", status="UPDATING", last_activity=0.0), Rule.POINTS_TO_LIVE_TABLE),
        (table("clicks-v2", status=GONE, last_load_at=NOW - DAY), Rule.POINTS_TO_LIVE_TABLE),
        (table("clicks-v2", status=GONE, last_load_at=None, ledger_problem="timeout"), Rule.SUCCESSOR_UNKNOWN),
        (table("clicks-v2", status=GONE, destination=None), Rule.SUCCESSOR_UNKNOWN),
        (table("clicks-v2", status=GONE), Rule.SUPERSEDED_LEASE_TABLE),
        (table("clicks-v2", status=GONE, last_load_at=None), Rule.SUPERSEDED_LEASE_TABLE),
    ],
    ids=[
        "not-seen",
        "creating",
        "updating",
        "gone-recent-ledger-commit",
        "gone-ledger-unreadable",
        "gone-no-destination",
        "gone-old-ledger-commit",
        "gone-never-loaded",
    ],
)
def test_a_pointer_goes_only_once_its_successor_is_gone_and_idle(successor: LeaseTableFacts | None, rule: Rule) -> None:
    decided = decide_all(POINTER, *([successor] if successor else []))
    assert decided["clicks-app"] is rule
    # A table that is not there, or not ACTIVE, gets no decision to delete it.
    assert decided.get("clicks-v2") in (None, Rule.TABLE_NOT_ACTIVE)


def test_a_pointer_into_a_loop_is_kept() -> None:
    decided = decide_all(POINTER, table("clicks-v2", superseded_by="clicks-app"))
    assert decided["clicks-app"] is Rule.SUCCESSOR_UNKNOWN
    assert not any(rule.deletes for rule in decided.values())


def test_every_table_a_kept_table_leads_to_is_kept() -> None:
    # A batch holds a lease of the configured table of another folder's connector: what it points to stays.
    live_pointer = replace(POINTER, live_leases=("shardId-000000000000",))
    middle = table("clicks-v2", superseded_by="clicks-v3")
    end = table("clicks-v3")
    assert decide_all(live_pointer, middle, end) == {
        "clicks-app": Rule.LIVE_LEASE,
        "clicks-v2": Rule.REACHED_FROM_KEPT_TABLE,
        "clicks-v3": Rule.REACHED_FROM_KEPT_TABLE,
    }
    # And the other way: the end of the chain is in use, so every table leading to it stays.
    in_use = replace(end, last_activity=NOW - 3600)
    assert decide_all(POINTER, middle, in_use) == {
        "clicks-app": Rule.POINTS_TO_LIVE_TABLE,
        "clicks-v2": Rule.POINTS_TO_LIVE_TABLE,
        "clicks-v3": Rule.WITHIN_RETENTION,
    }
    # Nothing kept on it: the whole chain goes.
    assert decide_all(POINTER, middle, end) == {
        "clicks-app": Rule.SUPERSEDED_LEASE_TABLE,
        "clicks-v2": Rule.SUPERSEDED_LEASE_TABLE,
        "clicks-v3": Rule.ORPHANED_LEASE_TABLE,
    }


def test_consumers_go_after_their_tables_and_only_if_the_table_went() -> None:
    tables = [table("zz-removed"), table("aa-pointer", superseded_by="zz-removed")]
    plan = plan_cleanup(
        tables=tables,
        migrations=[migration()],
        consumers=[consumer("zz-removed"), consumer("orders-app")],
        connectors=CONNECTORS,
        now=NOW,
        retention_seconds=WEEK,
    )
    assert [(d.kind, d.resource) for d in deletion_order(plan, tables)] == [
        (LEASE_TABLE, "zz-removed"),
        (LEASE_TABLE, "aa-pointer"),
        (MIGRATION_TABLE, "legacy-app_migration"),
        (FAN_OUT_CONSUMER, "orders-app"),
        (FAN_OUT_CONSUMER, "zz-removed"),
    ]
    follows = next(d for d in plan if d.kind == FAN_OUT_CONSUMER and d.resource == "zz-removed")
    assert confirm_consumer(follows, {("orders", "zz-removed")}) == follows
    # Its table was kept when checked again (a batch started meanwhile): the consumer stays too.
    stays = confirm_consumer(follows, set())
    assert stays.rule is Rule.LEASE_TABLE_KEPT and not stays.delete
    # One that does not follow a table is not affected.
    shared = next(d for d in plan if d.kind == FAN_OUT_CONSUMER and d.resource == "orders-app")
    assert confirm_consumer(shared, set()) == shared
