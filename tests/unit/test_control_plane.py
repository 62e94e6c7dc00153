"""The control plane runs without pyspark: it comes with the ``spark-submit`` extra, for the workers
that run spark-submit, and nothing else imports it.

In a fresh interpreter where any import of ``pyspark`` fails, every module of the package imports
(the Spark job's entry points too: the hook names their files), the example DAGs load through the DAG
factory, and the command line answers ``--help`` and ``validate``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from airflow_kinesis_snowflake.environment import (
    DISTRIBUTION,
    INSTALL_SPARK_SUBMIT,
    SPARK_SUBMIT_EXTRA,
    SparkSubmitNotFoundError,
    check_spark_submit,
)

ROOT = Path(__file__).resolve().parents[2]

# Run in a fresh interpreter: pyspark refused by a meta path finder ahead of every other, then the
# package, the DAGs and the command line; prints what was loaded and which pyspark imports were tried.
WITHOUT_PYSPARK = """
import contextlib, importlib, importlib.abc, io, json, pkgutil, runpy, sys
from pathlib import Path

tried = []

class NoPyspark(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "pyspark":
            tried.append(name)
            raise ImportError(f"pyspark is not installed here (importing {name})", name=name)
        return None

sys.meta_path.insert(0, NoPyspark())
root = Path(sys.argv[1])

import airflow_kinesis_snowflake as package

modules = sorted(m.name for m in pkgutil.walk_packages(package.__path__, "airflow_kinesis_snowflake."))
for name in modules:
    importlib.import_module(name)

try:
    from airflow.dag_processing.dagbag import DagBag
except ImportError:  # Airflow 3.0 and 3.1 keep it in airflow.models
    from airflow.models.dagbag import DagBag

from airflow_kinesis_snowflake.dags import build_connector_file_dags

bag = DagBag(dag_folder=str(root / "dags"))
dynamodb = build_connector_file_dags(root / "demo" / "connectors" / "customers.yaml")

from airflow_kinesis_snowflake.__main__ import main

help_text = io.StringIO()
with contextlib.redirect_stdout(help_text), contextlib.suppress(SystemExit):
    main(["--help"])
with contextlib.redirect_stdout(io.StringIO()):
    validate = main(["validate", str(root / "dags" / "connectors")])

print(json.dumps({
    "modules": modules,
    "import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
    "dags": sorted(bag.dags) + sorted(dynamodb),
    "help": help_text.getvalue(),
    "validate": validate,
    "tried": tried,
    "loaded": sorted(m for m in sys.modules if m.partition(".")[0] == "pyspark"),
}))
"""


def _without_pyspark() -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PYSPARK, str(ROOT)], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.fixture(scope="module")
def without_pyspark() -> dict[str, object]:
    return _without_pyspark()


def test_every_module_of_the_package_imports_without_pyspark(without_pyspark: dict[str, object]) -> None:
    modules = without_pyspark["modules"]
    assert isinstance(modules, list)
    # The whole package was walked, the Spark job's entry points and the data plane's modules included.
    assert {
        "airflow_kinesis_snowflake.spark_jobs.kinesis_to_snowflake",
        "airflow_kinesis_snowflake.spark_jobs.dynamodb_to_snowflake",
        "airflow_kinesis_snowflake.core.job",
        "airflow_kinesis_snowflake.core.dynamodb_job",
        "airflow_kinesis_snowflake.hooks.spark",
        "airflow_kinesis_snowflake.plugins.lag_page",
        "airflow_kinesis_snowflake.__main__",
    } <= set(modules)
    assert without_pyspark["tried"] == []
    assert without_pyspark["loaded"] == []


def test_the_example_dags_load_and_the_command_line_runs_without_pyspark(without_pyspark: dict[str, object]) -> None:
    assert without_pyspark["import_errors"] == {}
    dags = without_pyspark["dags"]
    assert isinstance(dags, list)
    assert "kinesis_snowflake_orders_ingest" in dags
    assert any(dag.startswith("dynamodb_snowflake_") and dag.endswith("_sync") for dag in dags), dags
    assert "usage:" in str(without_pyspark["help"])
    assert without_pyspark["validate"] == 0


def test_pyspark_is_an_extra_of_the_distribution_named_in_the_error() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    assert project["name"] == DISTRIBUTION
    assert not [r for r in project["dependencies"] if r.startswith("pyspark")]
    assert [r for r in project["optional-dependencies"][SPARK_SUBMIT_EXTRA] if r.startswith("pyspark")]


def test_a_submission_without_spark_submit_names_the_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))

    with pytest.raises(SparkSubmitNotFoundError) as raised:
        check_spark_submit()

    assert INSTALL_SPARK_SUBMIT == "pip install 'airflow-provider-kinesis-snowflake[spark-submit]'"
    assert INSTALL_SPARK_SUBMIT in str(raised.value)
    assert f"spark-submit is not on the PATH, nor next to {tmp_path / 'bin' / 'python'}" in str(raised.value)


def test_spark_submit_on_the_path_or_next_to_the_interpreter_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for directory in ("path", "venv"):
        (tmp_path / directory).mkdir()
        (tmp_path / directory / "spark-submit").write_text("#!/bin/sh\n")
        (tmp_path / directory / "spark-submit").chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "python"))

    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    assert check_spark_submit() == str(tmp_path / "path" / "spark-submit")
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    assert check_spark_submit() == str(tmp_path / "venv" / "spark-submit")
