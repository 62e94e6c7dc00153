"""Run a real DAG with ``dag.test()`` in a fresh process, against an Airflow home on SQLite."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.emulators.servers import REPO_ROOT

STARTUP = Path(__file__).with_name("startup")

DAGS_FOLDER = REPO_ROOT / "dags"


def airflow_home_env(airflow_home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for an isolated Airflow: its own home, SQLite metadata DB, no examples."""
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(airflow_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            # startup/ holds the sitecustomize that imports PySpark from the installed package.
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(STARTUP), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        }
    )
    env.update(extra or {})
    return env


def migrate(env: Mapping[str, str]) -> None:
    """Create the metadata database once per Airflow home."""
    home = Path(env["AIRFLOW_HOME"])
    if (home / "airflow.db").exists():
        return
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        env=dict(env),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def run_dag(
    dag_id: str,
    env: Mapping[str, str],
    *,
    dag_file: Path | None = None,
    log_path: Path | None = None,
    conf: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``dag.test()`` the DAG in a child process; returns it (exit code 0 only on a successful run)."""
    migrate(env)
    dag_file = dag_file or DAGS_FOLDER / "kinesis_snowflake_orders.py"
    args = [sys.executable, "-m", "tests.emulators.run_dag", str(dag_file), dag_id]
    if conf:
        args += ["--conf", conf]
    # dag.test() serialises the DAG from the DAGs folder, so that folder must hold the file.
    run_env = {**env, "AIRFLOW__CORE__DAGS_FOLDER": str(dag_file.parent)}
    proc = subprocess.run(args, env=run_env, cwd=REPO_ROOT, capture_output=True, text=True)
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(proc.stdout + proc.stderr)
    return proc
