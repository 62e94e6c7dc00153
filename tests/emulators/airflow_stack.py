"""A real Airflow 3 on loopback: api-server, scheduler, dag-processor and triggerer, each its own process.

The tests' other DAG runs go through ``dag.test()``; this stack runs DAGs as a deployment does: the
dag-processor parses the DAGs folder into the metadata database, the scheduler creates runs on
their schedules (or when triggered through the REST API) and runs their tasks with the
LocalExecutor, each task in a process that talks to the api-server's execution API.

Metadata database: SQLite, in the stack's own ``AIRFLOW_HOME``. Airflow 3 accepts SQLite with the
LocalExecutor (it has no SequentialExecutor any more, and ``airflow standalone`` runs exactly this
pair); its documentation calls SQLite fit for development and testing only, which is what this is.
It is a copy of what ``airflow db migrate`` made (see airflow_env.migrate), in place before the
processes start.

Authentication: the simple auth manager with one admin user whose password this module writes to
the passwords file before the api-server starts, so ``POST /auth/token`` with that user and
password returns a JWT for the REST API (the manager generates passwords only for users the file
lacks). The api-server and every component that signs or checks JWTs (the scheduler signs the
tasks' execution-API tokens) share one ``jwt_secret``.

Every port is on 127.0.0.1: the api-server's (also the tasks' execution API), and no log servers
(``--skip-serve-logs``): the task logs are files under ``AIRFLOW_HOME/logs``, read from there.

Each process gets its own session (process group), so stopping it reaches what it started: the
LocalExecutor's workers, the tasks' supervisors, ``spark-submit`` and its JVM, parser processes.
:meth:`AirflowStack.stop` sends SIGTERM, waits, then kills what is left, and reports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil
import requests

from tests.emulators.airflow_env import DAGS_FOLDER, airflow_home_env, migrate
from tests.emulators.servers import REPO_ROOT, free_port

AIRFLOW = str(Path(sys.executable).parent / "airflow")
# The project's DAG file for one connector file, connectors/orders.yaml (see dags/).
PROJECT_DAG_FILE = DAGS_FOLDER / "kinesis_snowflake_orders.py"
CONNECTOR_FILE = Path("connectors") / "orders.yaml"
USER = "operator"
TERMINAL_STATES = frozenset({"success", "failed"})


def write_dags_folder(dags_folder: Path, connector: Mapping[str, Any]) -> Path:
    """The project's DAG file in ``dags_folder`` and ``connector`` as the connector file it reads; that file's path."""
    import yaml

    (dags_folder / CONNECTOR_FILE.parent).mkdir(parents=True, exist_ok=True)
    shutil.copy(PROJECT_DAG_FILE, dags_folder / PROJECT_DAG_FILE.name)
    path = dags_folder / CONNECTOR_FILE
    path.write_text(yaml.safe_dump(dict(connector), sort_keys=False))
    return path


def stack_env(home: Path, dags_folder: Path, api_port: int, extra: Mapping[str, str]) -> dict[str, str]:
    """The environment every process of the stack shares: ``extra`` (connections, Spark) and Airflow's settings."""
    base_url = f"http://127.0.0.1:{api_port}"
    env = airflow_home_env(home, extra)
    env.update(
        {
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            # Two task processes at a time: the ingest DAG runs one task at a time, the machine is small.
            "AIRFLOW__CORE__PARALLELISM": "2",
            # As a deployment has it: a new DAG waits to be unpaused.
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__BASE_URL": base_url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base_url}/execution/",
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            # Short loops, so that a run starts seconds after it is due or triggered.
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__BUNDLE_REFRESH_CHECK_INTERVAL": "2",
            # The DAG file is parsed when the dag-processor starts; parsing it again would only cost.
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "300",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__DAG_PROCESSOR__PRINT_STATS_INTERVAL": "0",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "AIRFLOW__LOGGING__COLORED_CONSOLE_LOG": "False",
            # A process that does not end on SIGTERM gets SIGABRT from stop(): its threads' stacks in its log.
            "PYTHONFAULTHANDLER": "1",
        }
    )
    return env


@dataclass
class _Process:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]


