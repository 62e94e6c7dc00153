"""Two ingestions sharing one application name split the stream and load every record once."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import migrate
from tests.integration.test_ingest_dag import checkpoints, shard_tips, write_connector

pytestmark = pytest.mark.integration

ROWS_LOADED = re.compile(r"Batch \w+: (\d+) rows loaded")
SHARDS = re.compile(r"Batch \w+: \d+ shard ranges \(([^)]*)\)")


def start_dag(dag_id: str, dag_file: Path, env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    run_env = {**env, "AIRFLOW__CORE__DAGS_FOLDER": str(dag_file.parent)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.emulators.run_dag", str(dag_file), dag_id],
        env=run_env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_two_concurrent_ingestions_take_distinct_shards(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    stream, app = unique("coop"), unique("coop-app")
    table = "COOP_" + app.split("-")[-1].upper()
    kinesis = create_stream(emulators, stream, shards=4)
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    put_json(kinesis, stream, [{"id": i} for i in range(400)])

    dags = []
    for worker in ("a", "b"):
        connector = {
            "connector_id": f"{app.replace('-', '_')}_{worker}",
            "source": {"stream_name": stream, "region": "us-east-1", "application_name": app},
            "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
            "batch": {"schedule": None, "max_shards_per_batch": 2},
        }
        dag_file = write_connector(tmp_path / f"dags-{worker}", connector)
        dags.append((f"kinesis_snowflake_{connector['connector_id']}_ingest", dag_file))

    # Each worker needs its own metadata database: two dag.test() runs share nothing but AWS and Snowflake.
    procs, logs = [], []
    for worker, (dag_id, dag_file) in zip("ab", dags, strict=True):
        env = {**dag_env, "AIRFLOW_HOME": str(tmp_path / f"home-{worker}")}
        migrate(env)
        log = tmp_path / f"{worker}.log"
        logs.append(log)
        procs.append(start_dag(dag_id, dag_file, env, log))
    codes = [p.wait(timeout=600) for p in procs]
    outputs = [log.read_text() for log in logs]
    assert codes == [0, 0], "\n\n".join(o[-3000:] for o in outputs)

    shards_read = [set(SHARDS.search(o).group(1).split(", ")) for o in outputs]  # type: ignore[union-attr]
    assert all(len(s) == 2 for s in shards_read)
    assert shards_read[0].isdisjoint(shards_read[1])
    loaded = [sum(int(n) for n in ROWS_LOADED.findall(o)) for o in outputs]
    assert all(n > 0 for n in loaded), loaded
    assert sum(loaded) == 400

    ids = [r[0] for r in query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table} ORDER BY ID")]
    assert ids == list(range(400))
    assert checkpoints(emulators, app) == shard_tips(kinesis, stream)
