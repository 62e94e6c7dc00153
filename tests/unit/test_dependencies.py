"""Every third-party package the provider imports at run time is declared in pyproject.toml.

Each absolute import in ``airflow_kinesis_snowflake/`` (imports under ``if TYPE_CHECKING:`` excepted)
is located on disk and mapped to the installed distribution that owns the file, so a namespace
shared by several distributions (``airflow``, ``google``, ``snowflake``) maps to the right one.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_kinesis_snowflake"
# `apache-airflow` is how a provider depends on Airflow: it pins these two to its own release.
PROVIDED_BY_APACHE_AIRFLOW = {"apache-airflow-core", "apache-airflow-task-sdk"}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return _canonical(match.group(1))


def _declared() -> dict[str, set[str]]:
    """Distributions the package declares: ``dependencies``, and each extra offered to users (not ``dev``)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {"": {_requirement_name(r) for r in project["dependencies"]}}
    for extra, requirements in project.get("optional-dependencies", {}).items():
        if extra != "dev":
            declared[extra] = {_requirement_name(r) for r in requirements}
    return declared


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> set[str]:
    """Absolute module names imported outside ``if TYPE_CHECKING:`` blocks."""
    names: set[str] = set()
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            names |= {n for child in node.orelse for n in _runtime_imports(ast.Module(body=[child], type_ignores=[]))}
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        names |= _runtime_imports(node)
    return names


def _third_party(module: str) -> bool:
    top = module.split(".")[0]
    return top not in sys.stdlib_module_names and top != "airflow_kinesis_snowflake" and top != "__future__"


def _origin(module: str) -> Path:
    """The file that defines ``module`` or its nearest parent package, found on disk without importing it."""
    parts = module.split(".")
    spec = importlib.util.find_spec(parts[0])
    assert spec is not None, f"{module} is imported but not installed"
    origin = Path(spec.origin) if spec.origin else None
    directories = [Path(d) for d in spec.submodule_search_locations or ()]
    for part in parts[1:]:
        found: list[Path] = []
        for directory in directories:
            if (directory / part / "__init__.py").is_file():
                origin, found = directory / part / "__init__.py", [directory / part]
                break
            if (directory / f"{part}.py").is_file():
                origin, found = directory / f"{part}.py", []
                break
            if (directory / part).is_dir():  # a namespace package spread over several distributions
                found.append(directory / part)
        directories = found
    assert origin is not None, f"{module}: no file found"
    return origin


@cache
def _packages_distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


@cache
def _distributions_of(module: str) -> frozenset[str]:
    """The installed distributions whose RECORD lists the file defining ``module``."""
    origin = _origin(module).as_posix()
    owners = set()
    for name in _packages_distributions().get(module.split(".")[0], []):
        files = importlib.metadata.distribution(name).files or ()
        if any(origin.endswith("/" + file.as_posix()) for file in files):
            owners.add(_canonical(name))
    assert owners, f"{module} ({origin}) belongs to no installed distribution"
    return frozenset(owners)


def _imports_by_file() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        modules = {m for m in _runtime_imports(ast.parse(path.read_text())) if _third_party(m)}
        if modules:
            found[str(path.relative_to(ROOT))] = modules
    return found


def test_the_import_parser_sees_function_level_imports_and_skips_type_checking_ones() -> None:
    source = (
        "from typing import TYPE_CHECKING\nimport yaml\n"
        "if TYPE_CHECKING:\n    import pandas\nelse:\n    import orjson\n"
        "def f():\n    from google.protobuf.message import DecodeError\n    from . import sibling\n"
    )
    assert _runtime_imports(ast.parse(source)) == {"typing", "yaml", "orjson", "google.protobuf.message"}


def test_every_imported_third_party_package_is_declared() -> None:
    declared = _declared()
    allowed = set().union(*declared.values())
    if "apache-airflow" in declared[""]:
        allowed |= PROVIDED_BY_APACHE_AIRFLOW
    undeclared = {
        f"{file}: {module} ({', '.join(sorted(_distributions_of(module)))})"
        for file, modules in _imports_by_file().items()
        for module in modules
        if not _distributions_of(module) & allowed
    }
    assert not undeclared, "imported but not declared in pyproject.toml:\n" + "\n".join(sorted(undeclared))


def test_the_packages_named_in_the_issue_are_among_those_imported_and_declared() -> None:
    imported = {d for modules in _imports_by_file().values() for m in modules for d in _distributions_of(m)}
    assert {"cryptography", "botocore", "protobuf"} <= imported
    assert {"cryptography", "botocore", "protobuf"} <= _declared()[""]


def test_openlineage_is_imported_only_where_the_extra_is_optional() -> None:
    imported = {d for modules in _imports_by_file().values() for m in modules for d in _distributions_of(m)}
    assert "apache-airflow-providers-openlineage" not in imported or (
        "apache-airflow-providers-openlineage" in _declared().get("openlineage", set())
    )
