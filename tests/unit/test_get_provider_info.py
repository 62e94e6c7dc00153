"""Provider metadata: discoverable through the entry point, valid against Airflow's schema."""

from __future__ import annotations

import importlib
import json
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import airflow
import jsonschema
import pytest

import airflow_kinesis_snowflake
from airflow_kinesis_snowflake.compat import airflow_at_least
from airflow_kinesis_snowflake.get_provider_info import CONN_FIELDS_SINCE, get_provider_info


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


# -- connection types ----------------------------------------------------------------------------------------------

# The extras users set, and the connection type whose form has them (docs/connections.md).
EXTRAS = {
    "kinesis_snowflake_spark": {"driver_identity", "snowflake_connection_ref", "deploy-mode"},
    "kinesis_snowflake_snowflake": {"protocol", "host", "port", "account", "private_key_passphrase"},
}


def _hook_class(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_each_connection_type_names_its_hook_and_the_extras_its_hook_reads() -> None:
    types = {c["connection-type"]: c for c in get_provider_info()["connection-types"]}
    assert set(types) == set(EXTRAS)
    for conn_type, declared in types.items():
        hook = _hook_class(declared["hook-class-name"])
        assert (hook.conn_type, hook.hook_name) == (conn_type, declared["hook-name"])
        assert EXTRAS[conn_type] <= set(declared["conn-fields"]), conn_type
        # The hook's classmethod gives the same behaviour as the declaration (kebab-case there).
        behaviour = declared["ui-field-behaviour"]
        assert hook.get_ui_field_behaviour() == {
            "hidden_fields": behaviour["hidden-fields"],
            "relabeling": behaviour["relabeling"],
            "placeholders": behaviour["placeholders"],
        }
        assert "get_ui_field_behaviour" in vars(hook)
        for field in declared["conn-fields"].values():
            assert field["label"] and field["schema"]["type"], field


@pytest.mark.skipif(
    not airflow_at_least(CONN_FIELDS_SINCE),
    reason=f"Airflow reads conn-fields from {CONN_FIELDS_SINCE} on; before, the extras go in the Extra JSON",
)
def test_airflow_lists_the_connection_types_with_their_form_fields() -> None:
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    for conn_type, extras in EXTRAS.items():
        hook = manager.hooks[conn_type]
        assert hook is not None and hook.package_name == "airflow-provider-kinesis-snowflake", conn_type
        widgets = manager.connection_form_widgets
        for extra in extras:
            widget = widgets[f"extra__{conn_type}__{extra}"]
            assert widget.field_name == extra and widget.package_name == "airflow-provider-kinesis-snowflake"
    assert manager.connection_form_widgets["extra__kinesis_snowflake_snowflake__private_key_passphrase"].is_sensitive
    assert manager.connection_form_widgets["extra__kinesis_snowflake_spark__driver_identity"].field["schema"][
        "type"
    ] == ["boolean", "null"]
    assert manager.field_behaviours["kinesis_snowflake_snowflake"]["hidden_fields"] == ["host", "port"]
