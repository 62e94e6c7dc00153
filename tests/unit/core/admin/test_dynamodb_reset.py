"""What a reset of a DynamoDB table does, and the reset DAG's params checked before any side effect."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from airflow_kinesis_snowflake.core.admin.dynamodb_reset import (
    ROWS_NOTE,
    ResetParams,
    parse_reset_params,
    plan_table_reset,
)
from airflow_kinesis_snowflake.core.admin.params import ParameterError
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import Generation
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import SnapshotStart

T0 = datetime(2026, 3, 1, tzinfo=UTC)
NOW = datetime(2026, 3, 2, tzinfo=UTC)


def test_before_the_first_sync_there_is_nothing_to_reset() -> None:
    reset = plan_table_reset("orders", None, 4, NOW, "run-1")
    assert reset.start is None
    assert "first sync takes the snapshot" in reset.describe()


@pytest.mark.parametrize(
    ("current", "state"),
    [
        (Generation(2, T0, SnapshotStart(2, T0, 3), completed=True), "snapshot completed"),
        (Generation(2, T0, SnapshotStart(2, T0, 3)), "snapshot in progress"),
        (Generation(2, T0, None, completed=True), "stream only"),
    ],
)
def test_a_reset_starts_the_next_generation_with_a_snapshot_of_the_connectors_segments_on_the_stream_now(
    current: Generation, state: str
) -> None:
    reset = plan_table_reset("orders", current, 8, NOW, "reset/dag/run-1/1", "arn:orders/stream/b")
    assert reset.start is not None
    assert reset.start.generation == Generation(3, NOW, SnapshotStart(3, NOW, 8), stream_arn="arn:orders/stream/b")
    assert reset.start.reason == "reset requested (reset/dag/run-1/1)"
    line = reset.describe()
    assert f"generation 2 ({state}" in line and "-> generation 3" in line and "8 segments" in line
    assert ROWS_NOTE in line and "rows not seen by the new snapshot are removed" in line
    assert "nothing is truncated" in line


def test_empty_tables_means_every_table_synced_now_and_a_dry_run_needs_no_confirm() -> None:
    choices: list[list[str] | str | None] = [None, [], "[]", "", "None"]
    for tables in choices:
        params = parse_reset_params(
            tables=tables, available=["b", "a"], dry_run="True", confirm="", application_name="app"
        )
        assert params == ResetParams(("a", "b"), True)


def test_tables_given_as_a_list_or_as_rendered_json_are_reset_in_name_order() -> None:
    for tables in (["b", "a"], '["b", "a"]'):
        params = parse_reset_params(
            tables=tables, available=["a", "b", "c"], dry_run=False, confirm="app", application_name="app"
        )
        assert params == ResetParams(("a", "b"), False)


def test_a_table_not_synced_by_the_connector_is_refused_naming_the_param_the_value_and_the_fix() -> None:
    with pytest.raises(ParameterError) as err:
        parse_reset_params(
            tables=["a", "ghost"], available=["a", "b"], dry_run=True, confirm="", application_name="app"
        )
    message = str(err.value)
    assert message.startswith("tables: ['ghost']") and "(a, b)" in message and "leave tables empty" in message


@pytest.mark.parametrize("confirm", [None, "", "other-app"])
def test_acting_needs_confirm_equal_to_the_application_name(confirm: str | None) -> None:
    with pytest.raises(ParameterError) as err:
        parse_reset_params(tables=[], available=["a"], dry_run="False", confirm=confirm, application_name="app")
    message = str(err.value)
    assert message.startswith(f"confirm: {confirm!r}") and "confirm to 'app'" in message


def test_dry_run_and_tables_must_be_what_they_say() -> None:
    with pytest.raises(ParameterError, match="dry_run must be true or false"):
        parse_reset_params(tables=[], available=["a"], dry_run="maybe", confirm="", application_name="app")
    with pytest.raises(ParameterError, match=r"tables: .* not a list"):
        parse_reset_params(tables='{"a": 1}', available=["a"], dry_run=True, confirm="", application_name="app")
