"""A Databricks workspace on loopback, as small as the job needs: the Jobs API's one-time runs, the
clusters a run can use, and the storage its files go to. A run runs: its Python script task is a
local ``spark-submit --master local[2]`` (:mod:`~tests.emulators.spark_runs`), in a process group of
its own inside this server's process tree.

Run as ``python -m tests.emulators.databricks --port N --root DIR --token T``; it serves until
terminated. Every API call must carry ``Authorization: Bearer T`` (a personal access token), as the
Databricks provider's hook sends it; the answers and errors have the Databricks REST API's shapes
(``{"error_code": ..., "message": ...}``).

* **Clusters** (``/api/2.0|2.1/clusters/create``, ``get``): a cluster is ``RUNNING`` once created; its
  ``spark_env_vars`` are its driver's environment and its ``spark_conf`` its Spark settings, for every
  run on it. A run's AWS identity is the cluster's (its instance profile: moto's test keys); nothing
  else of this process's AWS environment reaches it.
* **Storage**: DBFS (``/api/2.0/dbfs/get-status``, ``create``, ``add-block`` of at most 1 MB of
  base64, ``close``; a ``/Volumes`` path is refused there, as Databricks refuses it) and the Files API
  for Unity Catalog volumes (``HEAD``/``PUT``/``GET /api/2.0/fs/files/Volumes/...``; a volume exists
  once created through ``POST /api/2.1/unity-catalog/volumes``, and an upload into one that does not
  is ``404``). Files live under ``--root``.
* **Runs** (``/api/2.1|2.2/jobs/runs/submit``, ``get``, ``get-output``, ``cancel``, ``list``): a
  submitted run has one task run per task (one task is supported, with a ``spark_python_task``), on
  its ``existing_cluster_id`` (which must exist: ``400`` otherwise, as on Databricks) or its
  ``new_cluster``. Its life cycle moves as Databricks moves it: ``PENDING`` (the task's libraries and
  script are read from storage into a working directory named ``databricks-run-<task run id>-...``)
  -> ``RUNNING`` (spark-submit started: the ``whl`` libraries as ``--py-files``, which is how a pure
  Python wheel's package is imported, the cluster's Spark settings as ``--conf``, the task's
  ``parameters`` as the script's arguments) -> ``TERMINATED`` with ``result_state`` ``SUCCESS`` or
  ``FAILED`` by the exit status; a script or library not found ends the run ``INTERNAL_ERROR``. The
  same ``idempotency_token`` gives the same run. ``runs/get-output`` answers for a task run (the
  driver's stdout as ``logs``, its stderr as ``error_trace``, the last exception line as ``error``)
  and refuses the run of several tasks, as Databricks does. ``runs/cancel`` moves a run that has not
  ended to ``TERMINATING``, ends spark-submit's process group, and then the run is ``TERMINATED``
  ``CANCELED``; the cancel of an ended run changes nothing. PyPI libraries are recorded, not
  installed: this machine's Python has the job's libraries.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.emulators import spark_runs

WORK_PREFIX = "databricks-run-"
DBFS_BLOCK_LIMIT = 1024 * 1024
LOGS_LIMIT = 5 * 1024 * 1024
FAILED_MESSAGE = "Workload failed, see run output for details"
ENDED = ("TERMINATED", "SKIPPED", "INTERNAL_ERROR")


class ApiError(Exception):
    """An answer of the REST API's error shape."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class TaskRun:
    """One task run of a run: its process, and whether it was cancelled."""

    run_id: int
    task: dict[str, Any]
    state: dict[str, str] = field(default_factory=lambda: {"life_cycle_state": "PENDING", "state_message": ""})
    output: dict[str, Any] = field(default_factory=dict)
    cancelled: threading.Event = field(default_factory=threading.Event)
    process: subprocess.Popen[bytes] | None = None
    stopper: threading.Thread | None = None
    start_time: int = 0
    end_time: int = 0


