"""The reset protocol's decisions, without AWS: parameters, the target table, the generation record."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_kinesis_snowflake.config import validate_application_name
from airflow_kinesis_snowflake.core.admin.params import ParameterError
from airflow_kinesis_snowflake.core.admin.reset import (
    ResetRequest,
    generation_record,
    parse_reset_request,
    reset_changed_dynamodb,
    reset_target,
    unfresh_leases,
)
from airflow_kinesis_snowflake.core.admin.window import AdminError
from airflow_kinesis_snowflake.core.model import Checkpoint, GenerationReason, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.state.leases import Lease
from airflow_kinesis_snowflake.core.state.marks import ResetMode, Resolution
from airflow_kinesis_snowflake.core.state.metadata import ResetMark, TableIdentity, TableMarks

TRIM = StartPosition(InitialPosition.TRIM_HORIZON)


def request(**overrides: Any) -> ResetRequest:
    values: dict[str, Any] = {
        "connector_id": "orders",
        "application_name": "orders-app",
        "stream_name": "orders",
        "destination": None,
        "mode": "new_application_name",
        "new_application_name": "orders-app-v2",
        "initial_position": "TRIM_HORIZON",
        "initial_timestamp": None,
        "preview_only": "False",
        "confirm": "orders-app",
        "lease_wait_timeout_seconds": "30",
        "consumer_type": "SHARED_THROUGHPUT",
        "estimate_max_records": 100,
        "check_application_name": validate_application_name,
    }
    values.update(overrides)
    return parse_reset_request(**values)


def marks(**overrides: Any) -> TableMarks:
    values: dict[str, Any] = {
        "table_name": "orders-app",
        "application_name": "orders-app",
        "stream_name": "orders",
        "generation_id": "g1",
        "created_at": "2026-01-01T00:00:00+00:00",
    }
    values.update(overrides)
    return TableMarks(**values)


RESOLVED = Resolution("orders-app", "orders-app", ("orders-app",))


# -- parameters -----------------------------------------------------------------------------------


def test_rendered_parameters_become_values() -> None:
    parsed = request(
        initial_position=" at_timestamp ", initial_timestamp="2026-01-31T12:00:00Z", confirm=" orders-app "
    )

    assert parsed.mode is ResetMode.NEW_APPLICATION_NAME
    assert parsed.position is InitialPosition.AT_TIMESTAMP
    assert parsed.timestamp == datetime(2026, 1, 31, 12, tzinfo=UTC)
    assert (parsed.preview_only, parsed.confirm, parsed.lease_wait_timeout_seconds) == (False, "orders-app", 30.0)


def test_a_timestamp_without_offset_is_utc_and_empty_texts_are_none() -> None:
    parsed = request(
        mode="delete_table",
        new_application_name="None",
        initial_position="AT_TIMESTAMP",
        initial_timestamp="2026-01-31T12:00:00",
        confirm="",
    )

    assert parsed.timestamp == datetime(2026, 1, 31, 12, tzinfo=UTC)
    assert (parsed.new_application_name, parsed.confirm) == (None, None)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"mode": "truncate"}, "^mode must be one of new_application_name, delete_table, not 'truncate'$"),
        ({"new_application_name": ""}, "^mode new_application_name needs new_application_name$"),
        ({"new_application_name": "ab"}, "^new_application_name 'ab' .*3-245 characters"),
        ({"mode": "delete_table"}, "^new_application_name is only used with mode new_application_name$"),
        ({"initial_position": "EARLIEST"}, "TRIM_HORIZON, LATEST, AT_TIMESTAMP, not 'EARLIEST'$"),
        ({"initial_position": "AT_TIMESTAMP"}, "needs initial_timestamp"),
        ({"initial_position": "AT_TIMESTAMP", "initial_timestamp": "soon"}, "'soon' is not an ISO 8601 time"),
        ({"initial_timestamp": "2026-01-01T00:00:00Z"}, "only used with initial_position AT_TIMESTAMP"),
        ({"preview_only": "maybe"}, "^preview_only must be true or false, not 'maybe'$"),
        ({"lease_wait_timeout_seconds": "-1"}, "^lease_wait_timeout_seconds must be at least 0, not '-1'$"),
    ],
)
def test_a_bad_parameter_is_named(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        request(**overrides)


# -- the target -----------------------------------------------------------------------------------


def test_the_target_is_the_new_name_or_the_active_table() -> None:
    assert reset_target(request(), RESOLVED, marks(), target_exists=False) == "orders-app-v2"
    superseded = Resolution("orders-app", "orders-app-v2", ("orders-app", "orders-app-v2"))
    deleting = request(mode="delete_table", new_application_name=None)
    assert reset_target(deleting, superseded, marks(table_name="orders-app-v2"), target_exists=True) == "orders-app-v2"


@pytest.mark.parametrize(
    ("resolution", "table", "exists", "message"),
    [
        (RESOLVED, None, False, "'orders-app' does not exist or has no metadata item: connector orders has no"),
        (RESOLVED, marks(stream_name="clicks"), False, "tracks stream 'clicks', not 'orders'"),
        (
            Resolution("orders-app", "orders-app", ("orders-app",), ResetMark("reset/x", "delete_table", 0, 60), "a"),
            marks(),
            False,
            r"already working on 'a' \(delete_table by reset/x, until 1970-01-01T00:01:00\+00:00\)",
        ),
        (RESOLVED, marks(), True, "'orders-app-v2' already names a lease table"),
        (Resolution("orders-app", "x", ("orders-app-v2", "x")), marks(), False, "already names a lease table"),
    ],
)
def test_a_reset_that_may_not_start_says_why(
    resolution: Resolution, table: TableMarks | None, exists: bool, message: str
) -> None:
    with pytest.raises(AdminError, match=message):
        reset_target(request(), resolution, table, target_exists=exists)


# -- the generation record ------------------------------------------------------------------------


def test_the_record_of_a_delete_table_reset_names_the_generation_it_replaces() -> None:
    identity = TableIdentity("orders", "ANALYTICS.RAW.ORDERS", "arn:stream", "2026-01-01T00:00:00+00:00")
    deleting = request(mode="delete_table", new_application_name=None)

    record = generation_record(
        deleting, target="orders-app", generation="g2", new_start=TRIM, identity=identity, replaced_generation="g1"
    )

    assert (record.configured_application_name, record.application_name, record.generation_id) == (
        "orders-app",
        "orders-app",
        "g2",
    )
    assert (record.reason, record.start, record.replaces) == (GenerationReason.RESET_DELETE_TABLE, TRIM, "g1")
    assert (record.connector_id, record.stream_arn, record.destination) == (
        "orders",
        "arn:stream",
        "ANALYTICS.RAW.ORDERS",
    )


def test_the_record_of_a_new_name_replaces_nothing() -> None:
    record = generation_record(
        request(),
        target="orders-app-v2",
        generation="g2",
        new_start=TRIM,
        identity=TableIdentity(),
        replaced_generation="g1",
    )

    assert (record.reason, record.replaces) == (GenerationReason.RESET_NEW_APPLICATION_NAME, None)


# -- fresh leases, and whether DynamoDB changed ---------------------------------------------------


def test_only_free_unread_leases_at_the_start_are_fresh() -> None:
    leases = {
        "s-0": Lease("s-0", 0, TRIM),
        "s-1": Lease("s-1", 0, StartPosition(InitialPosition.AT_TIMESTAMP, datetime(2026, 1, 1, tzinfo=UTC))),
        "s-2": Lease("s-2", 0, TRIM, checkpoint=Checkpoint("5")),
        "s-3": Lease("s-3", 0, TRIM, lease_owner="batch/1", lease_expires_at=9e9),
    }

    assert unfresh_leases(leases, TRIM) == ["s-1", "s-2", "s-3"]
    assert unfresh_leases({"s-0": leases["s-0"]}, TRIM) == []


@pytest.mark.parametrize(
    ("mode", "target_exists", "table_generation", "changed"),
    [
        (ResetMode.NEW_APPLICATION_NAME, False, "g1", False),
        (ResetMode.NEW_APPLICATION_NAME, True, "g1", True),
        (ResetMode.DELETE_TABLE, False, "g1", False),
        (ResetMode.DELETE_TABLE, False, "g2", True),
        (ResetMode.DELETE_TABLE, False, None, True),
    ],
)
def test_a_failed_reset_is_withdrawn_only_while_dynamodb_is_unchanged(
    mode: ResetMode, target_exists: bool, table_generation: str | None, changed: bool
) -> None:
    assert (
        reset_changed_dynamodb(mode, target_exists=target_exists, table_generation=table_generation, generation="g1")
        is changed
    )
