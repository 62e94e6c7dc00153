"""Clean-up and a DynamoDB source's lease table: recognised by its lease keys, and left alone."""

from __future__ import annotations

from airflow_kinesis_snowflake.core.admin.cleanup import (
    ConnectorUse,
    ConsumerFacts,
    LeaseTableFacts,
    Rule,
    decide_lease_table,
    dynamodb_source_keys,
    plan_cleanup,
)
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import lease_key
from airflow_kinesis_snowflake.core.state.metadata import APPLICATION_TAG, CREATED_BY, CREATED_BY_TAG

NOW = 1_800_000_000.0
DAY = 86400.0
DDB_KEYS = (
    lease_key("orders", 1, "shardId-00000001700000000000-0000000a"),
    lease_key("orders", 2, "segment-3"),
    lease_key("orders.v2", 1, "segment-0"),
)


def idle_dynamodb_lease_table() -> LeaseTableFacts:
    """A DynamoDB source's lease table that, read as a Kinesis one, would be an orphan to delete:
    tagged, idle for 30 days, no connector naming it, its "stream" (a Kinesis stream of the same
    name as the DynamoDB table) known, its ledger's last commit 30 days old."""
    return LeaseTableFacts(
        name="orders-ddb",
        tags={CREATED_BY_TAG: CREATED_BY, APPLICATION_TAG: "orders-ddb"},
        application_name="orders-ddb",
        stream_name="orders",
        last_activity=NOW - 30 * DAY,
        last_load_at=NOW - 30 * DAY,
        destination="ANALYTICS.RAW.ORDERS",
        stream_retention_seconds=DAY,
        dynamodb_source_leases=dynamodb_source_keys(DDB_KEYS),
    )


def test_a_dynamodb_sources_lease_keys_are_told_from_kinesis_shard_ids() -> None:
    kinesis = ["shardId-000000000000", "shardId-000000000001"]
    assert dynamodb_source_keys([*kinesis, *DDB_KEYS]) == tuple(sorted(DDB_KEYS))
    assert dynamodb_source_keys(kinesis) == ()
    # Not a lease key of the DynamoDB source: no generation, or a nested path.
    assert dynamodb_source_keys(["orders/shardId-1", "orders/g1/a/b", "/g1/x"]) == ()


def test_a_lease_table_holding_dynamodb_source_leases_is_kept_and_says_why() -> None:
    facts = idle_dynamodb_lease_table()
    as_kinesis = decide_lease_table(
        LeaseTableFacts(**{**facts.__dict__, "dynamodb_source_leases": ()}), (), now=NOW, retention_seconds=7 * DAY
    )
    assert as_kinesis.rule is Rule.ORPHANED_LEASE_TABLE, "the same facts read as a Kinesis table would go"

    decision = decide_lease_table(facts, (), now=NOW, retention_seconds=7 * DAY)
    assert not decision.delete
    assert decision.rule is Rule.DYNAMODB_SOURCE
    assert "tables orders, orders.v2" in decision.detail


def test_a_kinesis_consumer_is_not_judged_by_a_dynamodb_lease_table_of_the_same_names() -> None:
    # A Kinesis stream named like the DynamoDB table, with a consumer named like the application.
    consumer = ConsumerFacts(
        "orders", "orders-ddb", "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/x:1"
    )
    kinesis_use = ConnectorUse("clicks", "clicks", "clicks-app", "clicks-app")
    decisions = plan_cleanup(
        tables=[idle_dynamodb_lease_table()],
        migrations=[],
        consumers=[consumer],
        connectors=[kinesis_use],
        now=NOW,
        retention_seconds=7 * DAY,
    )
    by_kind = {d.kind: d for d in decisions}
    assert by_kind["lease-table"].rule is Rule.DYNAMODB_SOURCE
    consumer_decision = by_kind["fan-out-consumer"]
    assert consumer_decision.rule is Rule.UNKNOWN_CONSUMER
    assert not consumer_decision.delete
