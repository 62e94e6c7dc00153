"""The ingest DAG end to end: dag.test() in a real Airflow, spark-submit, moto and fakesnow."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_kinesis_snowflake.operators.migration import MigrateLegacyCheckpointsOperator
from tests.conftest import create_stream, create_table, put_json, put_raw, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.emulators.statsd import statsd_receiver
from tests.integration.core.state.test_migration import create_kcl_table

pytestmark = pytest.mark.integration

DAG_FILE = """
from pathlib import Path
from airflow_kinesis_snowflake.dags import build_connector_dags
globals().update(build_connector_dags(Path(__file__).parent / "connectors"))
"""


def write_connector(dags_dir: Path, connector: dict[str, Any]) -> Path:
    (dags_dir / "connectors").mkdir(parents=True, exist_ok=True)
    (dags_dir / "connectors" / f"{connector['connector_id']}.yaml").write_text(yaml.safe_dump(connector))
    dag_file = dags_dir / "connectors_dags.py"
    dag_file.write_text(DAG_FILE)
    return dag_file


def connector_dag(dags_dir: Path, stream: str, app: str, table: str) -> tuple[Path, str]:
    """A connector file reading ``stream`` into ANALYTICS.RAW.``table`` on demand; its DAG file and ingest DAG id."""
    connector = {
        "connector_id": app.replace("-", "_"),
        "source": {"stream_name": stream, "region": "us-east-1", "application_name": app},
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "batch": {"schedule": None, "retry_delay_seconds": 0},
    }
    return write_connector(dags_dir, connector), f"kinesis_snowflake_{connector['connector_id']}_ingest"


def shard_tips(kinesis: Any, stream: str) -> dict[str, str]:
    """The sequence number of the last record in every shard, read back from Kinesis."""
    tips: dict[str, str] = {}
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        it = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON")
        records = kinesis.get_records(ShardIterator=it["ShardIterator"], Limit=10000)["Records"]
        if records:
            tips[shard["ShardId"]] = max((r["SequenceNumber"] for r in records), key=int)
    return tips


def checkpoints(emulators: Emulators, table: str) -> dict[str, str]:
    items = emulators.boto3_client("dynamodb").scan(TableName=table, ConsistentRead=True)["Items"]
    return {
        i["lease_key"]["S"]: i["checkpoint_sequence_number"]["S"]
        for i in items
        if i.get("item_type", {}).get("S") == "SHARD" and "checkpoint_sequence_number" in i
    }


def asset_events(env: dict[str, str], uri: str) -> list[dict[str, Any]]:
    """Extras of the events of an Asset, oldest first, read from the Airflow metadata database."""
    db = sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db")
    try:
        rows = db.execute(
            "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.uri = ? ORDER BY e.id", (uri,)
        ).fetchall()
    finally:
        db.close()
    return [json.loads(r[0]) for r in rows]


def last_run_states(env: dict[str, str], dag_id: str) -> dict[str, str]:
    """The state of each task of the DAG's latest run, read from the Airflow metadata database."""
    db = sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db")
    try:
        rows = db.execute(
            "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = "
            "(SELECT run_id FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1)",
            (dag_id, dag_id),
        ).fetchall()
    finally:
        db.close()
    return dict(rows)


