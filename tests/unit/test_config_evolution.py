"""destination.schema_evolution and destination.on_unknown_key as the ingestion takes them."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_kinesis_snowflake.config import ConnectorConfigError, parse_connector_config
from airflow_kinesis_snowflake.core.load.evolution import UnknownKeys


def _config(**destination: Any) -> dict[str, Any]:
    return {
        "connector_id": "orders",
        "source": {"stream_name": "orders", "region": "us-east-1", "application_name": "orders-app"},
        "destination": {"database": "analytics", "schema": "raw", "table": "orders", **destination},
    }


def test_unknown_keys_are_ignored_unless_the_file_says_fail() -> None:
    assert parse_connector_config(_config()).destination.on_unknown_key is UnknownKeys.IGNORE
    iceberg = parse_connector_config(_config(type="ICEBERG", on_unknown_key="FAIL"))
    assert iceberg.destination.on_unknown_key is UnknownKeys.FAIL


def test_a_bad_on_unknown_key_names_the_field_and_the_values() -> None:
    with pytest.raises(ConnectorConfigError, match=r"destination\.on_unknown_key.*'IGNORE' or 'FAIL'"):
        parse_connector_config(_config(on_unknown_key="DROP"))


@pytest.mark.parametrize(
    ("written", "ingestion"), [({}, None), ({"schema_evolution": True}, True), ({"schema_evolution": False}, False)]
)
def test_the_ingestion_follows_the_table_unless_the_file_sets_schema_evolution(
    written: dict[str, Any], ingestion: bool | None
) -> None:
    destination = parse_connector_config(_config(**written)).destination

    assert destination.ingest_schema_evolution is ingestion
    # Provisioning still creates the table with ENABLE_SCHEMA_EVOLUTION unless told otherwise.
    assert destination.schema_evolution is (ingestion is not False)
