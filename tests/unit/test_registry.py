"""The registry of sources: every room finds a source's part there by ``source.type``."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from airflow_kinesis_snowflake import registry
from airflow_kinesis_snowflake.config import (
    ConnectorConfigError,
    dynamodb_connectors,
    kinesis_connectors,
    parse_any_connector_config,
)
from airflow_kinesis_snowflake.core.engine.sink import Sink
from airflow_kinesis_snowflake.core.engine.source import Source
from airflow_kinesis_snowflake.core.load.snowflake_sink import SnowflakeSink
from airflow_kinesis_snowflake.registry import ROLES, SOURCE_TYPES, SOURCES, of_source, registered, source_of
from airflow_kinesis_snowflake.status import ConnectorStatus, DynamoDBConnectorStatus

PACKAGE = Path(registry.__file__).parent

KINESIS = {
    "connector_id": "orders",
    "source": {"stream_name": "orders", "region": "eu-west-1", "application_name": "orders-app"},
    "destination": {"database": "RAW", "schema": "KINESIS", "table": "ORDERS"},
}
DYNAMODB = {
    "connector_id": "tables",
    "source": {"type": "dynamodb", "region": "eu-west-1", "application_name": "tables-app", "tables": ["Orders"]},
    "destination": {"database": "RAW", "schema": "DDB"},
}

#: Each role's parameters after the first (the connector, or its status, or the CLI's arguments); a
#: role filled by a class names the protocol the class implements.
ROLE_PARAMETERS: dict[str, list[str] | type | None] = {
    "connector_model": None,
    "dags": ["backup_dir"],
    "status": ["batches"],
    "lag_section": [],
    "policy": [],
    "job": ["credentials", "attempt_id"],
    "source": Source,
    "sink": Sink,
}


def protocol_members(protocol: type) -> tuple[list[str], list[str]]:
    """A protocol's class attributes (its annotations) and its methods, by name."""
    attributes = [name for name in protocol.__annotations__ if not name.startswith("_")]
    methods = [name for name, value in vars(protocol).items() if inspect.isfunction(value) and not name.startswith("_")]
    return attributes, methods


def check_implements(part: object, protocol: type, source_type: str) -> None:
    """``part`` is a class with every attribute and method of ``protocol``, each method with the
    protocol's parameters (names and kinds), and it names ``source_type`` when the protocol has one."""
    assert inspect.isclass(part), f"{source_type}: {part!r} is not a class implementing {protocol.__name__}"
    attributes, methods = protocol_members(protocol)
    assert attributes and methods
    for name in attributes:
        assert hasattr(part, name), f"{source_type}: {part.__name__} has no {name} ({protocol.__name__})"
    if "source_type" in attributes:
        assert getattr(part, "source_type", None) == source_type
    for name in methods:
        method = getattr(part, name, None)
        assert inspect.isfunction(method), f"{source_type}: {part.__name__}.{name} is missing ({protocol.__name__})"
        expected = inspect.signature(getattr(protocol, name)).parameters.values()
        found = inspect.signature(method).parameters.values()
        assert [(p.name, p.kind) for p in found] == [(p.name, p.kind) for p in expected], (
            f"{source_type}: {part.__name__}.{name}{inspect.signature(method)} is not "
            f"{protocol.__name__}.{name}{inspect.signature(getattr(protocol, name))}"
        )


def test_every_role_is_described_here() -> None:
    assert set(ROLES) == set(ROLE_PARAMETERS)


@pytest.mark.parametrize("source_type", SOURCE_TYPES)
@pytest.mark.parametrize("role", ROLES)
def test_every_part_of_every_source_exists_with_its_roles_signature(source_type: str, role: str) -> None:
    part = registered(source_type).part(role)
    expected = ROLE_PARAMETERS[role]
    if expected is None:  # the connector model
        assert part.model_fields["source"] is not None
        return
    if isinstance(expected, type):  # a class implementing a protocol
        check_implements(part, expected, source_type)
        return
    parameters = list(inspect.signature(part).parameters.values())
    assert len(parameters) == 1 + len(expected), f"{source_type}.{role}: {parameters}"
    assert [p.name for p in parameters[1:]] == expected
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters[1:])


