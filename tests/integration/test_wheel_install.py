"""The wheel, installed alone into a fresh virtual environment, sets up a DAGs folder that Airflow loads,
and runs an ingest DAG on the emulated EMR Serverless without PySpark.

As a user does it (docs/install.md): build the wheel, install it with its dependencies only (no
repository on ``sys.path``, no dev extra, no ``spark-submit`` extra), write the DAG files with
``python -m airflow_kinesis_snowflake init``, and let Airflow parse the folder. The Apache Spark
provider 5.x requires pyspark itself, so the install brings one all the same: it is removed from the
venv afterwards, and the tests run the control plane without it, as where pyspark is not wanted. Dependencies come
from uv's cache, which ``make install`` fills: versions are constrained to the project venv's, so
nothing is downloaded when the cache holds them; uv goes to the index only when an offline
attempt fails. The wheel and its venv are built once per test run and shared by this module's tests,
across pytest-xdist workers too.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.operators.lease_table import CreateLeaseTableOperator
from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.servers import REPO_ROOT
from tests.integration.hooks.test_emr_serverless import ROLE, emr_serverless, spark_connection
from tests.integration.test_ingest_dag import write_connector

PROJECT = "airflow-provider-kinesis-snowflake"
UV = Path(sys.executable).parent / "uv"
EXPECTED_DAG_IDS = {
    "kinesis_snowflake_cleanup",
    "kinesis_snowflake_example_provision",
    "kinesis_snowflake_example_ingest",
    "kinesis_snowflake_example_reset",
    "kinesis_snowflake_example_restore",
}

DAGBAG = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
import airflow_kinesis_snowflake

bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({
    "dag_ids": sorted(bag.dag_ids),
    "import_errors": {path: str(error) for path, error in bag.import_errors.items()},
    "package": airflow_kinesis_snowflake.__file__,
}))
"""

# dag.test() of one DAG of a DAG file; the last line says how the run ended and what was imported.
DAG_TEST = """
import json, runpy, sys
import airflow_kinesis_snowflake

dag = runpy.run_path(sys.argv[1])[sys.argv[2]]
run = dag.test()
print(json.dumps({"state": str(getattr(run, "state", "unknown")), "package": airflow_kinesis_snowflake.__file__}))
"""


@dataclass(frozen=True)
class InstalledWheel:
    """The built wheel and the virtual environment it was installed into, alone."""

    wheel: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