@dataclass
class AirflowStack:
    """A running Airflow: its home, its api-server's URL, its processes; the REST API calls the tests make."""

    home: Path
    dags_folder: Path
    connector: dict[str, Any]
    api_url: str
    password: str
    env: dict[str, str]
    processes: list[_Process] = field(default_factory=list)
    _token: str | None = None

    # -- REST API --------------------------------------------------------------------------------

    def token(self) -> str:
        """A JWT from the simple auth manager's token endpoint, for this stack's user and password."""
        response = requests.post(
            f"{self.api_url}/auth/token", json={"username": USER, "password": self.password}, timeout=30
        )
        assert response.status_code == 201, f"POST /auth/token: {response.status_code} {response.text}"
        return str(response.json()["access_token"])

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None, **params: Any) -> Any:
        """``method`` ``/api/v2/<path>`` with the bearer token; the response, whatever its status."""
        if self._token is None:
            self._token = self.token()
        return requests.request(
            method,
            f"{self.api_url}/api/v2/{path}",
            json=body,
            params=params or None,
            headers={"Authorization": f"Bearer {self._token}"},
            timeout=60,
        )

    def api(self, method: str, path: str, body: Mapping[str, Any] | None = None, **params: Any) -> Any:
        """``method`` ``/api/v2/<path>`` with the bearer token; the JSON answer (an error names the call)."""
        response = self.request(method, path, body, **params)
        assert response.ok, f"{method} /api/v2/{path}: {response.status_code} {response.text}"
        return response.json()

    def set_paused(self, dag_id: str, paused: bool) -> None:
        """``PATCH /api/v2/dags/{dag_id}``: pause or unpause the DAG."""
        answer = self.api("PATCH", f"dags/{dag_id}", {"is_paused": paused})
        assert answer["is_paused"] is paused, answer

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        """``POST /api/v2/dags/{dag_id}/dagRuns`` with ``conf``; the new run's id."""
        answer = self.api("POST", f"dags/{dag_id}/dagRuns", {"logical_date": None, "conf": dict(conf or {})})
        return str(answer["dag_run_id"])

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return dict(self.api("GET", f"dags/{dag_id}/dagRuns/{run_id}"))

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        """The DAG's runs, oldest first."""
        answer = self.api("GET", f"dags/{dag_id}/dagRuns", order_by="id", limit=100)
        return list(answer["dag_runs"])

    def task_instances(self, dag_id: str, run_id: str = "~", **params: Any) -> list[dict[str, Any]]:
        """The task instances of a run (of every run with ``~``), filtered by ``params`` (e.g. ``state=[...]``)."""
        answer = self.api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances", limit=100, **params)
        return list(answer["task_instances"])

    def wait_for_dags(self, dag_ids: list[str], timeout: float = 300) -> None:
        """Wait until the dag-processor has stored every DAG of ``dag_ids``."""

        def missing() -> list[str]:
            known = {d["dag_id"] for d in self.api("GET", "dags", limit=100)["dags"]}
            return [d for d in dag_ids if d not in known]

        self.wait(lambda: not missing(), timeout, lambda: f"DAGs not parsed: {missing()}; {self.import_errors()}")

    def import_errors(self) -> list[Any]:
        return list(self.api("GET", "importErrors")["import_errors"])

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 300) -> dict[str, Any]:
        """Wait until the run has ended; the run (its ``state`` is ``success`` or ``failed``)."""
        self.wait(
            lambda: self.run(dag_id, run_id)["state"] in TERMINAL_STATES,
            timeout,
            lambda: f"run {dag_id}/{run_id} is still {self.run(dag_id, run_id)['state']}",
        )
        return self.run(dag_id, run_id)

    def assert_succeeded(self, dag_id: str, run_id: str, timeout: float = 300) -> None:
        """Wait for the run; fail with its task logs unless it succeeded."""
        run = self.wait_for_run(dag_id, run_id, timeout)
        assert run["state"] == "success", f"{dag_id}/{run_id} ended {run['state']}:\n{self.task_logs(dag_id, run_id)}"

    def wait(self, done: Callable[[], bool], timeout: float, what: Callable[[], str], interval: float = 2) -> None:
        """Poll ``done`` until it holds; after ``timeout`` seconds fail with ``what()`` (a deadline, not a check)."""
        deadline = time.monotonic() + timeout
        while not done():
            for p in self.processes:
                assert p.process.poll() is None, f"airflow {p.name} exited with {p.process.returncode}"
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout:.0f}s: {what()}")
            time.sleep(interval)

    # -- logs --------------------------------------------------------------------------------------

    def task_logs(self, dag_id: str, run_id: str, tail: int = 80) -> str:
        """The last ``tail`` lines of every task log of a run, from ``AIRFLOW_HOME/logs``."""
        run_dir = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
        parts = []
        for path in sorted(run_dir.rglob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            parts.append(f"--- {path.relative_to(self.home)}\n" + "\n".join(lines))
        return "\n".join(parts) or f"(no task logs under {run_dir})"

    def log_tails(self, tail: int = 60) -> str:
        """The last ``tail`` lines of each process's log."""
        parts = []
        for p in self.processes:
            p.log.flush()
            lines = p.log_path.read_text(errors="replace").splitlines()[-tail:]
            parts.append(f"--- airflow {p.name} ({p.log_path})\n" + "\n".join(lines))
        return "\n".join(parts)

    @contextmanager
    def diagnosed(self) -> Iterator[None]:
        """On an exception in the block, print each process's log tail (pytest shows it with the failure)."""
        try:
            yield
        except BaseException:
            print(self.log_tails())
            raise

    # -- processes ----------------------------------------------------------------------------------

    def start(self, name: str, *args: str) -> None:
        log_path = self.home / f"{name}.log"
        log = log_path.open("wb")
        process = subprocess.Popen(
            [AIRFLOW, name, *args],
            env=self.env,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_end_with_parent,
        )
        self.processes.append(_Process(name, process, log_path, log))

    def stop(self, timeout: float = 60) -> list[str]:
        """SIGTERM every process, wait up to ``timeout`` seconds, kill what is left, as a deployment's
        grace period does (Kubernetes' ``terminationGracePeriodSeconds``, systemd's ``TimeoutStopSec``).

        :return: what did not end by itself on SIGTERM (and was killed); ``[]`` after a clean stop.
        """
        running = [p for p in self.processes if p.process.poll() is None]
        # Everything each started, gathered before the signal: what outlives its parent is found too.
        descendants: list[psutil.Process] = []
        for p in running:
            with contextlib.suppress(psutil.NoSuchProcess):
                descendants += psutil.Process(p.process.pid).children(recursive=True)
        for p in running:
            with contextlib.suppress(ProcessLookupError):
                p.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        _, alive = psutil.wait_procs(descendants, timeout=max(0.1, deadline - time.monotonic()))
        killed = [f"airflow {p.name} (pid {p.process.pid})" for p in running if p.process.poll() is None]
        killed += [f"{_describe(d)} (pid {d.pid})" for d in alive]
        if killed:
            # Where each is stuck: faulthandler (PYTHONFAULTHANDLER) writes every thread's stack on SIGABRT
            # to the process's stderr, the log of the stack process it belongs to; pytest shows what is printed.
            for pid in [p.process.pid for p in running if p.process.poll() is None] + [d.pid for d in alive]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGABRT)
            time.sleep(2)
            print(f"Not ended {timeout:.0f}s after SIGTERM: {killed}\n{self.log_tails(120)}")
        for p in running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.process.pid, signal.SIGKILL)
            p.process.wait()
        for d in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                d.kill()
        psutil.wait_procs(alive, timeout=10)
        for p in self.processes:
            p.log.close()
        return killed

    def leftovers(self) -> list[str]:
        """Processes of the stack still alive: its main processes and anything left in their process groups."""
        found = [f"airflow {p.name}" for p in self.processes if p.process.poll() is None]
        groups = {p.process.pid for p in self.processes}
        for proc in psutil.process_iter(["pid", "name"]):
            with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                if os.getpgid(proc.pid) in groups and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(f"{_describe(proc)} (pid {proc.pid})")
        return found


