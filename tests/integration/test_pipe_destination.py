"""A PIPE destination end to end: each batch is loaded through the pipe's own SELECT, exactly once."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import create_stream, create_table, put_json, put_raw, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.integration.test_ingest_dag import checkpoints, shard_tips, write_connector

pytestmark = pytest.mark.integration


def pipe_connector(stream: str, app: str, table: str, definition: str, **batch: Any) -> dict[str, Any]:
    return {
        "connector_id": app.replace("-", "_"),
        "source": {"stream_name": stream, "region": "us-east-1", "application_name": app},
        "destination": {
            "database": "ANALYTICS",
            "schema": "RAW",
            "table": table,
            "type": "PIPE",
            "pipe": table + "_PIPE",
            "pipe_definition": definition,
        },
        "batch": {"schedule": None, **batch},
    }


def test_batches_go_through_the_pipe_transformation(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    stream, app = unique("piped"), unique("piped-app")
    table = "PIPED_" + app.split("-")[-1].upper()
    fqn = f"ANALYTICS.RAW.{table}"
    kinesis = create_stream(emulators, stream, shards=2)
    create_table(emulators, "ANALYTICS", "RAW", table, "ORDER_ID NUMBER(38,0), STATUS VARCHAR, CITY VARCHAR")
    definition = (
        f"COPY INTO {fqn} (ORDER_ID, STATUS, CITY, KINESISMETADATA) FROM (SELECT $1:id::NUMBER(38,0), "
        "UPPER($1:status), $1:address:city::VARCHAR, $1:KINESISMETADATA "
        "FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"
    )
    connector = pipe_connector(stream, app, table, definition)
    dag_file = write_connector(tmp_path / "dags", connector)
    dag_id = f"kinesis_snowflake_{connector['connector_id']}_ingest"

    orders = [
        {"id": i, "status": ["new", "paid"][i % 2], "address": {"city": f"city-{i}", "zip": "10115"}, "extra": i}
        for i in range(150)
    ]
    put_json(kinesis, stream, orders)
    bad = [b"{not json", b"[1, 2]"]
    put_raw(kinesis, stream, bad)

    proc = run_dag(dag_id, dag_env, dag_file=dag_file, log_path=tmp_path / "run1.log")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    rows = query(emulators, f"SELECT ORDER_ID, STATUS, CITY FROM {fqn} ORDER BY ORDER_ID")
    # The SELECT ran: upper-cased status, a nested path, and no column for what it does not name.
    assert rows == [(i, ["NEW", "PAID"][i % 2], f"city-{i}") for i in range(150)]
    failures = query(emulators, f"SELECT RECORD_CONTENT_BASE64, ERROR_MESSAGE FROM {fqn}_PARSE_FAILURES")
    assert sorted(base64.b64decode(f[0]) for f in failures) == sorted(bad)
    assert checkpoints(emulators, app) == shard_tips(kinesis, stream)
    meta = query(
        emulators,
        f"SELECT KINESISMETADATA:stream::string, KINESISMETADATA:partitionKey::string FROM {fqn} WHERE ORDER_ID = 7",
    )
    assert meta == [(stream, "pk-7")]

    put_json(kinesis, stream, [{"id": i, "status": "late", "address": {"city": "x"}} for i in range(150, 170)])
    proc = run_dag(dag_id, dag_env, dag_file=dag_file, log_path=tmp_path / "run2.log")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    ids = [r[0] for r in query(emulators, f"SELECT ORDER_ID FROM {fqn} ORDER BY ORDER_ID")]
    assert ids == list(range(170))
    assert query(emulators, f"SELECT DISTINCT STATUS FROM {fqn} WHERE ORDER_ID >= 150") == [("LATE",)]
    assert len(query(emulators, f"SELECT 1 FROM {fqn}_PARSE_FAILURES")) == len(bad)
    assert checkpoints(emulators, app) == shard_tips(kinesis, stream)


def test_a_value_the_pipe_cannot_convert_fails_the_batch_and_loads_nothing(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    stream, app = unique("piped"), unique("piped-app")
    table = "PIPED_" + app.split("-")[-1].upper()
    fqn = f"ANALYTICS.RAW.{table}"
    kinesis = create_stream(emulators, stream, shards=1)
    create_table(emulators, "ANALYTICS", "RAW", table, "ORDER_ID NUMBER(38,0)")
    connector = pipe_connector(
        stream, app, table, f"COPY INTO {fqn} (ORDER_ID) FROM (SELECT $1:id::NUMBER(38,0) FROM @s)", retries=0
    )
    dag_file = write_connector(tmp_path / "dags", connector)
    put_raw(kinesis, stream, [json.dumps({"id": 1}).encode(), json.dumps({"id": "one"}).encode()])

    proc = run_dag(
        f"kinesis_snowflake_{connector['connector_id']}_ingest", dag_env, dag_file=dag_file, log_path=tmp_path / "r.log"
    )

    assert proc.returncode != 0
    log = (tmp_path / "r.log").read_text()
    # The task's error carries the load that failed and Snowflake's reason.
    assert f"LoadError: COPY INTO {fqn} (ORDER_ID) FROM (SELECT $1:id::NUMBER(38,0) FROM @" in log
    assert "'one'" in log
    assert query(emulators, f"SELECT COUNT(*) FROM {fqn}") == [(0,)]
    assert checkpoints(emulators, app) == {}
