"""The ingest DAG against a Spark standalone cluster: a master and a worker from the pyspark package.

The cluster's jobs run a Python that cannot import this provider unless the job ships it
(tests/emulators/spark_cluster.py), and two connectors, each limited to one core by its connector
file's ``spark:`` section, load side by side on the worker's two cores. A DynamoDB connector's
sync DAG runs on the same cluster, logging in to Snowflake by key pair: a scheduled run's batches,
then a continuous run's application.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from airflow_kinesis_snowflake.hooks.spark import package_core
from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.emulators.spark_cluster import SparkCluster
from tests.emulators.spark_env import SPARK_SETTINGS
from tests.integration.core.sources.dynamodb.test_discovery import create
from tests.integration.test_dynamodb_dag import loaded, scanned
from tests.integration.test_ingest_dag import write_connector
from tests.integration.test_key_pair_dags import TEXT_ONLY, key_pair_connection, private_pem, public_pem

pytestmark = pytest.mark.integration

SPARK_CONN_ID = "spark_cluster"
# Each DAG run's application syncs for 6 seconds, then ends.
CONTINUOUS = {"mode": "continuous", "max_runtime_minutes": 0.1}
IMPORT_PROVIDER = "import airflow_kinesis_snowflake.core.job"


def _python(cluster: SparkCluster, dag_env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with the cluster jobs' Python, in the environment the DAG runs have."""
    return subprocess.run(
        [str(cluster.executor_python), "-c", code], env=dag_env, capture_output=True, text=True, timeout=120
    )


def test_the_cluster_python_imports_the_provider_only_from_what_a_job_ships(
    spark_standalone: SparkCluster, dag_env: dict[str, str], tmp_path: Path
) -> None:
    # The venv's own Python imports it from the editable install and the source tree on PYTHONPATH ...
    assert _python(spark_standalone, dag_env, "import sys; sys.exit(0)").returncode == 0
    hidden = _python(spark_standalone, dag_env, IMPORT_PROVIDER)
    assert hidden.returncode != 0
    assert "No module named 'airflow_kinesis_snowflake'" in hidden.stderr
    # The tests' Spark daemon (spark.python.daemon.module) starts there before a task's files arrive
    # (Spark 3.5): it and the emulators' package import without the provider.
    daemon = _python(spark_standalone, dag_env, f"import {SPARK_SETTINGS['spark.python.daemon.module']}")
    assert daemon.returncode == 0, daemon.stderr[-2000:]
    # ... while the archive the hook ships (--py-files) is found, with the libraries the job needs.
    shipped = package_core(tmp_path)
    code = f"import sys; sys.path.insert(0, {str(shipped)!r}); {IMPORT_PROVIDER} as job, boto3, snowflake.connector"
    code += "; print(job.__file__)"
    found = _python(spark_standalone, dag_env, code)
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout.strip().startswith(str(shipped))


def _connector(cluster: SparkCluster, stream: str, app: str, table: str) -> dict[str, Any]:
    return {
        "connector_id": app.replace("-", "_"),
        "source": {"stream_name": stream, "region": "us-east-1", "application_name": app},
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "batch": {"schedule": None, "retries": 0},
        "connections": {"spark": SPARK_CONN_ID},
        # One core each: two connectors' jobs fit the worker's two cores side by side; 512m each
        # fit its 1g. The Python is the one that imports the provider only when it is shipped.
        "spark": {
            "executor_memory": "512m",
            "conf": {"spark.cores.max": 1},
            "pyspark_python": str(cluster.executor_python),
        },
    }


DAG_FILE = """
from pathlib import Path
from airflow_kinesis_snowflake.dags import build_connector_file_dags
globals().update(build_connector_file_dags(Path(__file__).parent / "connectors" / "{name}"))
"""


def _connector_dag_file(dags_dir: Path, connector: dict[str, Any]) -> Path:
    """A DAG folder of its own with the connector file and its DAG file, as a deployment lays them out.

    Two DAG runs at once serialise their DAG files into the one metadata database: with a folder
    each, they write different DAGs (one folder would give both the same clean-up DAG to insert).
    """
    name = f"{connector['connector_id']}.yaml"
    (dags_dir / "connectors").mkdir(parents=True)
    (dags_dir / "connectors" / name).write_text(yaml.safe_dump(connector))
    dag_file = dags_dir / f"kinesis_snowflake_{connector['connector_id']}.py"
    dag_file.write_text(DAG_FILE.format(name=name))
    return dag_file


