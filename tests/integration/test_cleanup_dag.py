"""Clean-up in one DAG folder and a connector in another, through the real DAGs (dag.test() with run conf)."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.core.state.metadata import KEY_ATTRIBUTE, METADATA_KEY
from tests.conftest import create_stream, create_table, put_json, query
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.integration.test_ingest_dag import checkpoints, shard_tips

pytestmark = pytest.mark.integration

DAG_FILE = """
from pathlib import Path
from airflow_kinesis_snowflake.dags import build_connector_dags
globals().update(build_connector_dags(Path(__file__).parent / "connectors", cleanup_dag_id={cleanup_dag_id!r}))
"""


def dag_folder(root: Path, connector: dict[str, Any], cleanup_dag_id: str) -> Path:
    """A DAGs folder with one connector file and the file calling the DAG factory; returns that file."""
    (root / "connectors").mkdir(parents=True)
    (root / "connectors" / f"{connector['connector_id']}.yaml").write_text(yaml.safe_dump(connector))
    dag_file = root / "connectors_dags.py"
    dag_file.write_text(DAG_FILE.format(cleanup_dag_id=cleanup_dag_id))
    return dag_file


def connector(connector_id: str, stream: str, app: str, table: str) -> dict[str, Any]:
    return {
        "connector_id": connector_id,
        "source": {"stream_name": stream, "region": "us-east-1", "application_name": app},
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "batch": {"schedule": None, "retry_delay_seconds": 0},
    }


def age_lease_table(dynamodb: Any, name: str, destination: str) -> None:
    """Date a lease table's checkpoints, heartbeats and creation a month back and drop its last ingest run,
    so that only the ledger can tell it is in use; its metadata item names ``destination``."""
    month_ago = datetime.now(UTC) - timedelta(days=30)
    for item in dynamodb.scan(TableName=name, ConsistentRead=True)["Items"]:
        attribute, value = {
            "METADATA": ("created_at", {"S": month_ago.isoformat()}),
            "SHARD": ("checkpointed_at", {"N": str(month_ago.timestamp())}),
            "WORKER": ("last_heartbeat", {"N": str(month_ago.timestamp())}),
        }[item["item_type"]["S"]]
        dynamodb.update_item(
            TableName=name,
            Key={KEY_ATTRIBUTE: item[KEY_ATTRIBUTE]},
            UpdateExpression="SET #a = :v REMOVE last_ingest_at",
            ExpressionAttributeNames={"#a": attribute},
            ExpressionAttributeValues={":v": value},
        )
    dynamodb.update_item(
        TableName=name,
        Key={KEY_ATTRIBUTE: {"S": METADATA_KEY}},
        UpdateExpression="SET destination = :d",
        ExpressionAttributeValues={":d": {"S": destination}},
    )


def run(dag_id: str, env: dict[str, str], dag_file: Path, log: Path, conf: dict[str, Any] | None = None) -> str:
    proc = run_dag(dag_id, env, dag_file=dag_file, log_path=log, conf=json.dumps(conf) if conf else None)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    return output


def test_clean_up_of_one_folder_keeps_the_live_table_of_another_and_removes_an_orphan(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    prefix = f"cf{uuid.uuid4().hex[:6]}-"
    stream, first_app, second_app, orphan = (prefix + n for n in ("stream", "first", "second", "orphan"))
    tables = {app: f"CF_{app.replace('-', '_').upper()}" for app in (first_app, second_app)}
    kinesis = create_stream(emulators, stream, 2)
    for table in tables.values():
        create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    first = dag_folder(tmp_path / "folder1", connector("first", stream, first_app, tables[first_app]), "cleanup_1")
    second = dag_folder(tmp_path / "folder2", connector("second", stream, second_app, tables[second_app]), "cleanup_2")
    dynamodb = emulators.boto3_client("dynamodb")

    # Folder 2's connector loads the stream.
    put_json(kinesis, stream, [{"id": i} for i in range(20)])
    run("kinesis_snowflake_second_ingest", dag_env, second, tmp_path / "ingest1.log")
    loaded = checkpoints(emulators, second_app)
    assert loaded == shard_tips(kinesis, stream)
    # A table nobody has used for a month, whose connector is gone: its ledger holds no commit of it.
    old = LeaseTable(dynamodb, orphan)
    old.create(stream_name=stream, application_name=orphan)
    dynamodb.update_item(
        TableName=orphan,
        Key={KEY_ATTRIBUTE: {"S": METADATA_KEY}},
        UpdateExpression="SET created_at = :old, destination = :d, connector_id = :c",
        ExpressionAttributeValues={
            ":old": {"S": (datetime.now(UTC) - timedelta(days=30)).isoformat()},
            ":d": {"S": f"ANALYTICS.RAW.{tables[first_app]}"},
            ":c": {"S": "retired"},
        },
    )

    # Folder 2's DynamoDB says nothing recent: only its ledger commit, minutes ago, says it is in use.
    age_lease_table(dynamodb, second_app, f"ANALYTICS.RAW.{tables[second_app]}")

    # Folder 1's clean-up, deleting, with no retention asked for: only folder 1's connector is in its DAG.
    output = run(
        "cleanup_1",
        dag_env,
        first,
        tmp_path / "cleanup.log",
        {"dry_run": False, "confirm": "DELETE", "retention_days": 0, "application_name_patterns": [f"{prefix}*"]},
    )
    assert f"keep lease-table {second_app} [recent-load]" in output
    assert f"the ledger of ANALYTICS.RAW.{tables[second_app]} has a commit of this application" in output
    assert f"the retention period of stream '{stream}'" in output
    assert f"DELETE lease-table {orphan} [orphaned-lease-table]" in output
    assert LeaseTable(dynamodb, second_app).exists()
    assert checkpoints(emulators, second_app) == loaded
    assert not old.exists()

    # Folder 2's connector goes on from its checkpoints: every record once.
    put_json(kinesis, stream, [{"id": i} for i in range(20, 30)])
    run("kinesis_snowflake_second_ingest", dag_env, second, tmp_path / "ingest2.log")
    ids = Counter(int(r[0]) for r in query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{tables[second_app]}"))
    assert ids == Counter(range(30))
