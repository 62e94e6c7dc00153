"""The generated policy is enough for the provisioning and ingest DAGs, and every action is needed.

AWS runs in a moto server that enforces IAM, with resources scoped to the ARNs of each request
(see tests/emulators/moto_extensions.py). The connector runs as an IAM user holding exactly the
policy from ``core/admin/iam.py``. With it, both DAGs succeed end to end through spark-submit; with any
one action removed, a named step fails and its error carries the AccessDenied of that action.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.admin.iam import policy_document, required_permissions
from tests.conftest import create_table, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.emulators.iam import ACCOUNT, IamMoto
from tests.integration.test_ingest_dag import write_connector

pytestmark = pytest.mark.integration

# Which step of the DAGs first needs each action of the shared-throughput policy.
FIRST_NEEDED_BY = {
    "dynamodb:DescribeTable": "create_lease_table",
    "dynamodb:CreateTable": "create_lease_table",
    "dynamodb:TagResource": "create_lease_table",
    "dynamodb:DescribeTimeToLive": "create_lease_table",
    "dynamodb:UpdateTimeToLive": "create_lease_table",
    "dynamodb:GetItem": "create_lease_table",
    "dynamodb:PutItem": "create_lease_table",
    "dynamodb:BatchGetItem": "ingest",
    "dynamodb:UpdateItem": "ingest",
    "kinesis:ListShards": "ingest",
    "kinesis:DescribeStreamSummary": "create_lease_table",
    "kinesis:GetShardIterator": "ingest",
    "kinesis:GetRecords": "ingest",
}
# Needed only after resharding: removing a finished parent's lease once its children started (a
# try's heartbeat item is deleted with it too, but best effort: without it the item expires).
AFTER_RESHARDING = "dynamodb:DeleteItem"
# Needed only to adopt a lost lease table, or to check a table without a metadata item: a batch
# reads the leases by key.
ONLY_TO_ADOPT = "dynamodb:Scan"
FAILED_TASK = re.compile(r"task_id=(\w+).*?(?:failed|FAILED)|Task failed.*?task_id=(\w+)", re.IGNORECASE)


def policy(stream: str, app: str) -> dict[str, Any]:
    return policy_document(
        required_permissions(stream_name=stream, region="us-east-1", account_id=ACCOUNT, application_name=app)
    )


def without(document: dict[str, Any], action: str) -> dict[str, Any]:
    statements = [
        {**s, "Action": [a for a in s["Action"] if a != action]}
        for s in document["Statement"]
        if s["Action"] != [action]
    ]
    return {**document, "Statement": [s for s in statements if s["Action"]]}


def connector(stream: str, app: str, table: str) -> dict[str, Any]:
    return {
        "connector_id": app.replace("-", "_"),
        # The connector's user holds only the generated policy, so it may not simulate its own.
        "source": {
            "stream_name": stream,
            "region": "us-east-1",
            "application_name": app,
            "iam_check": "best_effort",
        },
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "snowflake": {"columns": {"ID": "NUMBER(38,0)"}},
        "batch": {"schedule": None, "retries": 0},
    }


def env_for(iam_moto: IamMoto, dag_env: dict[str, str], document: dict[str, Any]) -> dict[str, str]:
    _, key = iam_moto.user(inline={"connector": document})
    extra = {
        "region_name": "us-east-1",
        "endpoint_url": iam_moto.endpoint,
        "service_config": {"sts": {"endpoint_url": iam_moto.endpoint}},
    }
    aws = {"conn_type": "aws", "login": key.access_key_id, "password": key.secret_access_key, "extra": extra}
    return {**dag_env, "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(aws)}


def test_generated_policy_runs_both_dags_and_each_action_is_needed(
    iam_moto: IamMoto, emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    stream = unique("least")
    admin_kinesis = iam_moto.client("kinesis")
    admin_kinesis.create_stream(StreamName=stream, ShardCount=2)
    admin_kinesis.get_waiter("stream_exists").wait(StreamName=stream)
    admin_kinesis.put_records(
        StreamName=stream,
        Records=[{"Data": json.dumps({"id": i}).encode(), "PartitionKey": f"k{i}"} for i in range(60)],
    )

    # With exactly the generated policy: provision, then ingest, end to end.
    app = unique("least-app")
    table = "LEAST_" + app.split("-")[-1].upper()
    dag_file = write_connector(tmp_path / "dags", connector(stream, app, table))
    env = env_for(iam_moto, dag_env, policy(stream, app))
    prefix = f"kinesis_snowflake_{app.replace('-', '_')}"
    for dag_id in (f"{prefix}_provision", f"{prefix}_ingest"):
        proc = run_dag(dag_id, env, dag_file=dag_file, log_path=tmp_path / f"{dag_id}.log")
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    assert [r[0] for r in query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table} ORDER BY ID")] == list(range(60))

    # Every action of the policy is needed: without it, the step that first needs it fails.
    actions = sorted({a for s in policy(stream, "x")["Statement"] for a in s["Action"]})
    assert sorted([*FIRST_NEEDED_BY, AFTER_RESHARDING, ONLY_TO_ADOPT]) == actions
    minus_tables = []
    for action in sorted(FIRST_NEEDED_BY):
        # Each run a new application into a table of its own (one application name loads a destination).
        app = unique("minus")
        minus_table = "LEAST_" + app.replace("-", "_").upper()
        create_table(emulators, "ANALYTICS", "RAW", minus_table, "ID NUMBER(38,0)")
        minus_tables.append(minus_table)
        dag_file = write_connector(tmp_path / app, connector(stream, app, minus_table))
        env = env_for(iam_moto, dag_env, without(policy(stream, app), action))
        dag_id = f"kinesis_snowflake_{app.replace('-', '_')}_ingest"
        proc = run_dag(dag_id, env, dag_file=dag_file, log_path=tmp_path / f"{app}.log")
        output = proc.stdout + proc.stderr
        assert proc.returncode != 0, f"{action} removed, yet the DAG succeeded"
        assert "AccessDenied" in output and action in output, f"{action}:\n{output[-3000:]}"
        failed_step = FIRST_NEEDED_BY[action]
        assert f"task_id={failed_step}" in output and "DAG_RUN_STATE=failed" in output, action
    for minus_table in minus_tables:
        assert query(emulators, f"SELECT COUNT(*) FROM ANALYTICS.RAW.{minus_table}") == [(0,)], minus_table


def test_delete_item_is_needed_once_a_resharded_parent_is_finished(
    iam_moto: IamMoto, emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    stream, app = unique("least-split"), unique("least-split-app")
    admin_kinesis = iam_moto.client("kinesis")
    admin_kinesis.create_stream(StreamName=stream, ShardCount=1)
    admin_kinesis.get_waiter("stream_exists").wait(StreamName=stream)
    admin_kinesis.put_records(StreamName=stream, Records=[{"Data": b'{"id": 1}', "PartitionKey": "a"}])
    admin_kinesis.split_shard(StreamName=stream, ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**127))
    admin_kinesis.put_records(
        StreamName=stream, Records=[{"Data": json.dumps({"id": i}).encode(), "PartitionKey": f"k{i}"} for i in (2, 3)]
    )
    table = "LEAST_SPLIT_" + app.split("-")[-1].upper()
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    dag_file = write_connector(tmp_path / "dags", connector(stream, app, table))
    env = env_for(iam_moto, dag_env, without(policy(stream, app), AFTER_RESHARDING))
    dag_id = f"kinesis_snowflake_{app.replace('-', '_')}_ingest"
    # The parent is read to its end, then the children; neither needs DeleteItem.
    for run in (1, 2):
        proc = run_dag(dag_id, env, dag_file=dag_file, log_path=tmp_path / f"run{run}.log")
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    # Now the parent's lease is to be removed, which DeleteItem grants. A new record makes the run
    # ingest: a run with nothing new ends at its check for records, before the lease table.
    admin_kinesis.put_records(StreamName=stream, Records=[{"Data": b'{"id": 4}', "PartitionKey": "k4"}])
    proc = run_dag(dag_id, env, dag_file=dag_file, log_path=tmp_path / "run3.log")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "AccessDenied" in output and AFTER_RESHARDING in output and "task_id=ingest" in output
    assert sorted(r[0] for r in query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table}")) == [1, 2, 3]


def test_the_fan_out_policy_provisions_the_consumer_and_reads_through_it(
    iam_moto: IamMoto, emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    stream, app = unique("least-efo"), unique("least-efo-app")
    admin_kinesis = iam_moto.client("kinesis")
    admin_kinesis.create_stream(StreamName=stream, ShardCount=1)
    admin_kinesis.get_waiter("stream_exists").wait(StreamName=stream)
    admin_kinesis.put_records(
        StreamName=stream,
        Records=[{"Data": json.dumps({"id": i}).encode(), "PartitionKey": f"k{i}"} for i in range(20)],
    )
    table = "LEAST_EFO_" + app.split("-")[-1].upper()
    efo = connector(stream, app, table)
    efo["source"]["consumer_type"] = "ENHANCED_FAN_OUT"
    dag_file = write_connector(tmp_path / "dags", efo)
    document = policy_document(
        required_permissions(
            stream_name=stream,
            region="us-east-1",
            account_id=ACCOUNT,
            application_name=app,
            consumer_type="ENHANCED_FAN_OUT",
        )
    )
    prefix = f"kinesis_snowflake_{app.replace('-', '_')}"
    # Without SubscribeToShard, provisioning succeeds and the read through the consumer is denied.
    env = env_for(iam_moto, dag_env, without(document, "kinesis:SubscribeToShard"))
    for dag_id in (f"{prefix}_provision", f"{prefix}_ingest"):
        proc = run_dag(dag_id, env, dag_file=dag_file, log_path=tmp_path / f"minus-{dag_id}.log")
        if dag_id.endswith("_provision"):
            assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "AccessDenied" in output and "kinesis:SubscribeToShard" in output and "task_id=ingest" in output
    # With the whole generated policy, the same connector loads every record.
    proc = run_dag(f"{prefix}_ingest", env_for(iam_moto, dag_env, document), dag_file=dag_file)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    assert [r[0] for r in query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table} ORDER BY ID")] == list(range(20))