def stuck_in_executor_shutdown(process: str) -> bool:
    """Whether ``process`` (as :meth:`AirflowStack.stop` names it) is Airflow's scheduler or one of its idle
    LocalExecutor workers: ``LocalExecutor.end()`` joins its workers without a bound, and on SIGTERM the
    scheduler can wait there for a worker that never ends (apache/airflow#67870). What the tasks started
    (task processes, ``spark-submit``, its JVM) is never one of these."""
    return process.startswith(("airflow scheduler (pid ", "airflow worker -- LocalExecutor: <idle>"))


def _end_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it dies (a test run killed outright)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _describe(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline()[:4]) or process.name()
    except psutil.Error:
        return "?"


def wait_until_healthy(stack: AirflowStack, timeout: float = 300) -> None:
    """Wait until the api-server answers and reports the scheduler, dag-processor and triggerer healthy."""

    def health() -> dict[str, Any]:
        try:
            response = requests.get(f"{stack.api_url}/api/v2/monitor/health", timeout=5)
            return dict(response.json()) if response.ok else {}
        except (requests.RequestException, ValueError):
            return {}

    def healthy() -> bool:
        answer = health()
        parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
        return bool(answer) and all(answer.get(p, {}).get("status") == "healthy" for p in parts)

    stack.wait(healthy, timeout, lambda: f"not healthy: {health()}\n{stack.log_tails()}")


