"""The ingest DAG against a Spark standalone cluster: a master and a worker from the pyspark package.

The cluster's jobs run a Python that cannot import this provider unless the job ships it
(tests/emulators/spark_cluster.py), and two connectors, each limited to one core by its connector
file's ``spark:`` section, load side by side on the worker's two cores.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from airflow_kinesis_snowflake.hooks.spark import package_core
from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.emulators.spark_cluster import SparkCluster

pytestmark = pytest.mark.integration

SPARK_CONN_ID = "spark_cluster"
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
    assert "pyspark.worker" in runs_log  # the executors' Python workers

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