def _wait_for_dag_row(env: dict[str, str], dag_id: str, run: Future[Any], timeout: float = 600) -> None:
    """Until a DAG run's ``dag.test()`` has written its DAG to the metadata database, or the run ended."""
    deadline = time.monotonic() + timeout
    while not run.done():
        if time.monotonic() > deadline:
            raise AssertionError(f"the DAG {dag_id} never reached the metadata database")
        db = sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db", timeout=5)
        try:
            if db.execute("SELECT 1 FROM dag WHERE dag_id = ?", (dag_id,)).fetchone():
                return
        except sqlite3.OperationalError:
            pass  # locked by the writer: look again
        finally:
            db.close()
        time.sleep(0.2)


class _MasterWatch:
    """Snapshots of the master's active applications, taken every 0.2 s while DAG runs go on.

    The readers of both connectors are held in GetRecords (the moto server's ``hold_while`` fault)
    while ``gate`` exists: each application keeps its executor busy until the watch has seen both
    applications running at once, then it removes the gate. Whether they ever run side by side
    depends only on the cores the master gives them, not on how fast the machine is. Should they
    never run together (one application holding every core), the gate goes ``give_up`` seconds after
    the first application appeared, so that the runs end, and the test fails on what the snapshots show.
    """

    def __init__(self, cluster: SparkCluster, apps: list[str], gate: Path, give_up: float = 300) -> None:
        self.cluster = cluster
        self.apps = apps
        self.gate = gate
        self.give_up = give_up
        self.snapshots: list[dict[str, dict[str, Any]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        deadline: float | None = None  # counted from the first application seen, not from cold starts
        while not self._stop.wait(0.2):
            if deadline is not None and time.monotonic() > deadline:
                self.gate.unlink(missing_ok=True)
            try:
                active = self.cluster.master_state()["activeapps"]
            except (requests.RequestException, ValueError, KeyError):  # a slow answer is one snapshot fewer
                continue
            ours = {a["name"]: a for a in active if any(app in a["name"] for app in self.apps)}
            self.snapshots.append(ours)
            if ours and deadline is None:
                deadline = time.monotonic() + self.give_up
            if len(ours) == len(self.apps) and all(a["state"] == "RUNNING" and a["cores"] >= 1 for a in ours.values()):
                self.gate.unlink(missing_ok=True)

    def __enter__(self) -> _MasterWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.gate.unlink(missing_ok=True)


def test_two_connectors_load_side_by_side_on_the_cluster_each_on_one_core(
    emulators: Emulators, dag_env: dict[str, str], spark_standalone: SparkCluster, tmp_path: Path
) -> None:
    runs: dict[str, tuple[Path, str, str, int]] = {}  # application -> (DAG file, ingest DAG id, table, records)
    streams = []
    for name, records, shards in (("left", 240, 2), ("right", 180, 1)):
        stream, app = unique(f"cluster-{name}"), unique(f"cluster-{name}-app")
        streams.append(stream)
        table = f"CLUSTER_{name.upper()}_" + app.split("-")[-1].upper()
        kinesis = create_stream(emulators, stream, shards=shards)
        create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0), NAME VARCHAR")
        put_json(kinesis, stream, [{"id": i, "name": f"{name}-{i}"} for i in range(records)])
        connector = _connector(spark_standalone, stream, app, table)
        dag_file = _connector_dag_file(tmp_path / name, connector)
        runs[app] = (dag_file, f"kinesis_snowflake_{connector['connector_id']}_ingest", table, records)

    env = {
        **dag_env,
        **spark_standalone.job_env(),
        f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}": json.dumps(spark_standalone.spark_connection()),
    }
    # Every GetRecords of both streams waits until the watch has seen both applications at work.
    gate = tmp_path / "readers-held"
    gate.touch()
    emulators.inject_kinesis_faults(
        [{"operation": "GetRecords", "stream": stream, "hold_while": str(gate)} for stream in streams]
    )
    with _MasterWatch(spark_standalone, list(runs), gate) as watch, ThreadPoolExecutor(max_workers=2) as pool:
        futures = {}
        for app, (dag_file, dag_id, _, _) in runs.items():
            futures[app] = pool.submit(run_dag, dag_id, env, dag_file=dag_file, log_path=tmp_path / f"{app}.log")
            # The next run starts once this one's DAGs are in the database: no two runs insert one row at once.
            _wait_for_dag_row(env, dag_id, futures[app])
        try:
            procs = {app: future.result() for app, future in futures.items()}
        finally:
            emulators.inject_kinesis_faults([])
    for app, proc in procs.items():
        assert proc.returncode == 0, f"{app}: {(proc.stdout + proc.stderr)[-4000:]}"

    # Each connector's records are in its table, each exactly once.
    for _, _, table, records in runs.values():
        fqn = f"ANALYTICS.RAW.{table}"
        assert query(emulators, f"SELECT ID FROM {fqn} ORDER BY ID") == [(i,) for i in range(records)]
        (dupes,) = query(
            emulators,
            f"SELECT COUNT(*) - COUNT(DISTINCT KINESISMETADATA:shardId::string || '/' || "
            f"KINESISMETADATA:sequenceNumber::string) FROM {fqn}",
        )
        assert dupes == (0,)

    # Both ran as applications of the cluster, with the connector file's executor memory ...
    completed = {app: [a for a in spark_standalone.master_state()["completedapps"] if app in a["name"]] for app in runs}
    for app, apps in completed.items():
        assert [(a["state"], a["memoryperexecutor"]) for a in apps] == [("FINISHED", 512)], app
    app_ids = {app: apps[0]["id"] for app, apps in completed.items()}
    # ... on executors of the worker, whose Python workers were the Python that hides the provider.
    worker = spark_standalone.worker_state()
    executors = worker["executors"] + worker["finishedexecutors"]
    for app, app_id in app_ids.items():
        assert [e["memory"] for e in executors if e["appid"] == app_id] == [512], app
    runs_log = spark_standalone.executor_python_runs.read_text()
    assert "kinesis_to_snowflake.py" in runs_log  # the drivers (client mode, spark.pyspark.python)
    # The executors' Python workers: Spark's Python daemon, which forks them (Spark 4 names the worker
    # module in its arguments, Spark 3.5 does not).
    assert f"-m {SPARK_SETTINGS['spark.python.daemon.module']}" in runs_log

    # Side by side: at one moment both applications held executors, one core each; never more. Without
    # spark.cores.max the first would take both cores, the second would wait for it (its readers held)
    # and the watch would never see them together.
    cores = [a["cores"] for snapshot in watch.snapshots for a in snapshot.values()]
    assert cores and max(cores) == 1
    together = [
        snapshot
        for snapshot in watch.snapshots
        if len(snapshot) == 2 and all(a["state"] == "RUNNING" and a["cores"] == 1 for a in snapshot.values())
    ]
    assert together, f"the two applications never ran at once: {watch.snapshots}"


