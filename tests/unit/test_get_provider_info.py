"""Provider metadata: discoverable through the entry point, valid against Airflow's schema."""

from __future__ import annotations

import importlib
import json
from importlib.metadata import entry_points
from pathlib import Path

import airflow
import jsonschema
import pytest

import airflow_kinesis_snowflake
from airflow_kinesis_snowflake.get_provider_info import get_provider_info


def test_entry_point_returns_the_provider_info() -> None:
    (entry,) = [e for e in entry_points(group="apache_airflow_provider") if e.value.startswith("airflow_kinesis")]
    assert entry.load()() == get_provider_info()


def test_provider_info_validates_against_airflow_schema() -> None:
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def _listed(kind: str) -> list[str]:
    return [module for entry in get_provider_info()[kind] for module in entry["python-modules"]]


def test_every_listed_module_imports() -> None:
    for kind in ("hooks", "operators", "sensors", "triggers"):
        for module in _listed(kind):
            importlib.import_module(module)


@pytest.mark.parametrize("kind", ["hooks", "operators", "sensors", "triggers"])
def test_every_module_of_the_package_room_is_listed(kind: str) -> None:
    room = Path(airflow_kinesis_snowflake.__file__).parent / kind
    modules = {f"airflow_kinesis_snowflake.{kind}.{p.stem}" for p in room.glob("*.py") if p.stem != "__init__"}
    assert modules, f"no module in {room}"
    assert modules == set(_listed(kind))


def test_the_lag_page_plugin_is_registered_in_the_provider_info_and_as_an_airflow_plugins_entry_point() -> None:
    import tomllib

    from airflow.plugins_manager import AirflowPlugin

    (plugin,) = get_provider_info()["plugins"]
    module, _, name = plugin["plugin-class"].rpartition(".")
    assert issubclass(getattr(importlib.import_module(module), name), AirflowPlugin)
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    entry = project["project"]["entry-points"]["airflow.plugins"][plugin["name"]]
    assert entry.replace(":", ".") == plugin["plugin-class"]
