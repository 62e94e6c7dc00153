"""Shared fixtures: the emulator servers, an Airflow home on SQLite, sample streams and tables."""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import structlog

# Airflow reads its home when first imported: give this test session its own, on SQLite.
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="airflow-home-"))
atexit.register(shutil.rmtree, _AIRFLOW_HOME, ignore_errors=True)
os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"

from tests.emulators import Emulators, local_emulators  # noqa: E402
from tests.emulators.airflow_env import (  # noqa: E402
    airflow_home_env,
    migrate,
    run_dag,
)
from tests.emulators.airflow_stack import (  # noqa: E402
    PROJECT_DAG_FILE,
    AirflowStack,
    airflow_stack,
    api_server,
    write_dags_folder,
)
from tests.emulators.dag_runner import SERVER_ENV, dag_runner  # noqa: E402
from tests.emulators.databricks import Databricks, local_databricks  # noqa: E402
from tests.emulators.iam import IamMoto, enforcing_moto, stock_moto  # noqa: E402
from tests.emulators.spark_cluster import SparkCluster, spark_cluster  # noqa: E402
from tests.emulators.spark_env import spark_env  # noqa: E402


@pytest.fixture
def hook_log(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], list[tuple[str, str]]]]:
    """What the hooks logged so far in the test, as ``(level, message)`` pairs, the level in lower case.

    Airflow 3.1 and later log a hook's lines through structlog, Airflow 3.0 through the standard library's
    logging (its ``airflow.task.hooks.*`` loggers): the pairs come from whichever of the two this Airflow used.
    """
    caplog.set_level(logging.DEBUG, logger="airflow.task.hooks")
    with structlog.testing.capture_logs() as events:

        def logged() -> list[tuple[str, str]]:
            if events:
                return [(str(event["log_level"]), str(event["event"])) for event in events]
            return [
                (record.levelname.lower(), record.getMessage())
                for record in caplog.records
                if record.name.startswith("airflow.task.hooks.")
            ]

        yield logged


@pytest.fixture
def unit_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Airflow connections aws_unit (region eu-west-1), spark_unit (``local[2]``) and snowflake_unit,
    from the environment: for operators whose hooks are built but whose calls are replaced."""
    aws = {"conn_type": "aws", "login": "AKIAUNITTEST00000001", "password": "x", "extra": {"region_name": "eu-west-1"}}
    monkeypatch.setenv("AIRFLOW_CONN_AWS_UNIT", json.dumps(aws))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_UNIT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv("AIRFLOW_CONN_SNOWFLAKE_UNIT", json.dumps({"conn_type": "snowflake", "login": "u"}))


@pytest.fixture(scope="session")
def emulators(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulators]:
    """One moto server and one fakesnow server for the whole session, on loopback."""
    with local_emulators(tmp_path_factory.mktemp("emulators")) as running:
        yield running


@pytest.fixture(scope="session")
def iam_moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IamMoto]:
    """A second moto server, enforcing IAM, with an administrator's key."""
    with enforcing_moto(tmp_path_factory.mktemp("moto-iam")) as running:
        yield running


@pytest.fixture(scope="session")
def moto_without_simulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IamMoto]:
    """A moto server as the stock image runs it: no SimulatePrincipalPolicy, no IAM enforcement."""
    with stock_moto(tmp_path_factory.mktemp("moto-stock")) as running:
        yield running


@pytest.fixture(scope="session")
def databricks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Databricks]:
    """An emulated Databricks workspace on loopback (tests/emulators/databricks.py): its runs run through a
    local spark-submit; started for the tests that use it."""
    with local_databricks(tmp_path_factory.mktemp("databricks")) as running:
        yield running


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A Spark standalone master and one worker (2 cores, 1g) on loopback, started for the tests that use it."""
    with spark_cluster(tmp_path_factory.mktemp("spark-cluster")) as running:
        yield running


@pytest.fixture
def aws_connections(emulators: Emulators, monkeypatch: pytest.MonkeyPatch) -> Emulators:
    """Point aws_default / snowflake_default / spark_default at the emulators in this process."""
    for key, value in emulators.airflow_env().items():
        monkeypatch.setenv(key, value)
    return emulators


@pytest.fixture(scope="session")
def dag_env(emulators: Emulators, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Environment for `dag.test()` in a child process: its own Airflow home, connections set.

    The child processes are forked by a dag_runner server that imported Airflow and the provider once
    (see tests/emulators/dag_runner.py); `RUN_DAG_SERVER` tells `tests.emulators.run_dag` where it is.
    """
    # The tests' short local[2] jobs: no UI, JVMs from a class-data archive, a Python daemon preloaded.
    home = tmp_path_factory.mktemp("airflow")
    env = airflow_home_env(home, {**emulators.airflow_env(), **spark_env()})
    migrate(env)
    with dag_runner(env, home / "dag-runner.log") as address:
        yield {**env, SERVER_ENV: address}


