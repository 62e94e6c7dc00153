"""The restore protocol's decisions, without AWS: parameters and the generation it replaces."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.admin.params import ParameterError
from airflow_kinesis_snowflake.core.admin.restore import parse_restore_request, replaced_generation
from airflow_kinesis_snowflake.core.state.backups import CheckpointBackup
from airflow_kinesis_snowflake.core.state.metadata import TableMarks


def parse(**overrides: Any) -> Any:
    values: dict[str, Any] = {
        "connector_id": "orders",
        "application_name": "orders-app",
        "stream_name": "orders",
        "destination": "",
        "backup": " /backups/orders-app/1-reset.json ",
        "preview_only": "true",
        "confirm": "None",
        "lease_wait_timeout_seconds": 5,
    }
    values.update(overrides)
    return parse_restore_request(**values)


def test_rendered_parameters_become_values() -> None:
    request = parse()

    assert request.location == "/backups/orders-app/1-reset.json"
    assert (request.preview_only, request.confirm, request.destination) == (True, None, None)
    assert request.lease_wait_timeout_seconds == 5.0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"backup": ""}, "^backup is required: the backup_location a reset or clean-up returned$"),
        ({"backup": None}, "^backup is required"),
        ({"preview_only": "perhaps"}, "^preview_only must be true or false, not 'perhaps'$"),
        ({"lease_wait_timeout_seconds": "soon"}, "^lease_wait_timeout_seconds must be a number, not 'soon'$"),
    ],
)
def test_a_bad_parameter_is_named(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        parse(**overrides)


def backup(generation: str) -> CheckpointBackup:
    return CheckpointBackup("orders-app", "orders", generation, datetime(2026, 1, 1, tzinfo=UTC), "cleanup", ())


def test_the_generation_the_table_holds_is_recorded_as_replaced_unless_it_is_the_backups() -> None:
    table = TableMarks("orders-app", "orders-app", "orders", "g2", "2026-01-01T00:00:00+00:00")

    assert replaced_generation(backup("g1"), table) == "g2"
    assert replaced_generation(backup("g2"), table) is None
    assert replaced_generation(backup("g1"), None) is None
