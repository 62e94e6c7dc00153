"""Each source's provision DAG with ``iam_check: best_effort`` whose check cannot run: the check task
skips with a warning, and provisioning goes on (docs/operations.md), run by dag.test() against the
moto and fakesnow servers.

The emulator's AWS connection is moto's default user, a principal of unknown kind that
SimulatePrincipalPolicy cannot simulate (tests/integration/operators/test_iam.py): the check's
``best_effort`` answer to it is a skip.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from tests.conftest import create_stream, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.integration.core.sources.dynamodb.test_discovery import create
from tests.integration.test_dynamodb_dag import mapped_instances
from tests.integration.test_ingest_dag import last_run_states, write_connector
from tests.integration.test_key_pair_dags import TEXT_ONLY

pytestmark = pytest.mark.integration


def tables_in(emulators: Emulators, name: str) -> list[str]:
    return [
        r[0]
        for r in query(
            emulators,
            "SELECT TABLE_NAME FROM ANALYTICS.INFORMATION_SCHEMA.TABLES "
            f"WHERE TABLE_SCHEMA = 'RAW' AND TABLE_NAME = '{name}'",
        )
    ]


def test_the_kinesis_provision_dag_goes_on_after_its_skipped_iam_check(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    stream, app = unique("besteffort"), unique("besteffort-app")
    table = "BEST_EFFORT_" + app.split("-")[-1].upper()
    create_stream(emulators, stream, 1)
    connector = {
        "connector_id": app.replace("-", "_"),
        "source": {"stream_name": stream, "region": "us-east-1", "application_name": app, "iam_check": "best_effort"},
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "snowflake": {"columns": {"ID": "NUMBER(38,0)"}},
        "batch": {"schedule": None, "retries": 0},
    }
    dag_file = write_connector(tmp_path / "dags", connector)
    dag_id = f"kinesis_snowflake_{connector['connector_id']}_provision"
    # fakesnow has no roles, users or grants: those statements run as no-ops.
    snowflake = emulators.snowflake_connection()
    snowflake["extra"]["session_parameters"] = {"nop_regexes": TEXT_ONLY}
    env = {**dag_env, "AIRFLOW_CONN_SNOWFLAKE_DEFAULT": json.dumps(snowflake)}

    proc = run_dag(dag_id, env, dag_file=dag_file, log_path=tmp_path / "provision.log")

    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    assert "Skipping the IAM permission check" in output
    assert last_run_states(env, dag_id) == {
        "check_iam_permissions": "skipped",
        "create_lease_table": "success",
        "provision_snowflake": "success",
        "verify_snowflake": "success",
    }
    assert LeaseTable(emulators.boto3_client("dynamodb"), app).exists()
    assert tables_in(emulators, table) == [table]


def test_the_dynamodb_provision_dag_goes_on_after_its_skipped_iam_check(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    dynamodb = emulators.boto3_client("dynamodb")
    prefix = unique("ddbbest")
    orders = f"{prefix}-orders"
    create(dynamodb, orders)
    with emulators.snowflake_connect() as conn:
        conn.cursor().execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
        conn.cursor().execute("CREATE SCHEMA IF NOT EXISTS ANALYTICS.RAW")
    connector = {
        "connector_id": prefix.replace("-", "_"),
        "source": {
            "type": "dynamodb",
            "region": "us-east-1",
            "application_name": f"{prefix}-app",
            "tables": [orders],
            "layout": "packed",
            "iam_check": "best_effort",
        },
        "destination": {"database": "ANALYTICS", "schema": "RAW"},
        "batch": {"schedule": None, "retries": 0},
    }
    dag_file = write_connector(tmp_path / "dags", connector)
    dag_id = f"dynamodb_snowflake_{connector['connector_id']}_provision"

    proc = run_dag(dag_id, dag_env, dag_file=dag_file, log_path=tmp_path / "provision.log")

    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    assert "Skipping the IAM permission check" in output
    assert last_run_states(dag_env, dag_id) == {
        "check_iam_permissions": "skipped",
        "create_lease_table": "success",
        "discover_tables": "success",
        "provision_table": "success",
    }
    assert mapped_instances(dag_env, dag_id, "provision_table") == [(0, orders, "success")]
    assert LeaseTable(dynamodb, f"{prefix}-app").exists()
    destination = orders.replace("-", "_").upper()
    assert tables_in(emulators, destination) == [destination]