def test_two_runs_load_exactly_the_records_put(emulators: Emulators, dag_env: dict[str, str], tmp_path: Path) -> None:
    stream, app = unique("orders"), unique("orders-app")
    table = "ORDERS_" + app.split("-")[-1].upper()
    kinesis = create_stream(emulators, stream, shards=2)
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0), NAME VARCHAR, AMOUNT FLOAT, PAID BOOLEAN")
    connector = {
        "connector_id": app.replace("-", "_"),
        "source": {
            "stream_name": stream,
            "region": "us-east-1",
            "application_name": app,
            "initial_position": "TRIM_HORIZON",
            "max_records_per_call": 100,  # several GetRecords calls per shard
        },
        "destination": {"database": "analytics", "schema": "raw", "table": table},
        "batch": {"schedule": None, "max_records_per_shard": 100000, "retry_delay_seconds": 0},
    }
    dag_file = write_connector(tmp_path / "dags", connector)
    dag_id = f"kinesis_snowflake_{connector['connector_id']}_ingest"
    fqn = f"ANALYTICS.RAW.{table}"

    first = [{"id": i, "Name": f"n{i}", "AMOUNT": i / 4, "paid": i % 2 == 0, "extra": "ignored"} for i in range(300)]
    put_json(kinesis, stream, first)
    bad = [b"not json", b"\xff\xfe", b"[1, 2]", json.dumps({"id": "not-a-number"}).encode()]
    put_raw(kinesis, stream, bad)

    with statsd_receiver() as statsd:
        env = {**dag_env, **statsd.airflow_env(tags=True)}
        proc = run_dag(dag_id, env, dag_file=dag_file, log_path=tmp_path / "run1.log")
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    rows = query(emulators, f"SELECT ID, NAME, AMOUNT, PAID FROM {fqn} ORDER BY ID")
    assert [r[0] for r in rows] == list(range(300))
    # The batch's figures reached the configured metrics backend under static names, tagged with the
    # application, the source and the table.
    metrics = statsd.tagged("airflow.kinesis_snowflake.")
    tags = {"application": app, "source_type": "kinesis", "source": stream, "table": fqn}
    payload_bytes = sum(len(json.dumps(b).encode()) for b in first) + sum(map(len, bad))
    per_shard = [line for line in metrics if "shard" in line[1]]
    batch = [line for line in metrics if line not in per_shard]
    assert sorted((name, value, kind) for name, _, value, kind in batch) == sorted(
        [
            ("airflow.kinesis_snowflake.batch.records", 304.0, "c"),
            ("airflow.kinesis_snowflake.batch.rows_loaded", 300.0, "c"),
            ("airflow.kinesis_snowflake.batch.dead_letters", 4.0, "c"),
            ("airflow.kinesis_snowflake.batch.bytes", float(payload_bytes), "c"),
            ("airflow.kinesis_snowflake.batch.shards", 2.0, "g"),
            ("airflow.kinesis_snowflake.batch.millis_behind_latest", 0.0, "g"),
        ]
    )
    assert all(batch_tags == tags for _, batch_tags, _, _ in batch)
    # Per shard: the lag each read ended at, and the age of the checkpoint the batch just moved, tagged with the shard.
    shard_ids = [s["ShardId"] for s in kinesis.list_shards(StreamName=stream)["Shards"]]
    assert sorted((name, shard_tags["shard"]) for name, shard_tags, _, _ in per_shard) == sorted(
        (f"airflow.kinesis_snowflake.shard.{figure}", shard_id)
        for shard_id in shard_ids
        for figure in ("millis_behind_latest", "checkpoint_age_seconds")
    )
    assert all(shard_tags == {**tags, "shard": shard_tags["shard"]} for _, shard_tags, _, _ in per_shard)
    lags = [(shard_tags["shard"], value, kind) for name, shard_tags, value, kind in per_shard if "millis" in name]
    assert sorted(lags) == [(shard_id, 0.0, "g") for shard_id in sorted(shard_ids)]
    # And the table's Asset got an event carrying the batch.
    # The account named as the Snowflake provider's lineage does: "fakesnow" is a legacy locator.
    (event,) = asset_events(dag_env, "snowflake://fakesnow.us-west-1.aws/ANALYTICS/RAW/" + table)
    assert event["rows_loaded"] == 300 and event["dead_letters"] == 4 and event["stream_name"] == stream
    assert rows[7] == (7, "n7", 7 / 4, False)
    failures = query(emulators, f"SELECT RECORD_CONTENT_BASE64, ERROR_MESSAGE, ERROR_COLUMN FROM {fqn}_PARSE_FAILURES")
    assert sorted(base64.b64decode(f[0]) for f in failures) == sorted(bad)
    # The value that did not fit names its column; the payloads that are not JSON objects name none.
    column_of = {base64.b64decode(f[0]): f[2] for f in failures}
    assert column_of == {payload: ("ID" if payload == bad[-1] else None) for payload in bad}
    assert any("column ID" in f[1] for f in failures)
    assert checkpoints(emulators, app) == shard_tips(kinesis, stream)

    second = [{"id": i, "Name": f"n{i}", "AMOUNT": 1.0, "paid": True} for i in range(300, 420)]
    put_json(kinesis, stream, second)
    # The second batch reads through throttling and an expired iterator, injected by the emulator.
    emulators.inject_kinesis_faults(
        [
            {
                "operation": "GetRecords",
                "stream": stream,
                "error": "ProvisionedThroughputExceededException",
                "times": 2,
            },
            {"operation": "GetRecords", "stream": stream, "error": "ExpiredIteratorException", "skip": 3, "times": 1},
            {"operation": "GetShardIterator", "stream": stream, "error": "LimitExceededException", "times": 1},
        ]
    )
    try:
        proc = run_dag(dag_id, dag_env, dag_file=dag_file, log_path=tmp_path / "run2.log")
        served = emulators.served_kinesis_faults()
    finally:
        emulators.inject_kinesis_faults([])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert sorted(f["error"] for f in served) == [
        "ExpiredIteratorException",
        "LimitExceededException",
        "ProvisionedThroughputExceededException",
        "ProvisionedThroughputExceededException",
    ]

    ids = [r[0] for r in query(emulators, f"SELECT ID FROM {fqn} ORDER BY ID")]
    assert ids == list(range(420))
    (dupes,) = query(
        emulators,
        f"SELECT COUNT(*) - COUNT(DISTINCT KINESISMETADATA:shardId::string || '/' || "
        f"KINESISMETADATA:sequenceNumber::string || '/' || KINESISMETADATA:subSequenceNumber::string) FROM {fqn}",
    )
    assert dupes == (0,)
    assert len(query(emulators, f"SELECT 1 FROM {fqn}_PARSE_FAILURES")) == len(bad)
    assert checkpoints(emulators, app) == shard_tips(kinesis, stream)

    meta = query(
        emulators,
        f"SELECT KINESISMETADATA:stream::string, KINESISMETADATA:partitionKey::string, "
        f"KINESISMETADATA:subSequenceNumber::int FROM {fqn} WHERE ID = 5",
    )
    assert meta == [(stream, "pk-5", 0)]

    # A third run with nothing new: the sensor ends it skipped, and no Spark job runs.
    outcomes = "SELECT COUNT(*) FROM ANALYTICS.RAW.KINESIS_INGEST_BATCH_OUTCOMES"
    recorded = query(emulators, outcomes)
    proc = run_dag(dag_id, dag_env, dag_file=dag_file, log_path=tmp_path / "run3.log")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert last_run_states(dag_env, dag_id) == {
        "wait_for_records": "skipped",
        "create_lease_table": "skipped",
        "ingest": "skipped",
    }
    assert query(emulators, outcomes) == recorded  # no batch ran, so none recorded an outcome
    assert "spark-submit" in (tmp_path / "run2.log").read_text()
    assert "spark-submit" not in (tmp_path / "run3.log").read_text()
    assert len(query(emulators, f"SELECT 1 FROM {fqn}")) == 420


