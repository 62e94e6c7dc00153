"""Schema evolution end to end: dag.test() of the ingest operator, spark-submit, moto and fakesnow."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag

pytestmark = pytest.mark.integration

# DAGs reading one stream with one application name (so one lease table, one progress), each with
# its own schema evolution settings, given to the operator as its arguments.
DAG_FILE = """
import base64
import json
from datetime import UTC, datetime

from airflow.sdk import DAG

from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from airflow_kinesis_snowflake.operators.lease_table import CreateLeaseTableOperator

SETTINGS = json.loads({settings!r})

for dag_id, evolution in SETTINGS["dags"].items():
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC), catchup=False) as dag:
        create = CreateLeaseTableOperator(
            task_id="create_lease_table",
            application_name=SETTINGS["application"],
            stream_name=SETTINGS["stream"],
            region_name="us-east-1",
        )
        ingest = SparkKinesisIngestOperator(
            task_id="ingest",
            stream_name=SETTINGS["stream"],
            application_name=SETTINGS["application"],
            database="ANALYTICS",
            schema="RAW",
            table=SETTINGS["table"],
            region_name="us-east-1",
            **evolution,
        )
        create >> ingest
    globals()[dag_id] = dag
"""

LONG_KEY = "k" * 300


def columns_of(emulators: Emulators, table: str) -> dict[str, tuple[str, str]]:
    rows = query(
        emulators,
        "SELECT column_name, data_type, is_nullable FROM ANALYTICS.information_schema.columns "
        f"WHERE table_schema = 'RAW' AND table_name = '{table}' ORDER BY ordinal_position",
    )
    return {r[0]: (r[1], r[2]) for r in rows}


def evolving_record(i: int) -> dict[str, Any]:
    """Every kind of new key; keys differing by case; NAME (NOT NULL) missing from odd records."""
    body: dict[str, Any] = {
        "id": i,
        "score": i * 10,
        "ratio": i if i % 2 else i + 0.5,  # integers and floats: FLOAT
        "active": i % 3 == 0,
        "seen_at": f"2026-01-31T12:{i:02d}:00+01:00",
        "tags": ["a", i],
        "attrs": {"n": i},
        "note": "text" if i % 2 else i,  # strings and integers: VARCHAR
        ("color", "Color", "COLOR")[i % 3]: f"c{i}",  # one column, whatever the case
        "two words": i,  # quoted, as every new column is
        'we"ird': "q",
        LONG_KEY: "longer than a column name can be",
        "nothing": None,  # no type yet: no column
    }
    if i % 2 == 0:
        body["name"] = f"n{i}"
    return body


def test_new_keys_become_typed_columns_only_with_evolution_on(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    stream, app = unique("evolve"), unique("evolve-app")
    suffix = app.split("-")[-1]
    table = "EVOLVE_" + suffix.upper()
    off, fail, on = f"evolution_off_{suffix}", f"evolution_fail_{suffix}", f"evolution_on_{suffix}"
    kinesis = create_stream(emulators, stream, shards=1)
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0) NOT NULL, NAME VARCHAR NOT NULL")
    dags = {
        off: {},
        fail: {"destination_type": "ICEBERG", "schema_evolution": True, "on_unknown_key": "FAIL"},
        on: {"schema_evolution": True},
    }
    settings = {"dags": dags, "application": app, "stream": stream, "table": table}
    dag_file = tmp_path / "dags" / "evolution_dags.py"
    dag_file.parent.mkdir()
    dag_file.write_text(DAG_FILE.format(settings=json.dumps(settings)))
    before = columns_of(emulators, table)

    # Off: schema_evolution is left to the table, which fakesnow reports without
    # ENABLE_SCHEMA_EVOLUTION. The new keys are ignored; the rows land.
    put_json(kinesis, stream, [{"id": i, "name": f"n{i}", "color": "ignored", "score": i} for i in range(10)])
    proc = run_dag(off, dag_env, dag_file=dag_file, log_path=tmp_path / "off.log")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert columns_of(emulators, table) == before
    assert query(emulators, f"SELECT COUNT(*) FROM ANALYTICS.RAW.{table}") == [(10,)]

    # An Iceberg table is never altered; set to fail on keys it has no column for, the batch
    # fails before loading anything, and the records stay for the next batch.
    records = [evolving_record(i) for i in range(10, 40)]
    records[3]["COLOR"] = "a second spelling beside Color: the record is kept whole in the parse failures"
    put_json(kinesis, stream, records)
    proc = run_dag(fail, dag_env, dag_file=dag_file, log_path=tmp_path / "fail.log")
    assert proc.returncode != 0
    failed = (tmp_path / "fail.log").read_text() + proc.stdout + proc.stderr
    assert '"score", "ratio", "active", "seen_at"' in failed
    assert "(an Iceberg table is never altered)" in failed
    assert "set destination.on_unknown_key to IGNORE" in failed
    assert columns_of(emulators, table) == before
    assert query(emulators, f"SELECT COUNT(*) FROM ANALYTICS.RAW.{table}") == [(10,)]

    # On: the batch's new keys become columns before its rows are staged.
    proc = run_dag(on, dag_env, dag_file=dag_file, log_path=tmp_path / "on.log")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    assert columns_of(emulators, table) == {
        "ID": ("NUMBER", "NO"),
        "NAME": ("TEXT", "YES"),  # NOT NULL dropped: odd records have no name
        "KINESISMETADATA": ("VARIANT", "YES"),
        "SCORE": ("NUMBER", "YES"),
        "RATIO": ("FLOAT", "YES"),
        "ACTIVE": ("BOOLEAN", "YES"),
        "SEEN_AT": ("TIMESTAMP_TZ", "YES"),
        "TAGS": ("VARIANT", "YES"),
        "ATTRS": ("VARIANT", "YES"),
        "NOTE": ("TEXT", "YES"),
        "COLOR": ("TEXT", "YES"),
        "TWO WORDS": ("NUMBER", "YES"),
        'WE"IRD': ("TEXT", "YES"),
    }

    rows = query(
        emulators,
        'SELECT ID, NAME, SCORE, RATIO, ACTIVE, SEEN_AT, TAGS[1]::int, ATTRS:n::int, NOTE, COLOR, "TWO WORDS", '
        f'"WE""IRD" FROM ANALYTICS.RAW.{table} ORDER BY ID',
    )
    assert [r[0] for r in rows] == [i for i in range(40) if i != 13]
    # Loaded while evolution was off: the keys then unknown were not loaded, and are not now.
    assert {(r[2], r[9]) for r in rows[:10]} == {(None, None)}
    by_id = {r[0]: r for r in rows}
    assert by_id[10] == (
        10,
        "n10",
        100,
        10.5,
        False,
        datetime(2026, 1, 31, 11, 10, tzinfo=UTC),
        10,
        10,
        "10",
        "c10",
        10,
        "q",
    )
    assert by_id[11] == (
        11,
        None,
        110,
        11.0,
        False,
        datetime(2026, 1, 31, 11, 11, tzinfo=UTC),
        11,
        11,
        "text",
        "c11",
        11,
        "q",
    )
    assert by_id[12][4] is True
    # Keys differing only by case all landed in COLOR; a record with two of them is a dead letter
    # naming both, not loaded with one value and without the other.
    assert [by_id[i][9] for i in range(10, 40) if i != 13] == [f"c{i}" for i in range(10, 40) if i != 13]
    fqn = f"ANALYTICS.RAW.{table}_PARSE_FAILURES"
    failures = query(emulators, f"SELECT RECORD_CONTENT_BASE64, ERROR_MESSAGE, ERROR_COLUMN FROM {fqn}")
    assert [(json.loads(base64.b64decode(f[0]))["id"], f[1], f[2]) for f in failures] == [
        (13, 'keys "Color" and "COLOR" both map to column COLOR; rename one in the producer', "COLOR")
    ]
    # The key no column can be named after is reported, not loaded.
    log = (tmp_path / "on.log").read_text() + proc.stdout
    assert "(300 characters)" in log and "longer than a column name can be (255)" in log


def test_38_digit_integers_land_exactly_and_records_over_the_new_column_cap_are_kept_whole(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    stream, app = unique("values"), unique("values-app")
    suffix = app.split("-")[-1]
    table = "VALUES_" + suffix.upper()
    dag_id = f"values_{suffix}"
    kinesis = create_stream(emulators, stream, shards=1)
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0) NOT NULL, NAME VARCHAR")
    settings = {"dags": {dag_id: {"schema_evolution": True}}, "application": app, "stream": stream, "table": table}
    dag_file = tmp_path / "dags" / "values_dags.py"
    dag_file.parent.mkdir()
    dag_file.write_text(DAG_FILE.format(settings=json.dumps(settings)))

    largest = 10**38 - 1
    serial = 1234567890123456789012345  # 25 digits, the first value of a new key
    # 106 new keys in one batch: SERIAL and extra0 to extra98 get the 100 columns, extra99 and on wait.
    wide = {"id": 3, "name": "wide", **{f"extra{i}": i for i in range(105)}}
    put_json(
        kinesis,
        stream,
        [
            {"id": largest, "name": "largest", "serial": serial},
            {"id": -largest, "name": "smallest", "serial": 7},
            wide,
            {"id": 4, "name": "within the cap", "extra0": 40},
            {"id": 5, "name": "a null loses nothing", "extra0": 50, "extra104": None},
            {"id": largest + 1, "name": "39 digits"},
        ],
    )
    proc = run_dag(dag_id, dag_env, dag_file=dag_file, log_path=tmp_path / "run1.log")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    columns = columns_of(emulators, table)
    assert columns["SERIAL"] == ("NUMBER", "YES")
    assert {f"EXTRA{i}" for i in range(99)} <= set(columns)
    assert not {f"EXTRA{i}" for i in range(99, 105)} & set(columns)
    rows = query(emulators, f"SELECT ID, NAME, SERIAL, EXTRA0 FROM ANALYTICS.RAW.{table} ORDER BY ID")
    assert rows == [
        (-largest, "smallest", 7, None),
        (4, "within the cap", None, 40),
        (5, "a null loses nothing", None, 50),
        (largest, "largest", serial, None),
    ]
    assert query(emulators, f"SELECT ID::varchar FROM ANALYTICS.RAW.{table} WHERE NAME = 'largest'") == [
        ("99999999999999999999999999999999999999",)
    ]
    failures = query(
        emulators,
        "SELECT RECORD_CONTENT_BASE64, ERROR_MESSAGE, ERROR_COLUMN "
        f"FROM ANALYTICS.RAW.{table}_PARSE_FAILURES ORDER BY ERROR_MESSAGE",
    )
    assert [(json.loads(base64.b64decode(f[0])), f[1], f[2]) for f in failures] == [
        (
            {"id": largest + 1, "name": "39 digits"},
            f"column ID: number {largest + 1} has too many digits for NUMBER(38,0)",
            "ID",
        ),
        (
            wide,
            'no column for keys "extra99", "extra100", "extra101", "extra102", "extra103", "extra104": schema '
            "evolution adds at most 100 columns to a table per batch, and this batch had more new keys; the next "
            "batch adds more. The record is kept whole here rather than loaded without these values",
            None,
        ),
    ]
    log = (tmp_path / "run1.log").read_text()
    assert "records kept whole in the parse-failure table: schema evolution adds at most 100 columns" in log

    # The next batch adds the columns the cap held back.
    put_json(kinesis, stream, [{"id": 6, "name": "later", "extra104": 104}])
    proc = run_dag(dag_id, dag_env, dag_file=dag_file, log_path=tmp_path / "run2.log")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert query(emulators, f"SELECT EXTRA104 FROM ANALYTICS.RAW.{table} WHERE ID = 6") == [(104,)]
