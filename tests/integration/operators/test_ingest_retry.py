"""A retry of the ingest task resumes at once: its first try was killed holding the leases.

The task runs as Airflow's task runner runs it, in a process of its own with the DAG file's
operator, its task instance (dag, task, run, map index, try) and the run's start; the first try is
killed (SIGKILL, by the moto server, as the heartbeat of its batch arrives: the leases are taken,
Spark not started). The second try of the same task instance must take those leases over
immediately, though they expire only after 300 s, and load every record once, with a real
``spark-submit``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.state.leases import LeaseOwner, LeaseTable, task_key
from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.run_dag import SERVER_ENV
from tests.integration.test_ingest_dag import checkpoints, shard_tips, write_connector

pytestmark = pytest.mark.integration

RECORDS = 120

# One try of the DAG file's ingest task, as the task runner would run it.
RUN_TRY = """
import json, runpy, sys
from datetime import datetime
from types import SimpleNamespace

dag_file, dag_id, run_id, try_number, started = sys.argv[1:6]
task = runpy.run_path(dag_file)[dag_id].get_task("ingest")
ti = SimpleNamespace(dag_id=dag_id, task_id="ingest", run_id=run_id, map_index=-1, try_number=int(try_number))
result = task.execute({"ti": ti, "dag_run": SimpleNamespace(start_date=datetime.fromisoformat(started))})
print("RESULT=" + json.dumps(result))
"""


def run_try(env: dict[str, str], args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-c", RUN_TRY, *args], env=env, stdout=out, stderr=subprocess.STDOUT)


def test_a_retry_takes_over_the_leases_of_its_killed_first_try_and_loads_every_record_once(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    stream, app = unique("retry"), unique("retry-app")
    table = "RETRY_" + app.split("-")[-1].upper()
    kinesis = create_stream(emulators, stream, shards=2)
    put_json(kinesis, stream, [{"id": i} for i in range(RECORDS)])
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    connector: dict[str, Any] = {
        "connector_id": app.replace("-", "_"),
        "source": {"stream_name": stream, "region": "us-east-1", "application_name": app, "iam_check": "off"},
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "batch": {"schedule": None, "retries": 1},  # leases last the default 300 s
    }
    dag_file = write_connector(tmp_path / "dags", connector)
    dag_id = f"kinesis_snowflake_{connector['connector_id']}_ingest"
    env = {k: v for k, v in dag_env.items() if k != SERVER_ENV} | {"AIRFLOW__CORE__DAGS_FOLDER": str(dag_file.parent)}
    dynamodb = emulators.boto3_client("dynamodb")
    leases = LeaseTable(dynamodb, app)
    leases.create(stream_name=stream, application_name=app)  # the DAG's create_lease_table task
    run_id = "manual__retry"
    args = [str(dag_file), dag_id, run_id]
    started = datetime.now(UTC).isoformat()
    key = task_key(dag_id, "ingest", run_id)

    # Try 1 is killed once its leases are taken, as its batch's first heartbeat arrives.
    first = run_try(env, [*args, "1", started], tmp_path / "try1.log")
    emulators.inject_kinesis_faults(
        [{"operation": "DynamoDB.PutItem", "contains": f"#worker#{key}/try-1/", "action": "kill", "pid": first.pid}]
    )
    try:
        code = first.wait(timeout=300)
        fired = bool(emulators.served_kinesis_faults())
    finally:
        emulators.inject_kinesis_faults([])
    assert fired and code < 0, (tmp_path / "try1.log").read_text()[-3000:]
    held = leases.leases()
    now = datetime.now(UTC).timestamp()
    owners = {shard: LeaseOwner.parse(lease.lease_owner) for shard, lease in held.items()}
    assert len(held) == 2 and all(lease.is_held(now) for lease in held.values())
    assert None not in owners.values()
    assert {(o.task_key, o.attempt) for o in owners.values() if o is not None} == {(key, 1)}
    assert query(emulators, f"SELECT COUNT(*) FROM ANALYTICS.RAW.{table}") == [(0,)]

    # Try 2 of the same task instance, right away: it takes them over and loads every record once.
    second = run_try(env, [*args, "2", started], tmp_path / "try2.log")
    code = second.wait(timeout=600)
    output = (tmp_path / "try2.log").read_text()
    assert code == 0, output[-5000:]
    result = json.loads(output.split("RESULT=", 1)[1].splitlines()[0])
    assert result["rows_loaded"] == RECORDS
    assert "took over the lease of an earlier try" in output
    ids = [r[0] for r in query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table}")]
    lost, duplicated = len(set(range(RECORDS)) - set(ids)), len(ids) - len(set(ids))
    assert (lost, duplicated) == (0, 0)
    assert checkpoints(emulators, app) == shard_tips(kinesis, stream)
    assert {lease.lease_owner for lease in leases.leases().values()} == {None}
    # Try 2's heartbeat item is deleted; one the killed try may have left carries a time to live.
    workers = [i for i in dynamodb.scan(TableName=app)["Items"] if i["item_type"]["S"] == "WORKER"]
    assert all("/try-1/" in i["worker_id"]["S"] and "delete_after" in i for i in workers), workers
