"""A server that starts ``run_dag`` processes already warmed up: Airflow, the provider and the execution API.

Every ``dag.test()`` in a new process first imports Airflow and the provider and builds Airflow's
in-process execution API (its versioned routes alone take seconds); the DAG runs of the tests all
did that again. ``python -m tests.emulators.dag_runner SOCKET`` does it once, with the environment
of the session's Airflow home, then listens on the Unix socket ``SOCKET``. A ``run_dag`` process
(see run_dag.py) started with ``RUN_DAG_SERVER=SOCKET`` sends its arguments, environment, working
directory and standard streams; the server forks a process that takes them over and runs
``run_dag.main()`` exactly as the ``run_dag`` process would have, and reports its exit status back,
which the ``run_dag`` process exits with. A request whose environment this server was not warmed
up for (another Airflow home, other ``AIRFLOW__*`` settings, another interpreter) is declined and
the ``run_dag`` process runs the DAG itself.

The forked process is named after the ``run_dag`` process (:data:`CLIENT_MARKER`), so that a fault
that kills the ``run_dag`` process and what it started (faults.kill_process) kills it too; and it is
killed when the ``run_dag`` process goes away without its answer.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.emulators.run_dag import SERVER_ENV

__all__ = ["CLIENT_MARKER", "SERVER_ENV", "dag_runner"]

# In the command line of the process that runs a DAG for the run_dag process of that pid.
CLIENT_MARKER = "run-dag-client="
READY = "dag_runner ready"
# Settings read only once, when a process starts or imports Airflow: a forked process must have the server's.
_DAGS_FOLDER = "AIRFLOW__CORE__DAGS_FOLDER"
_FIXED_PREFIXES = ("AIRFLOW__", "_AIRFLOW", "PYTHON", "LC_")
_FIXED_KEYS = ("AIRFLOW_HOME", "AIRFLOW_CONFIG", "LANG", "TZ")


def _fixed(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k != _DAGS_FOLDER and (k.startswith(_FIXED_PREFIXES) or k in _FIXED_KEYS)}


def incompatible(server_env: dict[str, str], request: dict[str, Any]) -> str | None:
    """Why a request cannot be run by a process forked from this server; None when it can."""
    if request.get("executable") != sys.executable:
        return f"another interpreter: {request.get('executable')}"
    mine, theirs = _fixed(server_env), _fixed(request["env"])
    differing = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    return f"other settings: {', '.join(differing)}" if differing else None


def preload() -> None:
    """Import what every DAG run imports and build the in-process execution API, touching no database."""
    import airflow  # reads the configuration, sets up logging and the ORM
    import airflow.sdk.definitions.dag
    import airflow.serialization.serialized_objects
    from airflow.sdk.execution_time.supervisor import in_process_api_server

    import airflow_kinesis_snowflake.dags  # noqa: F401  (the provider's operators, hooks and their libraries)

    app = in_process_api_server().app
    initialize = getattr(app, "_cadwyn_initialize", None)
    if initialize is not None and not getattr(app, "_cadwyn_initialized", True):
        initialize()
    # The ORM's mappers are configured by the first query otherwise, in every run.
    import airflow.models  # noqa: F401
    from sqlalchemy.orm import configure_mappers

    configure_mappers()
    # Airflow reads its metrics registry (a YAML file) at the first metric a run sends.
    try:
        from airflow._shared.observability.metrics import stats

        stats._get_registry()
    except (ImportError, AttributeError):  # another Airflow: it reads the registry in each run
        pass
    # What is loaded now stays: the collector need not look at it again in every run (and at its exit).
    gc.collect()
    gc.freeze()


def _adopt(request: dict[str, Any]) -> None:
    """In the forked process: become the process the run_dag process would have been."""
    env = request["env"]
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])
    sys.argv = [str(Path(__file__).with_name("run_dag.py")), *request["argv"]]
    # Airflow keeps the DAGs folder it read at import; the run's is another.
    from airflow import settings
    from airflow.serialization import serialized_objects

    old = settings.DAGS_FOLDER
    settings.configure_vars()
    serialized_objects.DAGS_FOLDER = settings.DAGS_FOLDER
    if old != settings.DAGS_FOLDER and old in sys.path:
        sys.path.remove(old)
    settings.prepare_syspath_for_config_and_plugins()
    try:
        import setproctitle

        title = " ".join([sys.executable, "-m", "tests.emulators.run_dag", *request["argv"]])
        setproctitle.setproctitle(f"{title} {CLIENT_MARKER}{request['client']}")
    except ImportError:
        pass


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    try:
        conn.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    head, fds, _, _ = socket.recv_fds(conn, 8, 3)
    size = int.from_bytes(head, "big")
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise EOFError("the run_dag process went away")
        body += chunk
    return json.loads(body), fds


def _kill_tree(pid: int) -> None:
    import psutil

    try:
        process = psutil.Process(pid)
        for p in [*process.children(recursive=True), process]:
            p.kill()
    except psutil.NoSuchProcess:
        pass


def _attend(conn: socket.socket, server_env: dict[str, str]) -> dict[str, Any]:
    """In a process forked per request: fork the DAG's process, report its exit status, exit.

    Returns only in the DAG's process, with the request to run.
    """
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        request, fds = _receive(conn)
    except (OSError, EOFError, ValueError):
        os._exit(0)
    reason = incompatible(server_env, request)
    if reason is not None or len(fds) != 3:
        # Told in the server's log: a declined run costs a cold start of Airflow in the run_dag process.
        print(f"declined {request.get('argv')}: {reason or 'no standard streams'}", file=sys.stderr, flush=True)
        _send(conn, {"declined": reason or "no standard streams"})
        os._exit(0)
    pid = os.fork()
    if pid == 0:
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        _adopt(request)
        return request
    for fd in fds:
        os.close(fd)
    _send(conn, {"pid": pid})

    def watch() -> None:
        # The run_dag process gone without its answer (killed): so is its DAG run.
        try:
            conn.recv(1)
        except OSError:
            pass
        _kill_tree(pid)

    threading.Thread(target=watch, name="client-watch", daemon=True).start()
    _, status = os.waitpid(pid, 0)
    _send(conn, {"returncode": os.waitstatus_to_exitcode(status)})
    os._exit(0)


@contextmanager
def dag_runner(env: dict[str, str], log_path: Path) -> Iterator[str]:
    """Run a dag_runner server warmed up with ``env``; yields its address, for ``RUN_DAG_SERVER``."""
    from tests.emulators.servers import REPO_ROOT

    address = os.path.join(tempfile.mkdtemp(prefix="dag-runner-"), "socket")  # short: at most 107 bytes
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.emulators.dag_runner", address],
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        try:
            assert server.stdout is not None
            for line in server.stdout:
                if line.strip() == READY.encode():
                    break
            else:
                server.wait(timeout=30)
                raise RuntimeError(f"the dag_runner server exited with {server.returncode}; see {log_path}")
            yield address
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            shutil.rmtree(os.path.dirname(address), ignore_errors=True)


def serve(address: str) -> None:
    preload()
    server_env = dict(os.environ)
    # Each request's attendant is reaped by the system.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(16)
    listener.settimeout(1)
    parent = os.getppid()
    print(READY, flush=True)
    os.dup2(2, 1)  # nothing else for the pipe its starter no longer reads: the log
    while os.getppid() == parent:  # ends with the test session that started it, however that ends
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        if os.fork() == 0:
            listener.close()
            _attend(conn, server_env)
            from tests.emulators import run_dag

            # The DAG's process: exits as the run_dag process does, through the interpreter's own exit.
            raise SystemExit(run_dag.main())
        conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
