"""Run a real DAG with ``dag.test()`` in a fresh process, against an Airflow home on SQLite."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from tests.emulators.servers import REPO_ROOT

STARTUP = Path(__file__).with_name("startup")

DAGS_FOLDER = REPO_ROOT / "dags"
# Metadata databases as ``airflow db migrate`` makes them, one per installation (see migrate()).
DATABASE_TEMPLATES = REPO_ROOT / ".test-work" / "airflow-db"


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


def _run_migrate(env: Mapping[str, str]) -> None:
    airflow = str(Path(sys.executable).parent / "airflow")
    proc = subprocess.run([airflow, "db", "migrate"], env=dict(env), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{(proc.stdout + proc.stderr)[-4000:]}")


@functools.cache
def _installation() -> str:
    """Airflow's version, and a digest of everything installed (a provider may bring tables of its own)."""
    installed = sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions())
    digest = hashlib.sha256("\n".join(installed).encode()).hexdigest()[:16]
    return f"{importlib.metadata.version('apache-airflow-core')}-{digest}"


def _migrated_database(env: Mapping[str, str]) -> Path:
    """A metadata database ``airflow db migrate`` made, once per installation, to copy into new homes.

    It holds no path or setting of the home it was made in: the schema, its Alembic version, the
    default pool and the log file name templates (Airflow's defaults, which the tests keep).
    """
    template = DATABASE_TEMPLATES / _installation() / "airflow.db"
    if template.exists():
        return template
    template.parent.mkdir(parents=True, exist_ok=True)
    # One pytest-xdist worker makes it, the others wait on the lock; made aside and moved in whole.
    with (template.parent / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not template.exists():
            with tempfile.TemporaryDirectory(dir=template.parent) as made_in:
                made_env = {**env, "AIRFLOW_HOME": made_in}
                made_env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)
                _run_migrate(made_env)
                os.replace(Path(made_in) / "airflow.db", template)
    return template


def migrate(env: Mapping[str, str]) -> None:
    """Create the metadata database once per Airflow home (a copy of one ``airflow db migrate`` made)."""
    home = Path(env["AIRFLOW_HOME"])
    if (home / "airflow.db").exists():
        return
    home.mkdir(parents=True, exist_ok=True)
    database = env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
    if database is not None and database != f"sqlite:///{home / 'airflow.db'}":  # another one: made there
        _run_migrate(env)
        return
    shutil.copyfile(_migrated_database(env), home / "airflow.db")


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