@contextmanager
def airflow_stack(work_dir: Path, connector: Mapping[str, Any], extra_env: Mapping[str, str]) -> Iterator[AirflowStack]:
    """Run Airflow's four processes on a DAGs folder holding ``connector``; stopped however the block ends.

    :param work_dir: holds ``home`` (the stack's ``AIRFLOW_HOME``: metadata database, passwords,
        process and task logs, checkpoint backups) and ``dags`` (the DAGs folder: the project's DAG
        file and ``connector`` as its connector file).
    :param connector: the connector file's content.
    :param extra_env: added to every process's environment (``AIRFLOW_CONN_*``, Spark settings).
    """
    home, dags_folder = work_dir / "home", work_dir / "dags"
    home.mkdir(parents=True, exist_ok=True)
    write_dags_folder(dags_folder, connector)
    port = free_port()
    password = secrets.token_urlsafe(12)
    (home / "passwords.json").write_text(json.dumps({USER: password}))
    env = stack_env(home, dags_folder, port, extra_env)
    migrate(env)
    stack = AirflowStack(home, dags_folder, dict(connector), f"http://127.0.0.1:{port}", password, env)
    try:
        stack.start("api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1")
        stack.start("scheduler", "--skip-serve-logs")
        stack.start("dag-processor")
        stack.start("triggerer", "--skip-serve-logs")
        with stack.diagnosed():
            wait_until_healthy(stack)
        yield stack
    finally:
        stack.stop()


@contextmanager
def api_server(work_dir: Path, dags_folder: Path, extra_env: Mapping[str, str]) -> Iterator[AirflowStack]:
    """Only the api-server (the UI, the REST API and the plugins' apps) on ``dags_folder``, authenticated as
    the stack is; stopped however the block ends. For tests of what the UI shows, which need no scheduler.

    :param work_dir: holds ``home``, its ``AIRFLOW_HOME``.
    :param extra_env: added to its environment (``AIRFLOW_CONN_*``, settings).
    """
    home = work_dir / "home"
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    password = secrets.token_urlsafe(12)
    (home / "passwords.json").write_text(json.dumps({USER: password}))
    env = stack_env(home, dags_folder, port, extra_env)
    migrate(env)
    stack = AirflowStack(home, dags_folder, {}, f"http://127.0.0.1:{port}", password, env)

    def database_healthy() -> bool:
        try:
            response = requests.get(f"{stack.api_url}/api/v2/monitor/health", timeout=5)
            return response.ok and response.json().get("metadatabase", {}).get("status") == "healthy"
        except (requests.RequestException, ValueError):
            return False

    try:
        stack.start("api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1")
        with stack.diagnosed():
            stack.wait(database_healthy, 300, stack.log_tails, interval=1)
        yield stack
    finally:
        stack.stop()