@pytest.fixture
def real_airflow(emulators: Emulators, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    """A real Airflow beside the emulators: api-server, scheduler, dag-processor, triggerer; LocalExecutor, SQLite.

    Its DAGs folder holds the project's DAG file and, as its connector file, connector ``orders``
    reading a new two-shard stream from TRIM_HORIZON into a new table ANALYTICS.RAW.SCHED_<id>
    (ID, NAME) every minute, with no retries. Its processes get the emulators' connections and the
    tests' Spark settings (``local[2]``, class-data archives) as environment variables. See
    tests/emulators/airflow_stack.py.

    Cron schedules make data-interval runs (``[scheduler] create_cron_data_intervals``, a deployment
    setting): with ``catchup`` off, the first scheduled run is the last complete minute's, due as
    soon as the DAG is unpaused, instead of at the next minute's start.
    """
    stream, app = unique("sched"), unique("sched-app")
    create_stream(emulators, stream, shards=2)
    connector = {
        "connector_id": "orders",
        "source": {
            "stream_name": stream,
            "region": "us-east-1",
            "application_name": app,
            "initial_position": "TRIM_HORIZON",
            "iam_check": "off",
        },
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": "SCHED_" + app.split("-")[-1].upper()},
        "snowflake": {"columns": {"ID": "NUMBER(38,0)", "NAME": "VARCHAR"}},
        "batch": {"schedule": "* * * * *", "retries": 0},
    }
    work_dir = tmp_path_factory.mktemp("real-airflow")
    settings = {"AIRFLOW__SCHEDULER__CREATE_CRON_DATA_INTERVALS": "True"}
    with airflow_stack(work_dir, connector, {**emulators.airflow_env(), **spark_env(), **settings}) as stack:
        yield stack


@dataclass(frozen=True)
class LagBatch:
    """A DAGs folder whose connector ``orders`` loaded one real batch (see the ``lag_batch`` fixture)."""

    dags_folder: Path
    connector_file: Path
    stream_name: str
    application_name: str
    table: str
    dag_id: str
    run_log: str
    airflow_home: Path


@pytest.fixture(scope="session")
def lag_batch(emulators: Emulators, dag_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> LagBatch:
    """One ingest DAG run (``dag.test()``, real spark-submit) of connector ``orders``, shared by the tests
    that read what a batch leaves behind: ``status``, the lag page.

    The connector reads a new two-shard stream from TRIM_HORIZON into a new table ANALYTICS.RAW.LAG_<id>
    (ID, NAME); before the run, 20 JSON records and one record that is not JSON were put.
    """
    stream, app = unique("lag"), unique("lag-app")
    table = "LAG_" + app.split("-")[-1].upper()
    kinesis = create_stream(emulators, stream, shards=2)
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0), NAME VARCHAR")
    connector = {
        "connector_id": "orders",
        "source": {"stream_name": stream, "region": "us-east-1", "application_name": app, "iam_check": "off"},
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "batch": {"schedule": None, "retries": 0},
    }
    dags_folder = tmp_path_factory.mktemp("lag-dags")
    connector_file = write_dags_folder(dags_folder, connector)
    put_json(kinesis, stream, [{"id": i, "name": f"n{i}"} for i in range(20)])
    put_raw(kinesis, stream, [b"not json"])
    dag_id = "kinesis_snowflake_orders_ingest"
    proc = run_dag(dag_id, dag_env, dag_file=dags_folder / PROJECT_DAG_FILE.name)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return LagBatch(
        dags_folder,
        connector_file,
        stream,
        app,
        f"ANALYTICS.RAW.{table}",
        dag_id,
        proc.stdout + proc.stderr,
        Path(dag_env["AIRFLOW_HOME"]),
    )


@pytest.fixture(scope="session")
def lag_page_server(
    emulators: Emulators, lag_batch: LagBatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AirflowStack]:
    """An Airflow api-server (no scheduler) on the DAGs folder of ``lag_batch``, with the emulators'
    connections, started once for the tests of the lag page. Providers are discovered eagerly
    (``lazy_discover_providers`` off), so the page's plugin is loaded from ``get_provider_info()``."""
    extra = {**emulators.airflow_env(), "AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": "False"}
    with api_server(tmp_path_factory.mktemp("lag-page"), lag_batch.dags_folder, extra) as stack:
        yield stack


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_stream(emulators: Emulators, name: str, shards: int) -> Any:
    kinesis = emulators.boto3_client("kinesis")
    kinesis.create_stream(StreamName=name, ShardCount=shards)
    kinesis.get_waiter("stream_exists").wait(StreamName=name)
    return kinesis


def put_json(kinesis: Any, stream: str, bodies: list[dict[str, Any]], key: str = "id") -> None:
    for start in range(0, len(bodies), 500):
        chunk = bodies[start : start + 500]
        response = kinesis.put_records(
            StreamName=stream,
            Records=[{"Data": json.dumps(b).encode(), "PartitionKey": f"pk-{b[key]}"} for b in chunk],
        )
        assert response["FailedRecordCount"] == 0


def put_raw(kinesis: Any, stream: str, payloads: list[bytes]) -> None:
    kinesis.put_records(
        StreamName=stream, Records=[{"Data": p, "PartitionKey": f"raw-{i}"} for i, p in enumerate(payloads)]
    )


def create_table(emulators: Emulators, database: str, schema: str, table: str, columns: str) -> None:
    conn = emulators.snowflake_connect()
    try:
        cur = conn.cursor()
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {database}")
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {database}.{schema}")
        cur.execute(f"CREATE TABLE {database}.{schema}.{table} ({columns}, KINESISMETADATA OBJECT)")
    finally:
        conn.close()


def query(emulators: Emulators, sql: str) -> list[tuple[Any, ...]]:
    conn = emulators.snowflake_connect()
    try:
        return list(conn.cursor().execute(sql).fetchall())
    finally:
        conn.close()


# Test modules with a test that holds a worker for minutes (a real Airflow, a Spark cluster, a
# resharding or a reset end to end through its DAGs) run first, so that pytest-xdist's workers do
# not end with one of them running alone while the others have nothing left. The order is otherwise
# the collection's, modules kept whole. LONG_RUNNING_MODULES: the modules of the suite's longest
# single tests in a --durations run (each test over two minutes on a loaded 2-core machine).
LONG_RUNNING_FIXTURES = frozenset({"real_airflow", "spark_standalone"})
LONG_RUNNING_MODULES = frozenset(
    {
        "tests/integration/test_resharding.py",
        "tests/integration/test_reset_dag.py",
        "tests/integration/core/test_dynamodb_job.py",
        "tests/integration/test_schema_evolution_dag.py",
        "tests/integration/test_least_privilege.py",
        "tests/integration/test_dynamodb_dag.py",
        "tests/integration/test_wheel_install.py",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    long_running = LONG_RUNNING_MODULES | {
        item.nodeid.split("::")[0]
        for item in items
        if LONG_RUNNING_FIXTURES.intersection(getattr(item, "fixturenames", ()))
    }
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in long_running)


# The user property a fault-matrix case records its outcome under; outcomes are gathered from the
# test reports, which pytest-xdist workers send back to the main process.
FAULT_MATRIX_PROPERTY = "fault_matrix_outcome"
_FAULT_MATRIX: list[str] = []


@pytest.fixture
def outcomes(record_property: Any) -> Any:
    """Record one fault-matrix case's outcome (a ``tests.reliability.test_fault_matrix.Outcome``) on
    its test report.

    The outcome travels with the report, so the matrix printed by ``pytest_terminal_summary`` holds
    every case (Kinesis and DynamoDB) even when the cases ran in several pytest-xdist workers.
    """

    def add(outcome: Any) -> None:
        record_property(FAULT_MATRIX_PROPERTY, json.dumps(outcome.__dict__))

    return add


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        _FAULT_MATRIX.extend(str(value) for name, value in report.user_properties if name == FAULT_MATRIX_PROPERTY)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the fault matrix of tests/reliability when it ran."""
    if _FAULT_MATRIX:
        from tests.reliability import test_fault_matrix as matrix

        terminalreporter.section("fault matrix")
        rows = sorted((matrix.outcome_from_property(v) for v in _FAULT_MATRIX), key=lambda r: r.case)
        for line in matrix.matrix_lines(rows):
            terminalreporter.write_line(line)
