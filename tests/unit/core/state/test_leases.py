"""The lease table's identity: one destination per application name, one stream per lease table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from airflow_kinesis_snowflake.core.model import InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.state.errors import IdentityError
from airflow_kinesis_snowflake.core.state.leases import Lease, earliest_start
from airflow_kinesis_snowflake.core.state.metadata import TableIdentity, check_identity, stream_created_at

ORDERS = TableIdentity(
    "orders", "ANALYTICS.RAW.ORDERS", "arn:aws:kinesis:us-east-1:1:stream/orders", "2026-01-01T00:00:00+00:00"
)


def test_the_same_connector_and_stream_pass() -> None:
    check_identity("orders-app", ORDERS, ORDERS)
    # Another processor of the same destination shares the application name.
    check_identity(
        "orders-app",
        ORDERS,
        TableIdentity("orders", "ANALYTICS.RAW.ORDERS", ORDERS.stream_arn, ORDERS.stream_created_at),
    )


def test_what_the_table_does_not_record_yet_is_not_compared() -> None:
    check_identity("orders-app", TableIdentity(), ORDERS)


def test_another_destination_is_refused_naming_both_connectors_and_the_fix() -> None:
    refunds = TableIdentity("refunds", "ANALYTICS.RAW.REFUNDS", ORDERS.stream_arn, ORDERS.stream_created_at)
    with pytest.raises(IdentityError) as err:
        check_identity("orders-app", ORDERS, refunds)
    message = str(err.value)
    assert "connector 'orders', which loads ANALYTICS.RAW.ORDERS" in message
    assert "connector 'refunds' loads ANALYTICS.RAW.REFUNDS" in message
    assert "give connector 'refunds' an application_name of its own" in message


def test_a_recreated_stream_is_refused_pointing_at_the_reset_dag() -> None:
    again = TableIdentity("orders", ORDERS.destination, ORDERS.stream_arn, "2026-03-01T00:00:00+00:00")
    with pytest.raises(IdentityError, match=r"deleted and created again.*reset DAG"):
        check_identity("orders-app", ORDERS, again)


def test_stream_creation_time_is_stored_in_utc() -> None:
    local = datetime(2026, 1, 1, 2, tzinfo=timezone(timedelta(hours=2)))
    assert stream_created_at(local) == "2026-01-01T00:00:00+00:00"
    assert stream_created_at(datetime(2026, 1, 1)) == "2026-01-01T00:00:00+00:00"


def test_identity_attributes_leave_out_what_is_unknown() -> None:
    assert TableIdentity(connector_id="orders").attributes() == {"connector_id": "orders"}


def test_earliest_start_prefers_trim_horizon_then_the_earliest_time() -> None:
    early = StartPosition(InitialPosition.AT_TIMESTAMP, datetime(2026, 1, 1, tzinfo=UTC))
    late = StartPosition(InitialPosition.AT_TIMESTAMP, datetime(2026, 2, 1, tzinfo=UTC))
    trim = StartPosition(InitialPosition.TRIM_HORIZON)
    assert earliest_start([Lease("a", 0, late), Lease("b", 0, early)]) == early
    assert earliest_start([Lease("a", 0, late), Lease("b", 0, trim)]) == trim
    assert earliest_start([]) is None
