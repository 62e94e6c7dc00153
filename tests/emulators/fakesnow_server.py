"""The fakesnow server, with faults injected at its HTTP boundary.

Run as ``python -m tests.emulators.fakesnow_server --port N``. While ``FAKESNOW_FAULTS_FILE``
lists faults (see faults.py), a query whose SQL matches a fault's ``match`` regex triggers, before
or after fakesnow runs it (``when``), one ``action``:

* ``kill_spark``: SIGKILL the running Spark job (JVM, Python driver, workers) of ``application``
  (any Spark job when absent). The dead session's
  open transaction is rolled back, as Snowflake aborts the transactions of a lost session.
* ``error``: answer the statement with a Snowflake error instead of running it.
* ``outage``: answer HTTP 503 to every request for ``seconds`` (or until the faults are cleared),
  as an unreachable service does.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import time
from typing import Any

import fakesnow.server as fakesnow_server
import uvicorn
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tests.emulators.faults import FaultFile, exit_with_parent, kill_spark_jobs

FAULTS = FaultFile("FAKESNOW_FAULTS_FILE")
_outage_until = 0.0


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
    if action == "outage":
        _outage_until = time.monotonic() + float(fault.get("seconds", 5))
        return Response(status_code=503)
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    fakesnow_server.app.add_middleware(FaultMiddleware)
    exit_with_parent()
    uvicorn.run(fakesnow_server.app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