@dataclass
class Run:
    """A one-time run (runs/submit) and its task runs."""

    run_id: int
    request: dict[str, Any]
    tasks: list[TaskRun]
    start_time: int = field(default_factory=lambda: int(time.time() * 1000))

    def state(self) -> dict[str, str]:
        task = self.tasks[0]
        state = dict(task.state)
        if state.get("result_state") == "FAILED" and state["life_cycle_state"] == "TERMINATED":
            state["state_message"] = (
                f"Task {task.task['task_key']} failed with message: {FAILED_MESSAGE}. This caused all downstream "
                "tasks to get skipped."
            )
        return state


class Workspace:
    """The workspace's clusters, volumes, files and runs."""

    def __init__(self, root: Path, port: int) -> None:
        self.root, self.port = root, port
        self.lock = threading.Lock()
        self.clusters: dict[str, dict[str, Any]] = {}
        self.volumes: set[str] = set()
        self.handles: dict[int, tuple[str, bytearray]] = {}
        self.runs: dict[int, Run] = {}
        self.task_runs: dict[int, tuple[Run, TaskRun]] = {}
        self.tokens: dict[str, int] = {}
        self.ids = itertools.count(int(time.time()) % 100_000 * 1_000)

    # -- storage ---------------------------------------------------------------------------------------------------

    def local(self, path: str) -> Path:
        """Where a DBFS path (``dbfs:/x`` or ``/x``) or a volume path (``/Volumes/...``) is kept."""
        if path.startswith("dbfs:"):
            return self.root / "dbfs" / path[len("dbfs:") :].lstrip("/")
        if path.startswith("/Volumes/"):
            return self.root / path.lstrip("/")
        return self.root / "dbfs" / path.lstrip("/")

    @staticmethod
    def volume_of(path: str) -> str:
        return "/".join(path.split("/")[:5])  # /Volumes/<catalog>/<schema>/<volume>

    def read(self, path: str) -> bytes:
        """The file at ``path`` (as the workspace names it).

        :raises FileNotFoundError: named by that path.
        """
        local = self.local(path)
        if (path.startswith("/Volumes/") and self.volume_of(path) not in self.volumes) or not local.is_file():
            raise FileNotFoundError(path)
        return local.read_bytes()

    # -- runs -------------------------------------------------------------------------------------------------------

    def submit(self, request: dict[str, Any]) -> int:
        tasks = request.get("tasks") or []
        if len(tasks) != 1 or "spark_python_task" not in tasks[0]:
            raise ApiError(400, "INVALID_PARAMETER_VALUE", "this workspace runs one spark_python_task per run")
        task = tasks[0]
        cluster_id = task.get("existing_cluster_id")
        if cluster_id is not None and cluster_id not in self.clusters:
            raise ApiError(400, "INVALID_PARAMETER_VALUE", f"Cluster {cluster_id} does not exist")
        if cluster_id is None and "new_cluster" not in task:
            raise ApiError(400, "INVALID_PARAMETER_VALUE", "One of existing_cluster_id or new_cluster must be given")
        with self.lock:
            token = request.get("idempotency_token")
            if token and token in self.tokens:
                return self.tokens[token]
            run = Run(next(self.ids), request, [TaskRun(next(self.ids), task)])
            self.runs[run.run_id] = run
            self.task_runs[run.tasks[0].run_id] = (run, run.tasks[0])
            if token:
                self.tokens[token] = run.run_id
        threading.Thread(target=self.execute, args=(run.tasks[0],), name=f"run-{run.run_id}", daemon=True).start()
        return run.run_id

    def cluster_of(self, task: dict[str, Any]) -> dict[str, Any]:
        if (cluster_id := task.get("existing_cluster_id")) is not None:
            return self.clusters[cluster_id]
        return dict(task["new_cluster"])

    def set_state(self, task_run: TaskRun, life_cycle: str, result: str | None = None, message: str = "") -> None:
        task_run.state = {"life_cycle_state": life_cycle, "state_message": message}
        if result is not None:
            task_run.state["result_state"] = result
        if life_cycle in ENDED:
            task_run.end_time = int(time.time() * 1000)

    def execute(self, task_run: TaskRun) -> None:
        task = task_run.task
        directory = Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{task_run.run_id}-"))
        task_run.start_time = int(time.time() * 1000)
        try:
            with self.lock:
                self.set_state(task_run, "PENDING", message="Installing libraries")
            try:
                command, env = self.command(task, directory)
            except FileNotFoundError as missing:
                with self.lock:
                    self.set_state(
                        task_run, "INTERNAL_ERROR", "FAILED", f"Run failed with error message: {missing} does not exist"
                    )
                return
            with self.lock:
                if task_run.cancelled.is_set():
                    self.set_state(task_run, "TERMINATED", "CANCELED", "Run cancelled.")
                    return
                task_run.process = spark_runs.start(command, env, directory)
                self.set_state(task_run, "RUNNING", message="In run")
            code = task_run.process.wait()
            stdout = spark_runs.output(directory, "stdout").decode("utf-8", "replace")
            stderr = spark_runs.output(directory, "stderr").decode("utf-8", "replace")
            exceptions = spark_runs.last_exceptions(directory, count=1)
            task_run.output = {
                "logs": stdout[-LOGS_LIMIT:],
                "logs_truncated": len(stdout) > LOGS_LIMIT,
                "error_trace": stderr[-LOGS_LIMIT:],
            }
            if task_run.cancelled.is_set():
                with self.lock:
                    stopper = task_run.stopper
                if stopper is not None:
                    stopper.join()  # TERMINATED once no process of the run is left
                self.set_state(task_run, "TERMINATED", "CANCELED", "Run cancelled.")
            elif code == 0:
                self.set_state(task_run, "TERMINATED", "SUCCESS")
            else:
                task_run.output["error"] = exceptions[-1] if exceptions else f"Process exited with code {code}"
                self.set_state(task_run, "TERMINATED", "FAILED", FAILED_MESSAGE)
        except Exception as err:  # noqa: BLE001 - the run fails, as Databricks fails one it cannot start
            self.set_state(task_run, "INTERNAL_ERROR", "FAILED", f"Run failed with error message: {err}")
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def command(self, task: dict[str, Any], directory: Path) -> tuple[list[str], dict[str, str]]:
        """spark-submit's command and the environment it adds: the task's libraries and script read from
        storage into ``directory``, on its cluster."""
        wheels = []
        for library in task.get("libraries") or []:
            if "whl" in library:
                path = directory / library["whl"].rsplit("/", 1)[-1]
                path.write_bytes(self.read(library["whl"]))
                wheels.append(str(path))
        python = task["spark_python_task"]
        script = directory / python["python_file"].rsplit("/", 1)[-1]
        script.write_bytes(self.read(python["python_file"]))
        cluster = self.cluster_of(task)
        options = ["--py-files", ",".join(wheels)] if wheels else []
        for key, value in (cluster.get("spark_conf") or {}).items():
            options += ["--conf", f"{key}={value}"]
        arguments = [str(a) for a in python.get("parameters") or []]
        env = {str(k): str(v) for k, v in (cluster.get("spark_env_vars") or {}).items()}
        return ["spark-submit", "--master", "local[2]", *options, str(script), *arguments], env

    def cancel(self, run_id: int) -> None:
        run = self.runs.get(run_id)
        if run is None:
            raise ApiError(400, "INVALID_PARAMETER_VALUE", f"Run {run_id} does not exist.")
        with self.lock:
            for task_run in run.tasks:
                if task_run.state["life_cycle_state"] in ENDED:
                    continue  # it ended already
                self.set_state(task_run, "TERMINATING", message="Run cancellation requested.")
                task_run.cancelled.set()
                if task_run.process is not None:
                    task_run.stopper = threading.Thread(target=spark_runs.stop, args=(task_run.process,), daemon=True)
                    task_run.stopper.start()

    def task_run_dict(self, run: Run, task_run: TaskRun) -> dict[str, Any]:
        task = dict(task_run.task)
        answer: dict[str, Any] = {
            "run_id": task_run.run_id,
            "task_key": task["task_key"],
            "state": dict(task_run.state),
            "spark_python_task": task["spark_python_task"],
            "libraries": task.get("libraries") or [],
            "start_time": task_run.start_time,
            "end_time": task_run.end_time,
            "run_page_url": self.page(task_run.run_id),
        }
        for key in ("existing_cluster_id", "new_cluster"):
            if key in task:
                answer[key] = task[key]
        return answer

    def run_dict(self, run: Run) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "job_id": run.run_id,
            "run_id": run.run_id,
            "run_name": run.request.get("run_name", "Untitled"),
            "run_type": "SUBMIT_RUN",
            "format": "MULTI_TASK",
            "state": run.state(),
            "tasks": [self.task_run_dict(run, task_run) for task_run in run.tasks],
            "start_time": run.start_time,
            "end_time": max(task_run.end_time for task_run in run.tasks),
            "run_page_url": self.page(run.run_id),
        }
        if "timeout_seconds" in run.request:
            answer["timeout_seconds"] = run.request["timeout_seconds"]
        return answer

    def page(self, run_id: int) -> str:
        return f"http://127.0.0.1:{self.port}/#job/{run_id}/run/{run_id}"