KEY_PASSPHRASE = "cluster-key-passphrase-7c2f"
ALLOW_ALL = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}


def _key_pair_secrets(key: rsa.RSAPrivateKey, pem: str) -> list[str]:
    """Every form of a key-pair login's secrets to look for: passphrase, base64 DER, the PEM's lines."""
    der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return [KEY_PASSPHRASE, base64.b64encode(der).decode(), *pem.splitlines()[1:-1]]


def _worker_files(cluster: SparkCluster, app_ids: list[str]) -> dict[Path, str]:
    """What the worker keeps of an application: each executor's launch command, stdout and stderr."""
    files = {}
    for app_id in app_ids:
        for path in sorted((cluster.work_dir / "worker" / app_id).rglob("*")):
            if path.is_file() and path.suffix not in (".zip", ".py", ".jar"):
                files[path] = path.read_text(errors="replace")
    return files


def test_a_dynamodb_table_syncs_on_the_cluster_logging_in_to_snowflake_by_key_pair(
    emulators: Emulators, dag_env: dict[str, str], spark_standalone: SparkCluster, tmp_path: Path
) -> None:
    # A service user that logs in with its key only (the emulator verifies each login's JWT).
    suffix = unique("ddbkp").split("-")[-1].upper()
    service, key = f"DDB_CLUSTER_SVC_{suffix}", rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private_pem(key, KEY_PASSPHRASE)
    with emulators.snowflake_connect(session_parameters={"nop_regexes": TEXT_ONLY}) as conn:
        body = "".join(public_pem(key).splitlines()[1:-1])
        conn.cursor().execute(f"CREATE USER {service} TYPE = SERVICE RSA_PUBLIC_KEY = '{body}'")
        conn.cursor().execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
        conn.cursor().execute("CREATE SCHEMA IF NOT EXISTS ANALYTICS.RAW")
    # An AWS identity of its own: its secret key is one no other test's log holds.
    aws = emulators.iam_user_connection(unique("ddb-cluster-user"), ALLOW_ALL)
    secrets = [aws["password"], *_key_pair_secrets(key, pem)]

    dynamodb = emulators.boto3_client("dynamodb")
    prefix = unique("ddbcluster")
    table = f"{prefix}-orders"
    create(dynamodb, table)
    for n in range(36):
        item = {"pk": {"S": f"o{n}"}, "amount": {"N": f"{n}.5"}, "tags": {"SS": ["a", f"t{n}"]}}
        dynamodb.put_item(TableName=table, Item=item)
    app = f"{prefix}-app"
    connector: dict[str, Any] = {
        "connector_id": prefix.replace("-", "_"),
        "source": {
            "type": "dynamodb",
            "region": "us-east-1",
            "application_name": app,
            "tables": [table],
            "layout": "packed",
            "engine": "spark",
            "snapshot_total_segments": 2,
            "snapshot_read_units_per_second": 10000,
        },
        "destination": {"database": "ANALYTICS", "schema": "RAW"},
        "batch": {"schedule": None, "retries": 0},
        # One core of the shared cluster; the job's Python is the worker's PYSPARK_PYTHON.
        "spark": {"total_executor_cores": 1},
        "connections": {"spark": SPARK_CONN_ID},
    }
    dag_file = write_connector(tmp_path / "dags", connector)
    dag_id = f"dynamodb_snowflake_{connector['connector_id']}_sync"
    destination = table.replace("-", "_").upper()
    env = {
        **dag_env,
        **spark_standalone.job_env(),
        f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}": json.dumps(spark_standalone.spark_connection()),
        "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(aws),
        "AIRFLOW_CONN_SNOWFLAKE_DEFAULT": key_pair_connection(
            emulators, service, KEY_PASSPHRASE, private_key_content=pem
        ),
        # The driver's and executors' Python: the one that imports the provider only when the job ships it.
        "PYSPARK_PYTHON": str(spark_standalone.executor_python),
    }

    # Run 1: the snapshot, on the cluster.
    proc = run_dag(dag_id, env, dag_file=dag_file, log_path=tmp_path / "run1.log")
    outputs = [proc.stdout + proc.stderr]
    assert proc.returncode == 0, outputs[-1][-5000:]
    assert len(loaded(emulators, destination)) == 36
    assert loaded(emulators, destination) == scanned(dynamodb, table)

    # Run 2, in continuous mode: one application whose driver on the cluster syncs run after run (its
    # own Snowflake key-pair logins and lease-table calls included) until its runtime ends; an update
    # (a type change), a delete and a put arrive through the table's stream.
    write_connector(tmp_path / "dags", {**connector, "batch": {**connector["batch"], **CONTINUOUS}})
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "o7"}, "amount": {"S": "now a string"}})
    dynamodb.delete_item(TableName=table, Key={"pk": {"S": "o11"}})
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "o40"}, "amount": {"N": "40.25"}})
    proc = run_dag(dag_id, env, dag_file=dag_file, log_path=tmp_path / "run2.log")
    outputs.append(proc.stdout + proc.stderr)
    assert proc.returncode == 0, outputs[-1][-5000:]
    rows = loaded(emulators, destination)
    assert rows["o7"] == {"pk": "o7", "amount": "now a string"} and "o11" not in rows and len(rows) == 36
    assert rows["o40"] == {"pk": "o40", "amount": Decimal("40.25")}
    assert rows == scanned(dynamodb, table)
    continuous = [line for line in outputs[-1].splitlines() if "Spark-Submit cmd:" in line]
    assert len(continuous) == 1 and "--continuous" in continuous[0], continuous
    # The application's batches are recorded under its one attempt id, which the task read back (how
    # many batches fit in its runtime depends on the machine; the loop is specified in
    # tests/unit/core/test_dynamodb_continuous.py).
    per_attempt = query(
        emulators,
        "SELECT COUNT_IF(COMMITTED) FROM ANALYTICS.RAW.DYNAMODB_INGEST_BATCH_OUTCOMES "
        f"WHERE APPLICATION_NAME = '{app}' GROUP BY ATTEMPT_ID ORDER BY MIN(RECORDED_AT)",
    )
    assert per_attempt[-1][0] >= 1, per_attempt

    # Every batch was an application of the cluster's master, submitted in client mode ...
    commands = [line for output in outputs for line in output.splitlines() if "Spark-Submit cmd:" in line]
    assert commands and all(f"--master {spark_standalone.master_url}" in c for c in commands)
    assert all("dynamodb_to_snowflake.py" in c and "--py-files" in c for c in commands)
    assert all("--total-executor-cores 1" in c for c in commands)  # the connector file's spark section
    ours = [a for a in spark_standalone.master_state()["completedapps"] if app in a["name"]]
    assert len(ours) == len(commands) and {a["state"] for a in ours} == {"FINISHED"}
    # ... whose executors ran on the worker, with the Python that finds the provider only in what was shipped.
    worker = spark_standalone.worker_state()
    app_ids = [a["id"] for a in ours]
    assert {e["appid"] for e in worker["executors"] + worker["finishedexecutors"]} >= set(app_ids)
    runs_log = spark_standalone.executor_python_runs.read_text()
    assert "dynamodb_to_snowflake.py" in runs_log

    # No secret on the command line, in a Spark setting, in the task log or on the worker.
    on_worker = _worker_files(spark_standalone, app_ids)
    assert any("Spark Executor Command" in text for text in on_worker.values())
    for secret in secrets:
        assert not [c for c in commands if secret in c], "a secret is on the spark-submit command line"
        assert not [o for o in outputs if secret in o], "a secret is in the task log"
        assert not [p for p, text in on_worker.items() if secret in text], "a secret is in an executor's files"