def test_checkpoint_lost_after_the_snowflake_commit_is_recovered_without_reloading(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    """The process dies after COPY + ledger committed and before DynamoDB moved: no row twice."""
    stream, app = unique("crash"), unique("crash-app")
    table = "CRASH_" + app.split("-")[-1].upper()
    kinesis = create_stream(emulators, stream, shards=2)
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    dag_file, dag_id = connector_dag(tmp_path / "dags", stream, app, table)
    fqn = f"ANALYTICS.RAW.{table}"

    put_json(kinesis, stream, [{"id": i} for i in range(50)])
    assert run_dag(dag_id, dag_env, dag_file=dag_file).returncode == 0
    before = checkpoints(emulators, app)

    put_json(kinesis, stream, [{"id": i} for i in range(50, 80)])
    assert run_dag(dag_id, dag_env, dag_file=dag_file).returncode == 0
    assert checkpoints(emulators, app) == shard_tips(kinesis, stream)
    # Put DynamoDB back where it was, as if the second run's checkpoint writes never happened.
    dynamodb = emulators.boto3_client("dynamodb")
    for shard_id, sequence in before.items():
        dynamodb.update_item(
            TableName=app,
            Key={"lease_key": {"S": shard_id}},
            UpdateExpression="SET checkpoint_sequence_number = :s",
            ExpressionAttributeValues={":s": {"S": sequence}},
        )
    assert checkpoints(emulators, app) == before

    proc = run_dag(dag_id, dag_env, dag_file=dag_file, log_path=tmp_path / "recover.log")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "ledger is ahead of the checkpoint" in proc.stdout + proc.stderr
    assert [r[0] for r in query(emulators, f"SELECT ID FROM {fqn} ORDER BY ID")] == list(range(80))
    assert checkpoints(emulators, app) == shard_tips(kinesis, stream)


def test_ingestion_resumes_at_a_migrated_kcl_checkpoint(
    aws_connections: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    stream, app = unique("kcl-orders"), unique("kcl-app")
    table = "KCL_" + app.split("-")[-1].upper()
    kinesis = create_stream(aws_connections, stream, shards=1)
    create_table(aws_connections, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    put_json(kinesis, stream, [{"id": i} for i in range(40)])
    (shard_id,) = shard_tips(kinesis, stream)
    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")
    records = kinesis.get_records(ShardIterator=iterator["ShardIterator"], Limit=100)["Records"]
    # A KCL application processed ids 0..24 and checkpointed there; this provider takes over.
    processed = records[24]["SequenceNumber"]
    dynamodb = aws_connections.boto3_client("dynamodb")
    create_kcl_table(
        dynamodb,
        app,
        [
            {
                "leaseKey": {"S": shard_id},
                "checkpoint": {"S": processed},
                "checkpointSubSequenceNumber": {"N": "0"},
                "leaseCounter": {"N": "41"},
                "ownerSwitchesSinceCheckpoint": {"N": "0"},
            }
        ],
    )
    MigrateLegacyCheckpointsOperator(task_id="migrate", application_name=app, stream_name=stream).execute(context={})

    dag_file, dag_id = connector_dag(tmp_path / "dags", stream, app, table)
    proc = run_dag(dag_id, dag_env, dag_file=dag_file, log_path=tmp_path / "run.log")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    # Exactly what the KCL application had not processed, and the checkpoint at the shard's tip.
    assert query(aws_connections, f"SELECT ID FROM ANALYTICS.RAW.{table} ORDER BY ID") == [(i,) for i in range(25, 40)]
    assert checkpoints(aws_connections, app) == shard_tips(kinesis, stream)


def test_values_the_copy_would_refuse_are_kept_aside_and_the_rest_loads(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    stream, app = unique("strict"), unique("strict-app")
    table = "STRICT_" + app.split("-")[-1].upper()
    kinesis = create_stream(emulators, stream, shards=1)
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0) NOT NULL, NAME VARCHAR NOT NULL, V VARIANT")
    put_json(kinesis, stream, [{"id": i, "name": f"n{i}", "v": {"i": i}} for i in range(5)])
    refused = {
        b'{"id": 5, "v": {"i": 5}}': "NAME",  # no value for a NOT NULL column
        b'{"id": 6, "name": null}': "NAME",
        b'{"id": 7, "name": "n7", "v": {"ratio": NaN}}': "V",  # Python reads NaN; Snowflake's JSON does not
        b'{"id": 8, "name": "n8", "v": [1e400]}': "V",
    }
    put_raw(kinesis, stream, list(refused))
    put_json(kinesis, stream, [{"id": 9, "name": "n9"}])
    dag_file, dag_id = connector_dag(tmp_path / "dags", stream, app, table)
    proc = run_dag(dag_id, dag_env, dag_file=dag_file)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    fqn = f"ANALYTICS.RAW.{table}"
    assert query(emulators, f"SELECT ID FROM {fqn} ORDER BY ID") == [(i,) for i in [0, 1, 2, 3, 4, 9]]
    failures = query(emulators, f"SELECT RECORD_CONTENT_BASE64, ERROR_COLUMN FROM {fqn}_PARSE_FAILURES")
    assert {base64.b64decode(f[0]): f[1] for f in failures} == refused
