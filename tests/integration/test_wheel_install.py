"""The wheel, installed alone into a fresh virtual environment, sets up a DAGs folder that Airflow loads.

As a user does it (docs/install.md): build the wheel, install it with its dependencies only (no
repository on ``sys.path``, no dev extra), write the DAG files with
``python -m airflow_kinesis_snowflake init``, and let Airflow parse the folder. Dependencies come
from uv's cache, which ``make install`` fills: versions are constrained to the project venv's, so
nothing is downloaded when the cache holds them; uv goes to the index only when an offline
attempt fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

from tests.emulators.servers import REPO_ROOT

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


def test_the_wheel_alone_sets_up_a_dags_folder_airflow_loads(tmp_path: Path) -> None:
    assert UV.is_file(), f"{UV} is missing: `make install` installs uv into the project venv"
    dist = tmp_path / "dist"
    uv(["build", "--wheel", "--out-dir", str(dist), str(source_tree(tmp_path / "src"))], cwd=tmp_path)
    (wheel,) = dist.glob("*.whl")
    # The entry points spark-submit runs are shipped from the top-level spark_jobs/ folder, as files.
    with zipfile.ZipFile(wheel) as archive:
        for job in sorted((REPO_ROOT / "spark_jobs").glob("*.py")):
            assert archive.read(f"airflow_kinesis_snowflake/spark_jobs/{job.name}") == job.read_bytes()

    # The project venv's versions: what the suite tests, and what uv's cache holds.
    freeze = subprocess.run(
        [str(UV), "pip", "freeze", "--python", sys.executable, "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.splitlines()
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("\n".join(line for line in freeze if not line.startswith(f"{PROJECT}=")) + "\n")
    venv = tmp_path / "venv"
    uv(["venv", "--python", os.path.realpath(sys.executable), str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    uv(["pip", "install", "--python", str(python), "--constraints", str(constraints), str(wheel)], cwd=tmp_path)

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
    assert Path(bag["package"]).is_relative_to(venv), f"the provider came from {bag['package']}, not the wheel"
    assert bag["import_errors"] == {}
    assert set(bag["dag_ids"]) == EXPECTED_DAG_IDS
