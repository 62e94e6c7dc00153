"""The lease table's metadata item: its identity (one destination per application name, one stream per
lease table) and its reset mark."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from airflow_kinesis_snowflake.core.state.errors import IdentityError
from airflow_kinesis_snowflake.core.state.metadata import (
    CREATED_BY,
    ResetMark,
    TableClaim,
    TableIdentity,
    TableMarks,
    TableMetadata,
    check_claim,
    check_dynamodb_use,
    check_identity,
    check_kinesis_use,
    stream_created_at,
)

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


def test_the_same_connector_changing_its_destination_is_told_so_and_how_to_go_on() -> None:
    moved = TableIdentity("orders", "ANALYTICS.RAW.ORDERS_V2", ORDERS.stream_arn, ORDERS.stream_created_at)
    with pytest.raises(IdentityError) as err:
        check_identity("orders-app", ORDERS, moved)
    message = str(err.value)
    assert message.startswith(
        "connector 'orders' loaded ANALYTICS.RAW.ORDERS under application name 'orders-app', and its connector "
        "file now names ANALYTICS.RAW.ORDERS_V2."
    )
    assert "to load ANALYTICS.RAW.ORDERS_V2, give connector 'orders' a new application_name" in message
    assert "it reads the stream from its initial_position" in message
    assert "to go on loading ANALYTICS.RAW.ORDERS where it stopped, set the destination back" in message
    # Not told that another connector keeps the application name.
    assert "needs no change" not in message and "(unknown)" not in message and "of its own" not in message


def test_a_destination_recorded_without_its_connector_is_refused_without_guessing_whose_it_was() -> None:
    earlier = TableIdentity(None, ORDERS.destination, ORDERS.stream_arn, ORDERS.stream_created_at)
    refunds = TableIdentity("refunds", "ANALYTICS.RAW.REFUNDS", ORDERS.stream_arn, ORDERS.stream_created_at)
    with pytest.raises(IdentityError) as err:
        check_identity("orders-app", earlier, refunds)
    message = str(err.value)
    assert "is already used by a connector whose id was not recorded, which loads ANALYTICS.RAW.ORDERS" in message
    assert "give connector 'refunds' an application_name of its own" in message
    assert "if ANALYTICS.RAW.ORDERS was this connector's own destination before, set it back" in message
    assert "needs no change" not in message and "(unknown)" not in message


def test_a_dynamodb_table_claimed_for_another_destination_is_refused_for_each_case() -> None:
    claim = TableClaim("customers", "ANALYTICS.RAW.CUSTOMERS", "customers")
    # The same connector, whose destination for the table changed.
    with pytest.raises(IdentityError) as err:
        check_claim("customers-app", claim, TableClaim("customers", "ANALYTICS.COPIES.CUSTOMERS", "customers"))
    same = str(err.value)
    assert same.startswith(
        "connector 'customers' synced DynamoDB table 'customers' into ANALYTICS.RAW.CUSTOMERS under application "
        "name 'customers-app', and now names ANALYTICS.COPIES.CUSTOMERS for it."
    )
    assert "give connector 'customers' a new application_name in its connector file (it takes a snapshot" in same
    assert "to go on loading ANALYTICS.RAW.CUSTOMERS where it stopped, set the destination back" in same
    assert "needs no change" not in same and "(unknown)" not in same
    # Another connector: named, and told it needs no change.
    with pytest.raises(IdentityError) as err:
        check_claim("customers-app", claim, TableClaim("customers", "ANALYTICS.RAW.COPY", "copy"))
    other = str(err.value)
    assert "into ANALYTICS.RAW.CUSTOMERS for connector 'customers'; connector 'copy' syncs it into" in other
    assert "connector 'customers' keeps it and needs no change; give connector 'copy' an application_name" in other
    # A destination Snowflake recorded without its connector: not named '(unknown)', nor said to keep it.
    with pytest.raises(IdentityError) as err:
        check_claim(
            "customers-app",
            TableClaim("customers", "ANALYTICS.RAW.CUSTOMERS"),
            TableClaim("customers", "ANALYTICS.RAW.COPY", "copy"),
        )
    unknown = str(err.value)
    assert "for a connector whose id was not recorded; connector 'copy' syncs it into ANALYTICS.RAW.COPY" in unknown
    assert "needs no change" not in unknown and "(unknown)" not in unknown


def test_a_recreated_stream_is_refused_pointing_at_the_reset_dag() -> None:
    again = TableIdentity("orders", ORDERS.destination, ORDERS.stream_arn, "2026-03-01T00:00:00+00:00")
    with pytest.raises(IdentityError, match=r"deleted and created again.*reset DAG"):
        check_identity("orders-app", ORDERS, again)


def test_a_lease_table_serves_one_source_kind() -> None:
    kinesis = TableMetadata("orders-app", "orders-app", "orders", "g1", "", stream_arn=ORDERS.stream_arn)
    dynamodb = TableMetadata(
        "customers-app", "customers-app", "customers-app", "g2", "",
        table_claims=(TableClaim("customers", "ANALYTICS.RAW.CUSTOMERS", "customers"),),
    )  # fmt: skip
    claim = TableClaim("customers", "ANALYTICS.RAW.CUSTOMERS", "customers")
    # Each source passes its own lease table.
    check_kinesis_use("orders-app", kinesis, "orders")
    check_dynamodb_use("customers-app", dynamodb, claim)
    # A Kinesis connector is refused a table holding DynamoDB claims, naming their connector and tables.
    with pytest.raises(IdentityError) as err:
        check_kinesis_use("customers-app", dynamodb, "orders")
    assert "already used by DynamoDB connector customers for tables customers" in str(err.value)
    assert "Give connector 'orders' an application_name of its own" in str(err.value)
    # A DynamoDB connector is refused a Kinesis stream's table, known by its stream ARN or its stream's name.
    for table_name, recorded in (("orders-app", kinesis), ("orders-app", replace(kinesis, stream_arn=None))):
        with pytest.raises(IdentityError) as err:
            check_dynamodb_use(table_name, recorded, claim)
        assert "already used by Kinesis connector '(unknown)' for stream 'orders'" in str(err.value)
        assert "DynamoDB table 'customers'" in str(err.value)


def test_stream_creation_time_is_stored_in_utc() -> None:
    local = datetime(2026, 1, 1, 2, tzinfo=timezone(timedelta(hours=2)))
    assert stream_created_at(local) == "2026-01-01T00:00:00+00:00"
    assert stream_created_at(datetime(2026, 1, 1)) == "2026-01-01T00:00:00+00:00"


def test_identity_attributes_leave_out_what_is_unknown() -> None:
    assert TableIdentity(connector_id="orders").attributes() == {"connector_id": "orders"}


def marks(**kwargs: object) -> TableMarks:
    base: dict[str, object] = {
        "table_name": "t",
        "application_name": "t",
        "stream_name": "s",
        "generation_id": "g",
        "created_at": "2026-01-01T00:00:00+00:00",
    }
    return TableMarks(**(base | kwargs))  # type: ignore[arg-type]


def test_a_reset_mark_is_live_until_it_expires() -> None:
    mark = ResetMark("reset/x", "delete_table", 100.0, 200.0)
    assert mark.is_live(199.9) and not mark.is_live(200.0)
    assert mark.to_dict()["expires_at"] == "1970-01-01T00:03:20+00:00"
    assert marks(reset=mark).live_reset(150.0) == mark
    assert marks(reset=mark).live_reset(250.0) is None


def test_the_metadata_item_is_read_into_one_class_with_its_identity_and_marks() -> None:
    item = {
        "lease_key": {"S": "#metadata"},
        "schema_version": {"N": "1"},
        "application_name": {"S": "orders-app"},
        "stream_name": {"S": "orders"},
        "generation_id": {"S": "g1"},
        "created_by": {"S": CREATED_BY},
        "created_at": {"S": "2026-01-01T00:00:00+00:00"},
        "connector_id": {"S": "orders"},
        "destination": {"S": "ANALYTICS.RAW.ORDERS"},
        "stream_arn": {"S": ORDERS.stream_arn},
        "stream_created_at": {"S": ORDERS.stream_created_at},
        "superseded_by": {"S": "orders-v2"},
        "superseded_at": {"N": "1700000000.5"},
        "reset_owner": {"S": "reset/x"},
        "reset_mode": {"S": "delete_table"},
        "reset_started_at": {"N": "100"},
        "reset_expires_at": {"N": "200"},
        "last_ingest_at": {"N": "150"},
    }
    metadata = TableMetadata.from_item("orders-app", item)
    assert metadata == TableMarks(
        "orders-app",
        "orders-app",
        "orders",
        "g1",
        "2026-01-01T00:00:00+00:00",
        superseded_by="orders-v2",
        superseded_at=1_700_000_000.5,
        reset=ResetMark("reset/x", "delete_table", 100.0, 200.0),
        connector_id="orders",
        destination="ANALYTICS.RAW.ORDERS",
        stream_arn=ORDERS.stream_arn,
        stream_created_at=ORDERS.stream_created_at,
        last_ingest_at=150.0,
    )
    assert metadata is not None and metadata.identity == ORDERS
    assert (metadata.schema_version, metadata.created_by) == (1, CREATED_BY)
    # What earlier versions wrote: no identity, no marks.
    bare = TableMetadata.from_item("t", {k: item[k] for k in ("application_name", "stream_name", "generation_id")})
    assert bare is not None and bare.identity == TableIdentity() and bare.reset is None and bare.created_at == ""
    # No item, or an item without a generation, is no metadata.
    assert TableMetadata.from_item("t", None) is None
    assert TableMetadata.from_item("t", {"application_name": {"S": "t"}}) is None
