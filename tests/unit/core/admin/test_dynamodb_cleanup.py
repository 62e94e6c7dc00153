"""Clean-up of a DynamoDB source's leases: only superseded generations' leases go, never one held now."""

from __future__ import annotations

from collections.abc import Sequence

from airflow_kinesis_snowflake.core.admin.cleanup import Decision, Rule
from airflow_kinesis_snowflake.core.admin.dynamodb_cleanup import DYNAMODB_SOURCE_LEASE, decide_generation_leases
from airflow_kinesis_snowflake.core.model import InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import lease_key, parse_lease_key
from airflow_kinesis_snowflake.core.state.leases import Lease

NOW = 1_800_000_000.0
SHARD = "shardId-00000001700000000000-0000000a"


def lease(key: str, *, owner: str | None = None, expires_at: float = 0.0) -> Lease:
    return Lease(key, 3, StartPosition(InitialPosition.TRIM_HORIZON), lease_owner=owner, lease_expires_at=expires_at)


def rules(decisions: Sequence[Decision]) -> dict[str, Rule]:
    return {d.resource: d.rule for d in decisions}


def test_a_lease_key_is_read_back_into_its_table_generation_and_unit() -> None:
    key = parse_lease_key(lease_key("orders.v2", 12, SHARD))
    assert key is not None
    assert (key.table, key.generation, key.unit) == ("orders.v2", 12, SHARD)
    for other in ("shardId-000000000001", "orders/shardId-1", "orders/g1/a/b", "/g1/x", "orders/gx/segment-0"):
        assert parse_lease_key(other) is None, other


def test_leases_of_generations_older_than_the_newest_recorded_go_and_the_newest_stays() -> None:
    leases = [
        lease(lease_key("orders", 0, "segment-0")),
        lease(lease_key("orders", 1, SHARD)),
        lease(lease_key("orders", 2, "segment-0")),
        lease(lease_key("orders", 2, SHARD)),
        lease(lease_key("customers", 0, SHARD)),
        lease("shardId-000000000000"),  # not a DynamoDB source's key: passed over
    ]
    decisions = decide_generation_leases(leases, {"orders": 2, "customers": 0}, application_name="orders-ddb", now=NOW)
    assert rules(decisions) == {
        "customers/g0/" + SHARD: Rule.CURRENT_GENERATION,
        "orders/g0/segment-0": Rule.SUPERSEDED_GENERATION,
        "orders/g1/" + SHARD: Rule.SUPERSEDED_GENERATION,
        "orders/g2/segment-0": Rule.CURRENT_GENERATION,
        "orders/g2/" + SHARD: Rule.CURRENT_GENERATION,
    }
    assert [d.resource for d in decisions if d.delete] == ["orders/g0/segment-0", "orders/g1/" + SHARD]
    superseded = next(d for d in decisions if d.delete)
    assert (superseded.kind, superseded.application_name, superseded.stream_name) == (
        DYNAMODB_SOURCE_LEASE,
        "orders-ddb",
        "orders",
    )
    assert "superseded by generation 2 recorded in Snowflake" in superseded.describe()


def test_a_superseded_lease_held_now_is_kept_until_it_is_released_or_expires() -> None:
    held = lease(lease_key("orders", 1, SHARD), owner="sync/try-1", expires_at=NOW + 60)
    expired = lease(lease_key("orders", 1, "segment-0"), owner="sync/try-1", expires_at=NOW - 1)
    decisions = decide_generation_leases([held, expired], {"orders": 2}, application_name="a", now=NOW)
    assert rules(decisions) == {held.shard_id: Rule.LIVE_LEASE, expired.shard_id: Rule.SUPERSEDED_GENERATION}
    assert "held by sync/try-1" in decisions[1].detail


def test_nothing_goes_when_the_ledger_cannot_say_which_generation_is_current() -> None:
    leases = [lease(lease_key("orders", 0, "segment-0")), lease(lease_key("gone", 0, SHARD))]
    unreadable = decide_generation_leases(
        leases, None, application_name="a", now=NOW, ledger_problem="ProgrammingError: does not exist"
    )
    assert {d.rule for d in unreadable} == {Rule.LEDGER_UNREADABLE}
    assert "ProgrammingError: does not exist" in unreadable[0].detail
    # A table the ledger records nothing of (another deployment's ledger, a replaced schema).
    unrecorded = decide_generation_leases(leases, {"orders": 5}, application_name="a", now=NOW)
    assert rules(unrecorded) == {
        "gone/g0/" + SHARD: Rule.NO_RECORDED_GENERATION,
        "orders/g0/segment-0": Rule.SUPERSEDED_GENERATION,
    }


def test_an_application_out_of_the_patterns_is_left_alone() -> None:
    leases = [lease(lease_key("orders", 0, "segment-0"))]
    decisions = decide_generation_leases(
        leases, {"orders": 1}, application_name="orders-ddb", now=NOW, patterns=("clicks-*",)
    )
    assert rules(decisions) == {"orders/g0/segment-0": Rule.OUT_OF_SCOPE}


def test_superseded_generation_is_the_one_rule_that_deletes_a_lease() -> None:
    assert Rule.SUPERSEDED_GENERATION.deletes
    assert not any(r.deletes for r in (Rule.CURRENT_GENERATION, Rule.NO_RECORDED_GENERATION, Rule.LIVE_LEASE))
