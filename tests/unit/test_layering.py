"""The house rule: imports flow one way, config -> core -> hooks -> operators -> dags.

``core`` ships to the Spark executors, so it imports no Airflow; inside it, the Spark job imports
neither the lease-table code nor the admin protocols, and the shared vocabulary imports nothing
of the package.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_kinesis_snowflake"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules_loaded_by(module: str) -> list[str]:
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded: list[str] = json.loads(out)
    return loaded


@pytest.mark.parametrize("path", sorted((PACKAGE / "core").rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_core_imports_nothing_of_airflow_hooks_operators_or_dags(path: Path) -> None:
    outward = tuple(f"airflow_kinesis_snowflake.{room}" for room in ("hooks", "operators", "dags", "config"))
    bad = {n for n in _imports(path) if n == "airflow" or n.startswith(("airflow.", *outward))}
    assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


def test_the_spark_job_loads_no_airflow_lease_table_or_admin_code() -> None:
    loaded = _modules_loaded_by("airflow_kinesis_snowflake.spark_jobs.kinesis_to_snowflake")
    forbidden = ("airflow.", "airflow_kinesis_snowflake.core.state", "airflow_kinesis_snowflake.core.admin")
    bad = [name for name in loaded if name == "airflow" or name.startswith(forbidden)]
    assert "airflow_kinesis_snowflake.core.job" in loaded
    assert not bad, bad


def test_the_shared_vocabulary_imports_nothing_of_the_package() -> None:
    assert not {
        name for name in _imports(PACKAGE / "core" / "model.py") if name.startswith("airflow_kinesis_snowflake")
    }


@pytest.mark.parametrize("room", ["sources", "state", "load"])
def test_sources_state_and_load_do_not_import_the_protocols_or_admin(room: str) -> None:
    forbidden = ("airflow_kinesis_snowflake.core.batch", "airflow_kinesis_snowflake.core.admin")
    for path in sorted((PACKAGE / "core" / room).rglob("*.py")):
        bad = {name for name in _imports(path) if name.startswith(forbidden)}
        assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


def test_operators_do_not_import_each_other() -> None:
    for path in sorted((PACKAGE / "operators").glob("*.py")):
        bad = {name for name in _imports(path) if name.startswith("airflow_kinesis_snowflake.operators")}
        assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"
