"""The fakesnow server, with faults injected at its HTTP boundary.

Run as ``python -m tests.emulators.fakesnow_server --port N``. While ``FAKESNOW_FAULTS_FILE``
lists faults (see faults.py), a query whose SQL matches a fault's ``match`` regex triggers, before
or after fakesnow runs it (``when``), one ``action``:

* ``kill_spark``: SIGKILL the running Spark job (JVM, Python driver, workers) of ``application``
  (any Spark job when absent). The dead session's
  open transaction is rolled back, as Snowflake aborts the transactions of a lost session.
* ``error``: answer the statement with a Snowflake error instead of running it.
* ``http_500``: answer the statement with HTTP 500 instead of running it, as a failing service does
  (the connector retries that for as long as its ``network_timeout`` allows).
* ``outage``: answer HTTP 503 to every request for ``seconds`` (or until the faults are cleared),
  as an unreachable service does.
* ``restart``: the server process dies on the spot (``os._exit``, as in a crash: open
  transactions and sessions are lost, committed data is not) and comes back on the same port
  ``seconds`` later. Needs ``--data-dir``.

With ``--data-dir DIR`` the server keeps what Snowflake keeps across a service restart in DIR:
every database (DuckDB files ``DIR/<DATABASE>.db``), fakesnow's own catalogue of stages, column
types and users (``DIR/_fs_global.db``), the staged files (``DIR/stages/``) and the users' public
keys (``DIR/users-auth.json``, see fakesnow_auth: key-pair logins are verified). The process
started with ``--data-dir`` is then a supervisor: it runs the server as a child process and starts
a new one when the child exits for a ``restart``; ``DIR/server.json`` holds the serving child's
pid and how many restarts there were.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import fakesnow.server as fakesnow_server
import uvicorn
from fakesnow import info_schema, macros
from fakesnow.instance import GLOBAL_DATABASE_NAME, FakeSnow
from fakesnow.transforms import show, stage
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tests.emulators import fakesnow_cache, fakesnow_extensions
from tests.emulators.fakesnow_auth import KeyPairAuthMiddleware
from tests.emulators.faults import FaultFile, exit_with_parent, kill_spark_jobs
from tests.emulators.servers import FAKESNOW_STATE_FILE

FAULTS = FaultFile("FAKESNOW_FAULTS_FILE")
_outage_until = 0.0
# Set in a server that runs under the supervisor, which alone can bring it back after a restart.
_data_dir: Path | None = None

RESTART_EXIT_CODE = 75  # EX_TEMPFAIL: the child asks its supervisor to start it again
RESTART_FILE = "restart.json"  # child -> supervisor: how long to stay down
STATE_FILE = FAKESNOW_STATE_FILE  # supervisor -> tests


def persistent_fakesnow(data_dir: Path) -> FakeSnow:
    """A FakeSnow whose databases, catalogue and stages live in ``data_dir`` and survive a restart."""
    data_dir = data_dir.resolve()
    bucket = data_dir / "stages"
    bucket.mkdir(parents=True, exist_ok=True)
    with suppress(OSError):
        os.rmdir(stage.LOCAL_BUCKET_PATH)  # the empty temporary bucket fakesnow made on import
    # Read at call time as stage.LOCAL_BUCKET_PATH, by fakesnow's stage transforms and server.
    stage.LOCAL_BUCKET_PATH = str(bucket)

    fs = FakeSnow(db_path=data_dir)
    duck = fs.duck_conn
    # fakesnow attaches its catalogue in memory; swap in a file. Its creation SQL is all
    # IF NOT EXISTS / OR REPLACE, so it runs unchanged on a file from an earlier run.
    duck.execute(f"DETACH {GLOBAL_DATABASE_NAME}")
    duck.execute(f"ATTACH '{data_dir / GLOBAL_DATABASE_NAME}.db' AS {GLOBAL_DATABASE_NAME}")
    duck.execute(info_schema.fs_global_creation_sql())
    duck.execute(show.fs_global_creation_sql())
    # Every database exists from the start, as on Snowflake, not only once a session names it.
    for db_file in sorted(data_dir.glob("*.db")):
        name = db_file.stem
        if name == GLOBAL_DATABASE_NAME:
            continue
        duck.execute(f"ATTACH IF NOT EXISTS '{db_file}' AS {name}")  # named as fakesnow names them
        duck.execute(info_schema.per_db_creation_sql(name))
        duck.execute(macros.creation_sql(name))
    return fs


def _sql(body: bytes, headers: Any) -> str:
    if headers.get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    try:
        return str(json.loads(body).get("sqlText", ""))
    except ValueError:
        return ""


def _rollback_session(request: Request) -> None:
    auth = request.headers.get("Authorization", "")
    conn = fakesnow_server.sessions.get(auth[17:-1])
    if conn is not None:
        try:
            conn.cursor().execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - no transaction open is fine
            pass


def _act(fault: dict[str, Any], request: Request) -> Response | None:
    global _outage_until
    action = fault["action"]
    if action == "kill_spark":
        kill_spark_jobs(fault.get("application"))
        _rollback_session(request)
        return JSONResponse({"success": False, "code": "390114", "message": "session lost"}, status_code=500)
    if action == "error":
        message = f"injected failure of: {fault['match']}"
        return JSONResponse({"data": {"errorCode": "000603"}, "code": "000603", "message": message, "success": False})
    if action == "http_500":
        return Response(status_code=500)
    if action == "outage":
        _outage_until = time.monotonic() + float(fault.get("seconds", 5))
        return Response(status_code=503)
    if action == "restart":
        if _data_dir is None:
            raise ValueError("the restart fault needs a server started with --data-dir")
        (_data_dir / RESTART_FILE).write_text(json.dumps({"seconds": float(fault.get("seconds", 5))}))
        # A crash: no response, no shutdown, no rollback; DuckDB replays its WAL on the next start.
        os._exit(RESTART_EXIT_CODE)
    raise ValueError(f"unknown fault action {action!r}")


class FaultMiddleware(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        # Clearing the faults ends an outage too: the service is back.
        if time.monotonic() < _outage_until and FAULTS.faults():
            return Response(status_code=503)
        if request.url.path != "/queries/v1/query-request" or not FAULTS.faults():
            return await call_next(request)
        sql = _sql(await request.body(), request.headers)

        def matches(when: str) -> Any:
            return lambda f: f.get("when", "before") == when and re.search(f["match"], sql, re.IGNORECASE)

        if fault := FAULTS.fire(matches("before")):
            response = _act(fault, request)
            if response is not None:
                return response
        response = await call_next(request)
        if fault := FAULTS.fire(matches("after")):
            # The statement ran; whoever sent it never hears back.
            return _act(fault, request) or response
        return response


def serve(host: str, port: int, data_dir: Path | None) -> None:
    global _data_dir
    if data_dir is not None:
        _data_dir = data_dir.resolve()
        fakesnow_server.shared_fs = persistent_fakesnow(_data_dir)
        KeyPairAuthMiddleware.keep_users_in(_data_dir)
    # Logins are checked as Snowflake checks them (see fakesnow_auth); faults come first.
    fakesnow_server.app.add_middleware(KeyPairAuthMiddleware)
    fakesnow_server.app.add_middleware(FaultMiddleware)
    exit_with_parent()
    uvicorn.run(fakesnow_server.app, host=host, port=port, log_level="warning")


def _write_state(data_dir: Path, state: dict[str, Any]) -> None:
    tmp = data_dir / f"{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state))
    tmp.replace(data_dir / STATE_FILE)


def supervise(host: str, port: int, data_dir: Path) -> int:
    """Run the server as a child; start it again, same port and data, when it exits to restart."""
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / RESTART_FILE).unlink(missing_ok=True)
    stopping = threading.Event()
    child: subprocess.Popen[bytes] | None = None

    def stop(*_: Any) -> None:
        # Only signal here: the main thread's wait() sees the child exit and returns.
        stopping.set()
        if child is not None and child.poll() is None:
            child.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # The child watches this process the same way, so a killed test run takes both down.
    exit_with_parent()
    command = [sys.executable, "-m", "tests.emulators.fakesnow_server", "--serve"]
    command += ["--host", host, "--port", str(port), "--data-dir", str(data_dir)]
    restarts = 0
    while not stopping.is_set():
        child = subprocess.Popen(command)
        _write_state(data_dir, {"pid": child.pid, "restarts": restarts})
        code = child.wait()
        if stopping.is_set():
            return 0
        if code != RESTART_EXIT_CODE:
            print(f"fakesnow server {child.pid} exited with {code}; not restarting it", file=sys.stderr, flush=True)
            return code if code > 0 else 1
        request = data_dir / RESTART_FILE
        seconds = float(json.loads(request.read_text())["seconds"])
        request.unlink()
        stopping.wait(seconds)
        restarts += 1
    return 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data-dir", type=Path, default=None, help="keep all state here, across restarts")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the supervisor's child
    args = parser.parse_args()
    fakesnow_extensions.install()
    fakesnow_cache.install()
    if args.data_dir is not None and not args.serve:
        sys.exit(supervise(args.host, args.port, args.data_dir))
    serve(args.host, args.port, args.data_dir)


if __name__ == "__main__":
    main()
