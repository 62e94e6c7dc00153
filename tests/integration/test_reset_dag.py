"""Reset, undo and reset again through the real DAGs (dag.test() with run conf), with ingest runs between."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_kinesis_snowflake.core.model import InitialPosition
from airflow_kinesis_snowflake.core.state.backups import CheckpointBackup
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.core.state.marks import resolve_application
from airflow_kinesis_snowflake.core.state.metadata import read_marks
from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.integration.test_ingest_dag import checkpoints, shard_tips

pytestmark = pytest.mark.integration

DAG_FILE = """
from pathlib import Path
from airflow_kinesis_snowflake.dags import build_connector_dags
globals().update(build_connector_dags(Path(__file__).parent / "connectors", backup_dir={backup_dir!r}))
"""


def run(dag_id: str, env: dict[str, str], dag_file: Path, log: Path, conf: dict[str, Any] | None = None) -> str:
    proc = run_dag(dag_id, env, dag_file=dag_file, log_path=log, conf=json.dumps(conf) if conf else None)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    return output


def test_reset_to_a_new_name_undo_and_delete_table_end_to_end(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    stream, app = unique("resetdag"), unique("resetdag-app")
    table = "RESET_" + app.split("-")[-1].upper()
    fqn = f"ANALYTICS.RAW.{table}"
    kinesis = create_stream(emulators, stream, 2)
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    connector_id = app.replace("-", "_")
    dags = tmp_path / "dags"
    (dags / "connectors").mkdir(parents=True)
    (dags / "connectors" / f"{connector_id}.yaml").write_text(
        yaml.safe_dump(
            {
                "connector_id": connector_id,
                "source": {"stream_name": stream, "region": "us-east-1", "application_name": app},
                "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
                "batch": {"schedule": None, "retry_delay_seconds": 0},
            }
        )
    )
    backups = tmp_path / "backups"
    dag_file = dags / "connectors_dags.py"
    dag_file.write_text(DAG_FILE.format(backup_dir=str(backups)))
    ingest, reset, restore = (f"kinesis_snowflake_{connector_id}_{kind}" for kind in ("ingest", "reset", "restore"))
    dynamodb = emulators.boto3_client("dynamodb")

    def ids() -> Counter[int]:
        return Counter(int(r[0]) for r in query(emulators, f"SELECT ID FROM {fqn}"))

    put_json(kinesis, stream, [{"id": i} for i in range(30)])
    run(ingest, dag_env, dag_file, tmp_path / "ingest1.log")
    assert ids() == Counter(range(30))
    first = checkpoints(emulators, app)
    generation = read_marks(dynamodb, app).generation_id  # type: ignore[union-attr]

    # 1. A new application name, from TRIM_HORIZON: the ingest DAG switches to it by itself and reads
    #    everything again into the same table, since the ledger's marks belong to the old name.
    new = app + "-v2"
    output = run(
        reset,
        dag_env,
        dag_file,
        tmp_path / "reset.log",
        {
            "mode": "new_application_name",
            "new_application_name": new,
            "initial_position": "TRIM_HORIZON",
            "dry_run": False,
            "confirm": app,
        },
    )
    assert "records already loaded will be read and loaded again" in output
    assert "do not apply to" in output
    (backup,) = (backups / app).glob("*-reset-new_application_name.json")
    assert read_marks(dynamodb, app).superseded_by == new  # type: ignore[union-attr]
    output = run(ingest, dag_env, dag_file, tmp_path / "ingest2.log")
    assert f"superseded by {new}" in output
    assert ids() == Counter(list(range(30)) * 2)
    assert checkpoints(emulators, new) == shard_tips(kinesis, stream)
    assert checkpoints(emulators, app) == first  # the old table is left as it was

    # 2. Undo: the old table and its generation come back, and ingestion goes on from its checkpoints.
    run(restore, dag_env, dag_file, tmp_path / "restore.log", {"backup": str(backup), "dry_run": False, "confirm": new})
    assert resolve_application(dynamodb, app).active == app
    assert read_marks(dynamodb, app).generation_id == generation  # type: ignore[union-attr]
    put_json(kinesis, stream, [{"id": i} for i in range(30, 40)])
    run(ingest, dag_env, dag_file, tmp_path / "ingest3.log")
    assert ids() == Counter(list(range(30)) * 2 + list(range(30, 40)))
    assert checkpoints(emulators, app) == shard_tips(kinesis, stream)

    # 3. Delete the table, starting at LATEST: a new generation whose shards start at the reset time.
    run(
        reset,
        dag_env,
        dag_file,
        tmp_path / "delete.log",
        {"mode": "delete_table", "initial_position": "LATEST", "dry_run": False, "confirm": app},
    )
    assert read_marks(dynamodb, app).generation_id != generation  # type: ignore[union-attr]
    leases = LeaseTable(dynamodb, app).leases()
    assert set(leases) == set(first)
    assert {(lease.start.position, lease.checkpoint) for lease in leases.values()} == {
        (InitialPosition.AT_TIMESTAMP, None)
    }
    (deleted,) = (backups / app).glob("*-reset-delete_table.json")
    assert {
        k: v["sequence_number"] for k, v in CheckpointBackup.from_json(deleted.read_text()).checkpoints().items() if v
    } == (shard_tips(kinesis, stream))
