"""A Spark standalone cluster on loopback: a master and one worker started from the pyspark package.

``spark-class org.apache.spark.deploy.master.Master`` and ``...worker.Worker``, as a user starts them
(and as docker-compose.yml does), on free loopback ports, with the JVM options of the tests' other
Spark processes (spark_env.py). :func:`spark_cluster` waits until the worker is registered with the
master and stops both, with their executors, at the end.

The executors must not find this provider anywhere but in what the job ships (``--py-files``): the
project is installed editable in the venv and its source tree is on the tests' ``PYTHONPATH``, so
the venv's own Python would import it from there and a job that forgot to ship it would still pass.
:func:`write_executor_python` writes the Python the cluster's jobs run instead (the connector's
``spark.pyspark_python``): the venv's interpreter with every library, but neither the editable
install nor the source tree on the path for ``airflow_kinesis_snowflake``. Each of its runs is
recorded (arguments only) so that a test can tell it was used.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from tests.emulators.servers import REPO_ROOT, free_port
from tests.emulators.spark_env import JVM_OPTIONS, spark_env

PACKAGE = "airflow_kinesis_snowflake"
WORKER_CORES = 2
WORKER_MEMORY = "1g"
# The daemons' own heap: they only schedule.
DAEMON_MEMORY = "256m"

_SITECUSTOMIZE = '''"""Hide the provider's source tree and editable install from this interpreter (spark_cluster.py)."""

import importlib.machinery
import os
import sys

_HIDDEN = {hidden!r}


class _OnlyShipped:
    """Finds {package!r} on sys.path except in the source trees: in the archives a job ships."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != {package!r}:
            return None
        entries = [e for e in sys.path if os.path.realpath(e or os.getcwd()) not in _HIDDEN]
        spec = importlib.machinery.PathFinder.find_spec(name, entries)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not shipped with the job)", name=name)
        return spec


sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.meta_path.insert(0, _OnlyShipped)
'''

_WRAPPER = """#!/bin/sh
# The Python of the cluster's jobs: the venv's, without the provider's source tree (spark_cluster.py).
echo "$$ $*" >> {log}
PYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec {python} "$@"
"""


def _source_roots() -> set[str]:
    """The directories ``airflow_kinesis_snowflake`` is imported from without being shipped."""
    import airflow_kinesis_snowflake

    roots = {os.path.realpath(REPO_ROOT), os.path.realpath(Path(airflow_kinesis_snowflake.__file__).parents[1])}
    for finder in sys.meta_path:
        module = sys.modules.get(getattr(finder, "__module__", ""))
        mapping = (
            getattr(module, "MAPPING", None) if getattr(finder, "__module__", "").startswith("__editable__") else None
        )
        if isinstance(mapping, dict) and PACKAGE in mapping:
            roots.add(os.path.realpath(Path(mapping[PACKAGE]).parent))
    return roots


def write_executor_python(directory: Path) -> tuple[Path, Path]:
    """Write the cluster jobs' Python; returns it and the file each of its runs is recorded in."""
    site = directory / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(hidden=sorted(_source_roots()), package=PACKAGE))
    log = directory / "runs.log"
    log.touch()
    wrapper = directory / "python"
    wrapper.write_text(_WRAPPER.format(log=log, site=site, python=sys.executable))
    wrapper.chmod(0o755)
    return wrapper, log


@dataclass
class SparkCluster:
    """Where the cluster listens, and the Python its jobs run."""

    master_port: int
    master_ui_port: int
    worker_ui_port: int
    executor_python: Path
    executor_python_runs: Path
    work_dir: Path

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def spark_connection(self) -> dict[str, Any]:
        """An Airflow Spark connection to the master, client deploy mode."""
        return {
            "conn_type": "spark",
            "host": "spark://127.0.0.1",
            "port": self.master_port,
            "extra": {"deploy-mode": "client"},
        }

    def master_state(self) -> dict[str, Any]:
        """The master's web UI JSON: workers, active and completed applications."""
        state: dict[str, Any] = requests.get(f"http://127.0.0.1:{self.master_ui_port}/json/", timeout=5).json()
        return state

    def worker_state(self) -> dict[str, Any]:
        """The worker's web UI JSON: its running and finished executors, with their application ids."""
        state: dict[str, Any] = requests.get(f"http://127.0.0.1:{self.worker_ui_port}/json/", timeout=5).json()
        return state

    def job_env(self) -> dict[str, str]:
        """What a spark-submit process against this cluster needs besides the tests' Spark settings."""
        return {"SPARK_LOCAL_IP": "127.0.0.1"}


def _daemon_env(work_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    base = spark_env()
    env.update(
        {
            "SPARK_CONF_DIR": base["SPARK_CONF_DIR"],
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            "SPARK_DAEMON_JAVA_OPTS": " ".join(JVM_OPTIONS),
            "SPARK_LAUNCHER_OPTS": base["SPARK_LAUNCHER_OPTS"],
            "SPARK_LOG_DIR": str(work_dir),
            # The executors' Python workers import the tests' Spark daemon module (spark_env.py).
            "PYTHONPATH": str(REPO_ROOT),
        }
    )
    env.pop("SPARK_SUBMIT_OPTS", None)
    return env


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [_spark_class(), *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the daemon (a worker kills its executors on the way out), then its whole process group."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    try:
        os.killpg(process.pid, signal.SIGKILL)  # the group it leads: executors and their Python workers
    except ProcessLookupError:
        pass


def _wait_for_worker(cluster: SparkCluster, processes: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for process, log in zip(processes, logs, strict=True):
            if process.poll() is not None:
                raise RuntimeError(f"{log.stem} exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            state = cluster.master_state()
            if state.get("aliveworkers", 0) >= 1 and state.get("cores", 0) >= WORKER_CORES:
                cluster.worker_state()
                return
        except (requests.RequestException, ValueError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"no worker registered with the master within 120 s; see {', '.join(map(str, logs))}")


@contextmanager
def spark_cluster(work_dir: Path) -> Iterator[SparkCluster]:
    """Start a master and one worker (2 cores, 1g) on loopback; stop both at the end."""
    executor_python, runs = write_executor_python(work_dir / "executor-python")
    cluster = SparkCluster(free_port(), free_port(), free_port(), executor_python, runs, work_dir)
    env = _daemon_env(work_dir)
    master_log, worker_log = work_dir / "master.log", work_dir / "worker.log"
    master = _start(
        [
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(cluster.master_port)),
            *("--webui-port", str(cluster.master_ui_port)),
        ],
        env,
        master_log,
    )
    processes = [master]
    try:
        worker = _start(
            [
                "org.apache.spark.deploy.worker.Worker",
                cluster.master_url,
                *("--host", "127.0.0.1", "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY),
                *("--webui-port", str(cluster.worker_ui_port), "--work-dir", str(work_dir / "worker")),
            ],
            env,
            worker_log,
        )
        processes.insert(0, worker)
        _wait_for_worker(cluster, processes[::-1], [master_log, worker_log])
        yield cluster
    finally:
        for process in processes:  # the worker first: it stops its executors
            _stop(process)