@pytest.mark.parametrize(("data", "source_type"), [(KINESIS, "kinesis"), (DYNAMODB, "dynamodb")])
def test_a_connector_file_is_read_with_the_model_its_source_type_registers(
    data: dict[str, object], source_type: str
) -> None:
    config = parse_any_connector_config(data, source="orders.yaml")
    assert config.source_type == source_type
    assert isinstance(config, registered(source_type).part("connector_model"))
    assert source_of(config) is SOURCES[source_type]


def test_a_kinesis_connector_may_name_its_source_type_or_leave_it_out() -> None:
    named = {**KINESIS, "source": {**KINESIS["source"], "type": "kinesis"}}  # type: ignore[dict-item]
    assert parse_any_connector_config(named).source_type == "kinesis"


def test_an_unregistered_source_type_is_refused_naming_the_registered_ones() -> None:
    with pytest.raises(ConnectorConfigError, match=r"(?s)orders\.yaml.*source\.type: must be kinesis or dynamodb"):
        parse_any_connector_config({**KINESIS, "source": {"type": "kafka"}}, source="orders.yaml")
    with pytest.raises(KeyError, match="'kafka' is not registered; the sources are kinesis, dynamodb"):
        registered("kafka")
    with pytest.raises(KeyError, match="not a role"):
        registered("kinesis").part("reader")


def test_connectors_and_statuses_are_picked_by_their_source() -> None:
    kinesis = parse_any_connector_config(KINESIS)
    dynamodb = parse_any_connector_config(DYNAMODB)
    both = [dynamodb, kinesis, dynamodb]
    assert kinesis_connectors(both) == [kinesis]
    assert dynamodb_connectors(both) == [dynamodb, dynamodb]
    statuses: list[ConnectorStatus | DynamoDBConnectorStatus] = [
        ConnectorStatus(connector_id="orders", application_name="a", stream_name="s", table="T"),
        DynamoDBConnectorStatus(connector_id="tables", application_name="b", safe_age_hours=20),
    ]
    assert [s.connector_id for s in of_source(statuses, "dynamodb")] == ["tables"]
    assert source_of(statuses[0]).source_type == "kinesis"


def test_no_room_dispatches_on_a_connectors_class() -> None:
    """Dispatch goes through the registry: no ``isinstance`` of a connector model or status elsewhere."""
    pattern = re.compile(r"isinstance\([^)]*Connector(Config|Status)")
    found = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found


class _SourceMissingARead:
    source_type = "kinesis"

    def units(self) -> list[object]:
        return []

    def position_to_text(self, unit: object, position: object) -> str:
        return ""

    def position_from_text(self, unit: object, text: str) -> object:
        return None


class _SourceReadingWithoutACutoff(_SourceMissingARead):
    def read(self, unit: object, start: object, *, max_records: int) -> object:
        return None


@pytest.mark.parametrize("part", [_SourceMissingARead, _SourceReadingWithoutACutoff])
def test_the_source_check_refuses_a_class_that_misses_a_method_or_a_parameter(part: type) -> None:
    with pytest.raises(AssertionError, match=r"\.read"):
        check_implements(part, Source, "kinesis")


def test_the_sink_check_refuses_a_sink_without_the_ledger_guard() -> None:
    members = {name: getattr(SnowflakeSink, name) for name in dir(SnowflakeSink) if not name.startswith("__")}
    del members["advance_ledger"]
    with pytest.raises(AssertionError, match=r"\.advance_ledger is missing"):
        check_implements(type("SinkWithoutTheGuard", (), members), Sink, "kinesis")