class Handler(BaseHTTPRequestHandler):
    """The REST API over one :class:`Workspace`."""

    workspace: Workspace
    token: str
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{self.command} {self.path} {args[1] if len(args) > 1 else ''}\n")

    def do_GET(self) -> None:
        self.handle_call("GET")

    def do_POST(self) -> None:
        self.handle_call("POST")

    def do_PUT(self) -> None:
        self.handle_call("PUT")

    def do_HEAD(self) -> None:
        self.handle_call("HEAD")

    def handle_call(self, method: str) -> None:
        url = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if url.path == "/":
            self.answer(200, {"workspace": "emulated"})
            return
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            self.answer(401, {"error_code": "UNAUTHENTICATED", "message": "Invalid access token."})
            return
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        try:
            if url.path.startswith("/api/2.0/fs/files/"):
                self.files(method, unquote(url.path[len("/api/2.0/fs/files") :]), query, body)
                return
            payload = json.loads(body) if body else {}
            self.answer(200, self.route(method, url.path, {**query, **payload}))
        except ApiError as err:
            self.answer(err.status, {"error_code": err.code, "message": err.message})

    def answer(self, status: int, payload: dict[str, Any] | None = None, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(payload or {}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream" if raw is not None else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def route(self, method: str, path: str, args: dict[str, Any]) -> dict[str, Any]:
        workspace = self.workspace
        parts = path.split("/")  # ['', 'api', '2.1', 'jobs', 'runs', 'get']
        if len(parts) < 4 or parts[1] != "api":
            raise ApiError(404, "ENDPOINT_NOT_FOUND", f"No API found for '{method} {path}'")
        version, name = parts[2], "/".join(parts[3:])
        if name.startswith("jobs/") and version in ("2.1", "2.2"):
            return self.jobs(method, name, args)
        if name.startswith("clusters/") and version in ("2.0", "2.1"):
            return self.clusters(method, name, args)
        if name.startswith("dbfs/") and version == "2.0":
            return self.dbfs(method, name, args)
        if (method, version, name) == ("POST", "2.1", "unity-catalog/volumes"):
            volume = f"/Volumes/{args['catalog_name']}/{args['schema_name']}/{args['name']}"
            with workspace.lock:
                workspace.volumes.add(volume)
            workspace.local(volume).mkdir(parents=True, exist_ok=True)
            return {"full_name": volume.removeprefix("/Volumes/").replace("/", "."), "storage_location": volume}
        raise ApiError(404, "ENDPOINT_NOT_FOUND", f"No API found for '{method} {path}'")

    def jobs(self, method: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        workspace = self.workspace
        if (method, name) == ("POST", "jobs/runs/submit"):
            return {"run_id": workspace.submit(args)}
        if (method, name) == ("POST", "jobs/runs/cancel"):
            workspace.cancel(int(args["run_id"]))
            return {}
        if (method, name) == ("GET", "jobs/runs/list"):
            with workspace.lock:
                runs = [workspace.run_dict(run) for run in sorted(workspace.runs.values(), key=lambda r: -r.run_id)]
            return {"runs": runs, "has_more": False}
        run_id = int(args.get("run_id", 0))
        with workspace.lock:
            if (method, name) == ("GET", "jobs/runs/get"):
                if run_id in workspace.runs:
                    return workspace.run_dict(workspace.runs[run_id])
                if run_id in workspace.task_runs:
                    return workspace.task_run_dict(*workspace.task_runs[run_id])
                raise ApiError(400, "INVALID_PARAMETER_VALUE", f"Run {run_id} does not exist.")
            if (method, name) == ("GET", "jobs/runs/get-output"):
                if run_id in workspace.runs:
                    raise ApiError(
                        400,
                        "INVALID_PARAMETER_VALUE",
                        "Retrieving the output of runs with multiple tasks is not supported. Please retrieve the "
                        "output of each individual task run instead.",
                    )
                if run_id not in workspace.task_runs:
                    raise ApiError(400, "INVALID_PARAMETER_VALUE", f"Run {run_id} does not exist.")
                run, task_run = workspace.task_runs[run_id]
                return {"metadata": workspace.task_run_dict(run, task_run), **task_run.output}
        raise ApiError(404, "ENDPOINT_NOT_FOUND", f"No API found for '{method} {name}'")

    def clusters(self, method: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        workspace = self.workspace
        if (method, name) == ("POST", "clusters/create"):
            cluster_id = f"{time.strftime('%m%d')}-{next(workspace.ids) % 1_000_000:06d}-emulated"
            with workspace.lock:
                workspace.clusters[cluster_id] = {**args, "cluster_id": cluster_id, "state": "RUNNING"}
            return {"cluster_id": cluster_id}
        if (method, name) == ("GET", "clusters/get"):
            cluster = workspace.clusters.get(str(args.get("cluster_id")))
            if cluster is None:
                raise ApiError(400, "INVALID_PARAMETER_VALUE", f"Cluster {args.get('cluster_id')} does not exist")
            return cluster
        raise ApiError(404, "ENDPOINT_NOT_FOUND", f"No API found for '{method} {name}'")

    def dbfs(self, method: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        workspace = self.workspace
        path = str(args.get("path", ""))
        if path.removeprefix("dbfs:").startswith("/Volumes"):
            raise ApiError(400, "INVALID_PARAMETER_VALUE", "No operations allowed on this path")
        if (method, name) == ("GET", "dbfs/get-status"):
            local = workspace.local(path)
            if not local.exists():
                raise ApiError(404, "RESOURCE_DOES_NOT_EXIST", f"No file or directory exists on path {path}.")
            return {"path": path, "is_dir": local.is_dir(), "file_size": 0 if local.is_dir() else local.stat().st_size}
        if (method, name) == ("POST", "dbfs/create"):
            if workspace.local(path).exists() and not args.get("overwrite"):
                raise ApiError(
                    400, "RESOURCE_ALREADY_EXISTS", f"A file or directory already exists at the input path {path}."
                )
            with workspace.lock:
                handle = next(workspace.ids)
                workspace.handles[handle] = (path, bytearray())
            return {"handle": handle}
        if (method, name) == ("POST", "dbfs/add-block"):
            if len(args["data"]) > DBFS_BLOCK_LIMIT:
                raise ApiError(400, "MAX_BLOCK_SIZE_EXCEEDED", "The block of data exceeds 1 MB.")
            with workspace.lock:
                workspace.handles[int(args["handle"])][1].extend(base64.b64decode(args["data"]))
            return {}
        if (method, name) == ("POST", "dbfs/close"):
            with workspace.lock:
                target, data = workspace.handles.pop(int(args["handle"]))
            local = workspace.local(target)
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(bytes(data))
            return {}
        raise ApiError(404, "ENDPOINT_NOT_FOUND", f"No API found for '{method} {name}'")

    def files(self, method: str, path: str, query: dict[str, str], body: bytes) -> None:
        workspace = self.workspace
        if not path.startswith("/Volumes/") or workspace.volume_of(path) not in workspace.volumes:
            raise ApiError(404, "NOT_FOUND", f"The volume of {path} does not exist.")
        local = workspace.local(path)
        if method == "HEAD":
            if not local.is_file():
                self.answer(404, {})
                return
            self.answer(200, raw=local.read_bytes())
        elif method == "GET":
            if not local.is_file():
                raise ApiError(404, "NOT_FOUND", f"The file {path} does not exist.")
            self.answer(200, raw=local.read_bytes())
        elif method == "PUT":
            if local.exists() and query.get("overwrite", "false") != "true":
                raise ApiError(409, "ALREADY_EXISTS", f"The file being created already exists: {path}.")
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(body)
            self.answer(204, raw=b"")
        else:
            raise ApiError(405, "METHOD_NOT_ALLOWED", method)


# The personal access token the workspace takes.
TOKEN = "dapi-emulated-workspace-token"


@dataclass(frozen=True)
class Databricks:
    """Where the emulated workspace listens, its token, and where it keeps its files."""

    port: int
    root: Path
    token: str = TOKEN

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def connection(self) -> dict[str, Any]:
        """An Airflow connection of the Databricks provider that reaches it (token auth, over HTTP)."""
        return {
            "conn_type": "databricks",
            "host": "127.0.0.1",
            "port": self.port,
            "schema": "http",
            "password": self.token,
        }

    def call(self, method: str, endpoint: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        """One REST call (``endpoint`` after ``/api/``); its JSON answer."""
        import requests

        response = requests.request(
            method,
            f"{self.url}/api/{endpoint}",
            json=payload if method != "GET" else None,
            params=payload if method == "GET" else None,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer

    def create_cluster(self, spark_env_vars: dict[str, str]) -> str:
        """An all-purpose cluster whose driver has ``spark_env_vars``; its id."""
        spec = {"cluster_name": "all-purpose", "spark_version": "15.4.x-scala2.12", "spark_env_vars": spark_env_vars}
        return str(self.call("POST", "2.1/clusters/create", spec)["cluster_id"])

    def create_volume(self, catalog: str, schema: str, name: str) -> str:
        """A Unity Catalog volume; its path."""
        self.call("POST", "2.1/unity-catalog/volumes", {"catalog_name": catalog, "schema_name": schema, "name": name})
        return f"/Volumes/{catalog}/{schema}/{name}"

    def runs(self) -> list[dict[str, Any]]:
        """Every run submitted, newest first."""
        return list(self.call("GET", "2.1/jobs/runs/list")["runs"])

    def files(self, location: str) -> list[str]:
        """The files under ``location`` (``dbfs:/...`` or ``/Volumes/...``), as paths of that form."""
        if location.startswith("dbfs:"):
            base, prefix = self.root / "dbfs", "dbfs:/"
        else:
            base, prefix = self.root, "/"
        top = base / location.removeprefix("dbfs:").lstrip("/")
        return sorted(prefix + path.relative_to(base).as_posix() for path in top.rglob("*") if path.is_file())


@contextmanager
def local_databricks(work_dir: Path) -> Iterator[Databricks]:
    """Run the emulated workspace as a child process for the duration of the block."""
    from tests.emulators.servers import _Server, _wait_until_up, free_port

    port, root = free_port(), work_dir / "databricks-root"
    args = [sys.executable, "-m", "tests.emulators.databricks", "--port", str(port), "--root", str(root)]
    server = _Server("databricks", [*args, "--token", TOKEN], work_dir / "databricks.log")
    try:
        _wait_until_up(f"http://127.0.0.1:{port}/", server.process, "Databricks emulator", server.log_path)
        yield Databricks(port, root)
    finally:
        server.stop()


def main() -> None:
    from tests.emulators.faults import exit_with_parent

    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--token", required=True)
    args = parser.parse_args()
    exit_with_parent()
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    Handler.workspace = Workspace(root, args.port)
    Handler.token = args.token
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="databricks", daemon=True).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    with Handler.workspace.lock:
        running = [t.process for _, t in Handler.workspace.task_runs.values() if t.process and t.process.poll() is None]
    for process in running:
        spark_runs.stop(process)


if __name__ == "__main__":
    main()
