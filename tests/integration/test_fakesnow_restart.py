"""The fakesnow server started with --data-dir keeps what Snowflake keeps across a restart.

Each test runs its own supervised server (not the session's), restarts it with the ``restart``
fault and checks what is still there: databases, tables and their column types, committed rows,
stages, staged files and the load history; and what is not: an open transaction's rows.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests

from tests.emulators import Emulators
from tests.emulators.faults import served, write_faults
from tests.emulators.servers import SNOWFLAKE_FAULTS, _Server, start_fakesnow

pytestmark = pytest.mark.integration

TRIGGER = "SELECT 'restart now'"
COLUMNS_SQL = (
    "SELECT column_name, data_type, character_maximum_length, numeric_precision, numeric_scale, is_nullable "
    "FROM ANALYTICS.information_schema.columns WHERE table_schema = 'RAW' AND table_name = 'T' "
    "ORDER BY ordinal_position"
)
COPY = "COPY INTO ANALYTICS.RAW.T (ID, NAME) FROM @ANALYTICS.RAW.S/{path}/ FILE_FORMAT = (TYPE = CSV)"
# fakesnow runs COPY INTO and DESCRIBE only in a session with a current database (the sink's USE SCHEMA).
IN_RAW = {"database": "ANALYTICS", "schema": "RAW"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[_Server, Emulators]]:
    data_dir = tmp_path / "data"
    process, port = start_fakesnow(
        tmp_path, env={"FAKESNOW_FAULTS_FILE": str(tmp_path / SNOWFLAKE_FAULTS)}, data_dir=data_dir
    )
    try:
        yield process, Emulators(moto_port=0, fakesnow_port=port, work_dir=tmp_path, fakesnow_data_dir=data_dir)
    finally:
        process.stop()


def restart(emulators: Emulators, seconds: float = 1) -> None:
    """Crash the server with the restart fault; return once its successor answers."""
    before = emulators.snowflake_server_state()
    emulators.inject_snowflake_faults([{"match": "^SELECT 'restart now'", "action": "restart", "seconds": seconds}])
    with pytest.raises(requests.ConnectionError):
        # No session needed: faults are matched before fakesnow looks at the request.
        requests.post(emulators_url(emulators), json={"sqlText": TRIGGER}, timeout=30)
    assert emulators.wait_for_snowflake_restarts(before["restarts"] + 1)["pid"] != before["pid"]


def emulators_url(emulators: Emulators) -> str:
    return f"http://127.0.0.1:{emulators.fakesnow_port}/queries/v1/query-request"


def run(emulators: Emulators, *statements: str, **connect: Any) -> list[Any]:
    conn = emulators.snowflake_connect(**connect)
    try:
        cur = conn.cursor()
        results = [cur.execute(sql).fetchall() for sql in statements]
        return results[-1]
    finally:
        conn.close()


def test_committed_state_survives_a_restart_and_an_open_transaction_does_not(
    server: tuple[_Server, Emulators], tmp_path: Path
) -> None:
    _, emulators = server
    csv_a, csv_b = tmp_path / "a.csv", tmp_path / "b.csv"
    csv_a.write_text("1,one\n2,two\n")
    csv_b.write_text("3,three\n")
    run(
        emulators,
        "CREATE DATABASE IF NOT EXISTS ANALYTICS",
        "CREATE SCHEMA IF NOT EXISTS ANALYTICS.RAW",
        "CREATE TABLE ANALYTICS.RAW.T (ID NUMBER(38,0) NOT NULL, NAME VARCHAR(10), AMOUNT NUMBER(10,2), "
        "LOADED_AT TIMESTAMP_NTZ, META OBJECT)",
        "CREATE STAGE IF NOT EXISTS ANALYTICS.RAW.S",
        f"PUT 'file://{csv_a}' @ANALYTICS.RAW.S/batch/ AUTO_COMPRESS=FALSE",
        f"PUT 'file://{csv_b}' @ANALYTICS.RAW.S/later/ AUTO_COMPRESS=FALSE",
    )
    run(emulators, COPY.format(path="batch"), **IN_RAW)
    columns = run(emulators, COLUMNS_SQL)
    described = run(emulators, "DESCRIBE TABLE ANALYTICS.RAW.T", **IN_RAW)
    assert columns[0][:5] == ("ID", "NUMBER", None, 38, 0) and columns[1][:3] == ("NAME", "TEXT", 10)

    # A transaction left open when the server dies: its rows must be gone afterwards.
    open_session = emulators.snowflake_connect()
    cur = open_session.cursor()
    cur.execute("BEGIN")
    cur.execute("INSERT INTO ANALYTICS.RAW.T (ID, NAME) VALUES (99, 'uncommitted')")

    restart(emulators)
    with contextlib.suppress(Exception):
        open_session.close()  # its server is gone; so is the session

    # A session naming no database sees it: every database is attached at start, as on Snowflake.
    assert run(emulators, "SELECT ID, NAME FROM ANALYTICS.RAW.T ORDER BY ID") == [(1, "one"), (2, "two")]
    assert run(emulators, COLUMNS_SQL) == columns
    assert run(emulators, "DESCRIBE TABLE ANALYTICS.RAW.T", **IN_RAW) == described
    assert run(emulators, "CREATE STAGE IF NOT EXISTS ANALYTICS.RAW.S") == [("S already exists, statement succeeded.",)]
    staged = sorted(r[0] for r in run(emulators, "LIST @ANALYTICS.RAW.S"))
    assert staged == ["s/batch/a.csv", "s/later/b.csv"]
    # The load history survived: the file loaded before the restart is not loaded twice.
    assert [r[1] for r in run(emulators, COPY.format(path="batch"), **IN_RAW)] == ["LOAD_SKIPPED"]
    assert [(r[1], r[3]) for r in run(emulators, COPY.format(path="later"), **IN_RAW)] == [("LOADED", 1)]
    assert run(emulators, "SELECT COUNT(*) FROM ANALYTICS.RAW.T") == [(3,)]


def test_a_restart_fault_fires_once_across_the_restart(server: tuple[_Server, Emulators]) -> None:
    _, emulators = server
    restart(emulators)
    # The new process loads the same faults file: it must not crash again on the same statement.
    response = requests.post(emulators_url(emulators), json={"sqlText": TRIGGER}, timeout=30)
    assert response.status_code == 401  # reached fakesnow, which wants a session
    assert emulators.snowflake_server_state()["restarts"] == 1
    assert len(served(emulators.work_dir / SNOWFLAKE_FAULTS)) == 1

    # A fault allowed to fire twice fires once more after the restart, and no more.
    write_faults(
        emulators.work_dir / SNOWFLAKE_FAULTS,
        [{"match": "^SELECT 'restart now'", "action": "restart", "seconds": 0, "times": 2}],
    )
    for restarts in (2, 3):
        with pytest.raises(requests.ConnectionError):
            requests.post(emulators_url(emulators), json={"sqlText": TRIGGER}, timeout=30)
        emulators.wait_for_snowflake_restarts(restarts)
    assert requests.post(emulators_url(emulators), json={"sqlText": TRIGGER}, timeout=30).status_code == 401
    assert emulators.snowflake_server_state()["restarts"] == 3


def test_stopping_the_supervisor_stops_its_server(server: tuple[_Server, Emulators]) -> None:
    supervisor, emulators = server
    child = psutil.Process(emulators.snowflake_server_state()["pid"])
    assert child.ppid() == supervisor.process.pid
    supervisor.stop()  # SIGTERM, as at the end of a test session
    assert supervisor.process.returncode == 0
    child.wait(timeout=30)


def test_the_server_ends_when_its_supervisor_is_killed(server: tuple[_Server, Emulators]) -> None:
    supervisor, emulators = server
    child = psutil.Process(emulators.snowflake_server_state()["pid"])
    os.kill(supervisor.process.pid, signal.SIGKILL)  # as when the test run that started it dies
    supervisor.process.wait()
    child.wait(timeout=30)
