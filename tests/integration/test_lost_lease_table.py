"""A lost lease table, a shared application name, a re-created stream: through the real DAGs.

Snowflake's ledger and generations table are the truth, the DynamoDB lease table a cache of them.
These run the ingest (and reset) DAGs with dag.test() against moto and fakesnow, delete DynamoDB
tables between runs as a person or clean-up would, and count the rows.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_kinesis_snowflake.core.state.dynamodb import delete_table
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


class Connectors:
    """Connector files in one DAG folder, and their DAG runs."""

    def __init__(self, emulators: Emulators, env: dict[str, str], tmp_path: Path) -> None:
        self.emulators, self.env, self.tmp_path = emulators, env, tmp_path
        self.dags = tmp_path / "dags"
        (self.dags / "connectors").mkdir(parents=True)
        self.dag_file = self.dags / "connectors_dags.py"
        self.dag_file.write_text(DAG_FILE.format(backup_dir=str(tmp_path / "backups")))
        self.runs = 0

    def add(self, connector_id: str, stream: str, app: str, table: str) -> str:
        """A connector reading ``stream`` into ANALYTICS.RAW.``table``; returns its DAG id prefix."""
        connector = {
            "connector_id": connector_id,
            "source": {"stream_name": stream, "region": "us-east-1", "application_name": app},
            "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
            "batch": {"schedule": None, "retry_delay_seconds": 0},
        }
        (self.dags / "connectors" / f"{connector_id}.yaml").write_text(yaml.safe_dump(connector))
        return f"kinesis_snowflake_{connector_id}"

    def run(self, dag_id: str, conf: dict[str, Any] | None = None, *, succeed: bool = True) -> str:
        self.runs += 1
        proc = run_dag(
            dag_id,
            self.env,
            dag_file=self.dag_file,
            log_path=self.tmp_path / f"run{self.runs}-{dag_id}.log",
            conf=json.dumps(conf) if conf else None,
        )
        output = proc.stdout + proc.stderr
        assert (proc.returncode == 0) is succeed, output[-4000:]
        return output


@pytest.fixture
def connectors(emulators: Emulators, dag_env: dict[str, str], tmp_path: Path) -> Connectors:
    return Connectors(emulators, dag_env, tmp_path)


def ids(emulators: Emulators, table: str) -> Counter[int]:
    return Counter(int(r[0]) for r in query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table}"))


def new_connector(connectors: Connectors, prefix: str, records: int) -> tuple[str, str, str, Any, str]:
    """A 2-shard stream holding ``records`` records, a table and a connector; its ids and DAG prefix."""
    stream, app = unique(prefix), unique(f"{prefix}-app")
    table = prefix.upper() + "_" + app.split("-")[-1].upper()
    kinesis = create_stream(connectors.emulators, stream, shards=2)
    create_table(connectors.emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    put_json(kinesis, stream, [{"id": i} for i in range(records)])
    dag = connectors.add(app.replace("-", "_"), stream, app, table)
    return stream, app, table, kinesis, dag


def test_a_deleted_lease_table_resumes_from_the_ledger_and_loads_nothing_twice(connectors: Connectors) -> None:
    emulators = connectors.emulators
    stream, app, table, kinesis, dag = new_connector(connectors, "lost", 3000)
    connectors.run(f"{dag}_ingest")
    assert ids(emulators, table) == Counter(range(3000))
    generation = read_marks(emulators.boto3_client("dynamodb"), app).generation_id  # type: ignore[union-attr]

    delete_table(emulators.boto3_client("dynamodb"), app)  # by hand, or by clean-up
    put_json(kinesis, stream, [{"id": i} for i in range(3000, 3100)])
    output = connectors.run(f"{dag}_ingest")

    # 3,100 rows, 3,100 distinct: the 3,000 already loaded were not loaded again.
    assert ids(emulators, table) == Counter(range(3100))
    assert f"Adopted generation {generation} of application {app}" in output
    assert "shardId-000000000000 at" in output and "shardId-000000000001 at" in output
    assert read_marks(emulators.boto3_client("dynamodb"), app).generation_id == generation  # type: ignore[union-attr]
    assert checkpoints(emulators, app) == shard_tips(kinesis, stream)


def test_losing_the_configured_table_after_a_reset_to_a_new_name_keeps_the_new_name(connectors: Connectors) -> None:
    emulators = connectors.emulators
    dynamodb = emulators.boto3_client("dynamodb")
    stream, app, table, kinesis, dag = new_connector(connectors, "ptr", 30)
    connectors.run(f"{dag}_ingest")
    new = app + "-v2"
    connectors.run(
        f"{dag}_reset",
        {"mode": "new_application_name", "new_application_name": new, "dry_run": False, "confirm": app},
    )
    connectors.run(f"{dag}_ingest")
    assert ids(emulators, table) == Counter(list(range(30)) * 2)  # a reset reads again, by design

    # The configured table held the pointer; the ingest DAG creates it again, empty.
    delete_table(dynamodb, app)
    put_json(kinesis, stream, [{"id": i} for i in range(30, 40)])
    output = connectors.run(f"{dag}_ingest")

    assert ids(emulators, table) == Counter(list(range(30)) * 2 + list(range(30, 40)))
    assert f"of application {new} from Snowflake" in output
    assert resolve_application(dynamodb, app).active == new  # the pointer is back
    assert checkpoints(emulators, new) == shard_tips(kinesis, stream)


def test_a_table_lost_right_after_a_delete_table_reset_still_starts_over(connectors: Connectors) -> None:
    emulators = connectors.emulators
    dynamodb = emulators.boto3_client("dynamodb")
    stream, app, table, kinesis, dag = new_connector(connectors, "rst", 30)
    connectors.run(f"{dag}_ingest")
    old = read_marks(dynamodb, app).generation_id  # type: ignore[union-attr]
    connectors.run(f"{dag}_reset", {"mode": "delete_table", "dry_run": False, "confirm": app})
    wanted = read_marks(dynamodb, app).generation_id  # type: ignore[union-attr]
    assert wanted != old

    delete_table(dynamodb, app)  # before any ingest run read the reset's table
    connectors.run(f"{dag}_ingest")

    # The reset's intent survived in Snowflake: its generation, from TRIM_HORIZON, read once more.
    assert read_marks(dynamodb, app).generation_id == wanted  # type: ignore[union-attr]
    assert ids(emulators, table) == Counter(list(range(30)) * 2)
    assert checkpoints(emulators, app) == shard_tips(kinesis, stream)


def test_a_second_destination_for_one_application_name_is_refused_before_reading(connectors: Connectors) -> None:
    emulators = connectors.emulators
    stream, app, table, kinesis, dag = new_connector(connectors, "one", 20)
    connectors.run(f"{dag}_ingest")
    other = "TWO_" + app.split("-")[-1].upper()
    create_table(emulators, "ANALYTICS", "RAW", other, "ID NUMBER(38,0)")
    other_dag = connectors.add("second_" + app.split("-")[-1], stream, app, other)
    put_json(kinesis, stream, [{"id": i} for i in range(20, 30)])

    output = connectors.run(f"{other_dag}_ingest", succeed=False)

    assert f"is already used by connector '{app.replace('-', '_')}', which loads ANALYTICS.RAW.{table}" in output
    assert f"connector 'second_{app.split('-')[-1]}' loads ANALYTICS.RAW.{other}" in output
    assert "an application_name of its own" in output
    assert ids(emulators, other) == Counter()
    # The first connector goes on as before.
    connectors.run(f"{dag}_ingest")
    assert ids(emulators, table) == Counter(range(30))


def test_a_recreated_stream_is_refused_until_the_reset_dag_starts_it_over(connectors: Connectors) -> None:
    emulators = connectors.emulators
    stream, app, table, kinesis, dag = new_connector(connectors, "again", 20)
    connectors.run(f"{dag}_ingest")
    created = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamCreationTimestamp"]
    kinesis.delete_stream(StreamName=stream)
    kinesis.get_waiter("stream_not_exists").wait(StreamName=stream)
    kinesis = create_stream(emulators, stream, shards=2)
    recreated = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
    assert recreated["StreamCreationTimestamp"] != created
    put_json(kinesis, stream, [{"id": i} for i in range(100, 110)])

    output = connectors.run(f"{dag}_ingest", succeed=False)

    assert "was deleted and created again" in output
    assert "reset DAG" in output
    assert ids(emulators, table) == Counter(range(20))
    # The reset DAG starts the connector over on the new stream.
    connectors.run(f"{dag}_reset", {"mode": "delete_table", "dry_run": False, "confirm": app})
    connectors.run(f"{dag}_ingest")
    assert ids(emulators, table) == Counter([*range(20), *range(100, 110)])


def test_a_lost_table_is_not_adopted_by_another_connector_sharing_its_application_name(
    connectors: Connectors,
) -> None:
    emulators = connectors.emulators
    stream, app, table, kinesis, dag = new_connector(connectors, "share", 20)
    connectors.run(f"{dag}_ingest")
    other = "SECOND_" + app.split("-")[-1].upper()
    create_table(emulators, "ANALYTICS", "RAW", other, "ID NUMBER(38,0)")
    other_dag = connectors.add("second_" + app.split("-")[-1], stream, app, other)
    delete_table(emulators.boto3_client("dynamodb"), app)  # by hand, or by clean-up
    put_json(kinesis, stream, [{"id": i} for i in range(20, 30)])

    # The second connector runs first: it creates the table again, but Snowflake records the first.
    output = connectors.run(f"{other_dag}_ingest", succeed=False)

    assert f"recorded in Snowflake for connector '{app.replace('-', '_')}', which loads ANALYTICS.RAW.{table}" in output
    assert f"connector 'second_{app.split('-')[-1]}' loads ANALYTICS.RAW.{other}" in output
    assert ids(emulators, other) == Counter()
    # The first connector is not told to change anything: it adopts its generation and goes on.
    output = connectors.run(f"{dag}_ingest")
    assert ids(emulators, table) == Counter(range(30))
    assert checkpoints(emulators, app) == shard_tips(kinesis, stream)