def uv(args: Sequence[str], cwd: Path) -> None:
    """``uv <args>`` from the cache alone, and from the index only if that fails."""
    offline = subprocess.run([str(UV), *args, "--offline"], cwd=cwd, capture_output=True, text=True, timeout=600)
    if offline.returncode == 0:
        return
    online = subprocess.run([str(UV), *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    command = " ".join(args)
    assert online.returncode == 0, f"uv {command} failed offline:\n{offline.stderr}\nand online:\n{online.stderr}"


def source_tree(target: Path) -> Path:
    """What the wheel is built from: the package (its links kept: ``spark_jobs`` is a link to the
    top-level folder, copied too) and the repository's top-level files (pyproject, README...)."""
    target.mkdir()
    for path in REPO_ROOT.iterdir():
        if path.is_file() and not path.name.startswith("."):
            shutil.copy2(path, target)
    for folder in ("airflow_kinesis_snowflake", "spark_jobs"):
        shutil.copytree(
            REPO_ROOT / folder, target / folder, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    return target


def user_env(airflow_home: Path) -> dict[str, str]:
    """An environment that knows nothing of the repository or of the test session's Airflow."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHON", "VIRTUAL_ENV"))}
    env.update({"AIRFLOW_HOME": str(airflow_home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})
    return env


def build_and_install(work: Path) -> InstalledWheel:
    """Build the wheel into ``work/dist`` and install it, with its dependencies only, into ``work/venv``;
    then remove pyspark (and its py4j)."""
    assert UV.is_file(), f"{UV} is missing: `make install` installs uv into the project venv"
    dist = work / "dist"
    uv(["build", "--wheel", "--out-dir", str(dist), str(source_tree(work / "src"))], cwd=work)
    (wheel,) = dist.glob("*.whl")
    # The project venv's versions: what the suite tests, and what uv's cache holds.
    freeze = subprocess.run(
        [str(UV), "pip", "freeze", "--python", sys.executable, "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.splitlines()
    constraints = work / "constraints.txt"
    constraints.write_text("\n".join(line for line in freeze if not line.startswith(f"{PROJECT}=")) + "\n")
    installed = InstalledWheel(wheel, work / "venv")
    uv(["venv", "--python", os.path.realpath(sys.executable), str(installed.venv)], cwd=work)
    uv(["pip", "install", "--python", str(installed.python), "--constraints", str(constraints), str(wheel)], cwd=work)
    # The Apache Spark provider's requirement, not the package's: nothing but spark-submit needs it.
    uv(["pip", "uninstall", "--python", str(installed.python), "pyspark", "py4j"], cwd=work)
    return installed


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> InstalledWheel:
    """The wheel and its venv, built once per test run: the first pytest-xdist worker to ask builds them
    in the run's shared temporary folder, the others wait on the lock and use them."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, which holds every worker's
    work, done = root / "wheel-install", root / "wheel-install.done"
    with (root / "wheel-install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(work, ignore_errors=True)  # what a failed build left
            work.mkdir()
            build_and_install(work)
            done.touch()
    (wheel,) = (work / "dist").glob("*.whl")
    return InstalledWheel(wheel, work / "venv")


def test_the_wheel_alone_sets_up_a_dags_folder_airflow_loads(installed_wheel: InstalledWheel, tmp_path: Path) -> None:
    # The entry points spark-submit runs are shipped from the top-level spark_jobs/ folder, as files.
    with zipfile.ZipFile(installed_wheel.wheel) as archive:
        for job in sorted((REPO_ROOT / "spark_jobs").glob("*.py")):
            assert archive.read(f"airflow_kinesis_snowflake/spark_jobs/{job.name}") == job.read_bytes()

    python = installed_wheel.python
    env = user_env(tmp_path / "airflow-home")
    dags = tmp_path / "dags"
    init = subprocess.run(
        [str(python), "-m", "airflow_kinesis_snowflake", "init", str(dags)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert init.returncode == 0, init.stderr
    assert sorted(p.relative_to(dags).as_posix() for p in dags.rglob("*") if p.is_file()) == [
        "connectors/example.yaml",
        "kinesis_snowflake_connectors.py",
        "kinesis_snowflake_example.py",
    ]

    loaded = subprocess.run(
        [str(python), "-c", DAGBAG, str(dags)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    bag = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert Path(bag["package"]).is_relative_to(installed_wheel.venv), f"the provider came from {bag['package']}"
    assert bag["import_errors"] == {}
    assert set(bag["dag_ids"]) == EXPECTED_DAG_IDS


@pytest.mark.integration
def test_without_pyspark_the_wheel_runs_an_ingest_dag_on_emr_serverless_each_record_once(
    installed_wheel: InstalledWheel, aws_connections: Emulators, tmp_path: Path
) -> None:
    """The Airflow side of a managed platform needs no PySpark: the venv has none, parses the DAGs and runs
    an ingest DAG whose batch is a job run of the emulated EMR Serverless (which runs it with spark-submit
    of its own), and every record is loaded once."""
    python = installed_wheel.python
    env = user_env(tmp_path / "airflow-home")
    no_pyspark = subprocess.run(
        [str(python), "-c", "import pyspark"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert no_pyspark.returncode != 0 and "No module named 'pyspark'" in no_pyspark.stderr, no_pyspark.stderr

    emulators = aws_connections
    emr = emr_serverless(emulators)
    stream, app = unique("wheel"), unique("wheel-app")
    table = "WHEEL_" + app.split("-")[-1].upper()
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    put_json(create_stream(emulators, stream, 2), stream, [{"id": i} for i in range(20)])
    CreateLeaseTableOperator(task_id="lease_table", application_name=app, stream_name=stream).execute(context={})
    connector = {
        "connector_id": app.replace("-", "_"),
        "source": {"stream_name": stream, "region": "us-east-1", "application_name": app},
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "batch": {"schedule": None, "retries": 0},
        "spark": {
            "platform": "emr_serverless",
            "emr_serverless": {
                "application_id": emr.application_id,
                "execution_role_arn": ROLE,
                "artifacts": f"s3://{emr.bucket}/jobs",
                "poll_seconds": 1,
            },
        },
    }
    dags = tmp_path / "dags"
    dag_file = write_connector(dags, connector)
    dag_id = f"kinesis_snowflake_{connector['connector_id']}_ingest"
    env.update(emulators.airflow_env())
    env.update({"AIRFLOW_CONN_SPARK_DEFAULT": spark_connection(emr.secret_id), "AIRFLOW__CORE__DAGS_FOLDER": str(dags)})

    loaded = subprocess.run(
        [str(python), "-c", DAGBAG, str(dags)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    bag = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert bag["import_errors"] == {} and dag_id in bag["dag_ids"]

    migrate = subprocess.run(
        [str(installed_wheel.venv / "bin" / "airflow"), "db", "migrate"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert migrate.returncode == 0, (migrate.stdout + migrate.stderr)[-3000:]
    proc = subprocess.run(
        [str(python), "-c", DAG_TEST, str(dag_file), dag_id],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["state"].endswith("success"), output[-5000:]
    assert Path(result["package"]).is_relative_to(installed_wheel.venv), f"the provider came from {result['package']}"

    assert [r[0] for r in query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table} ORDER BY ID")] == list(range(20))
    leases = LeaseTable(emulators.boto3_client("dynamodb"), app).leases()
    assert len(leases) == 2 and all(lease.checkpoint for lease in leases.values())
    (run,) = emr.job_runs()
    assert run["state"] == "SUCCESS"
    # The entry point the installed package shipped, uploaded under the hash of its bytes.
    entry_point = run["jobDriver"]["sparkSubmit"]["entryPoint"]
    assert entry_point.startswith(f"s3://{emr.bucket}/jobs/sha256-")
    assert entry_point.endswith("/kinesis_to_snowflake.py")
