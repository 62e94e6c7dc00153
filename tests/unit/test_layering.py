"""The house rule: imports flow one way, config -> core -> hooks -> operators -> dags.

``core`` ships to the Spark executors, so it imports no Airflow; inside it, the Spark job imports
neither the lease-table code nor the admin protocols, and the shared vocabulary imports nothing
of the package.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_kinesis_snowflake"


def _package_files() -> list[Path]:
    """Every module of the package, ``spark_jobs`` (a link to the top-level folder) included."""
    return sorted(
        Path(root) / name
        for root, _, names in os.walk(PACKAGE, followlinks=True)
        for name in names
        if name.endswith(".py")
    )


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted((PACKAGE / "core").rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_core_imports_nothing_of_airflow_hooks_operators_or_dags(path: Path) -> None:
    outward = tuple(f"airflow_kinesis_snowflake.{room}" for room in ("hooks", "operators", "dags", "config"))
    bad = {n for n in _imports(path) if n == "airflow" or n.startswith(("airflow.", *outward))}
    assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


def _modules_loaded_by(module: str, then: str = "") -> list[str]:
    code = f"import json, sys, {module}; {then}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded: list[str] = json.loads(out)
    return loaded


def test_the_spark_job_loads_no_airflow_lease_table_or_admin_code() -> None:
    # The entry point, then the job its driver finds for a Kinesis batch.
    loaded = _modules_loaded_by(
        "airflow_kinesis_snowflake.spark_jobs.kinesis_to_snowflake",
        then="from airflow_kinesis_snowflake.core.engine.driver import source_job; source_job('kinesis')",
    )
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


#: The operators' modules that hold no operator, only what several share (a mixin).
SHARED_BY_OPERATORS = {"airflow_kinesis_snowflake.operators.spark_job"}


def test_operators_do_not_import_each_other() -> None:
    for path in sorted((PACKAGE / "operators").glob("*.py")):
        imported = {name for name in _imports(path) if name.startswith("airflow_kinesis_snowflake.operators")}
        bad = imported - SHARED_BY_OPERATORS
        assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


def test_the_modules_operators_share_define_no_operator() -> None:
    for name in SHARED_BY_OPERATORS:
        text = (PACKAGE.parent / (name.replace(".", "/") + ".py")).read_text()
        assert "BaseOperator" not in text and not re.search(r"^class \w+Operator\b", text, re.M), name


# -- the whole package: no cycle, and every import downward ------------------------------------------------------

#: The package's rooms from the bottom up: a module imports only from its own room or a lower one.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "core", "spark_jobs", "registry", "compat"),
    ("config", "environment", "public_key", "get_provider_info", "backups", "metrics"),
    ("hooks",),
    ("lineage", "status", "triggers"),
    ("operators", "sensors"),
    ("dags", "plugins"),
    ("__main__",),
)


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_graph() -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports, at its top or inside a function."""
    modules = {_module(p): p for p in _package_files()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for imported in _imports(path):
            if imported in modules:
                found.add(imported)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {f"{node.module}.{a.name}" for a in node.names} & modules.keys()
        graph[name] = found - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_packages_imports_form_no_cycle() -> None:
    assert _cycles(_package_graph()) == []


def test_the_cycle_check_finds_a_cycle_through_a_function_level_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_every_import_goes_to_the_same_room_or_a_lower_one() -> None:
    rank = {room: level for level, rooms in enumerate(LAYERS) for room in rooms}

    def room(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else "__init__"

    graph = _package_graph()
    unplaced = {room(m) for m in graph} - rank.keys()
    assert not unplaced, f"rooms with no layer in LAYERS: {sorted(unplaced)}"
    upward = sorted(
        f"{module} imports {imported}"
        for module, imported_modules in graph.items()
        for imported in imported_modules
        if rank[room(imported)] > rank[room(module)]
    )
    assert upward == []


#: Private names of other modules the package may call (the standard library's, documented there).
ALLOWED_PRIVATE_CALLS = {"sys._getframe"}


def test_no_object_calls_another_objects_private_methods() -> None:
    """A sink, a hook or a protocol that needs another's private step gets a public one instead."""
    found = []
    for path in _package_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            name, owner = node.func.attr, node.func.value
            if not name.startswith("_") or name.startswith("__"):
                continue
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                continue
            if f"{ast.unparse(owner)}.{name}" in ALLOWED_PRIVATE_CALLS:
                continue
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node.func)}")
    assert not found, found
