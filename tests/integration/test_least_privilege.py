"""The generated policy is enough for the provisioning and ingest DAGs, and every action is needed.

AWS runs in a moto server that enforces IAM, with resources scoped to the ARNs of each request
(see tests/emulators/moto_extensions.py). The connector runs as an IAM user holding exactly the
policy ``python -m airflow_kinesis_snowflake policy --principal <the user>`` prints (from
``core/admin/iam.py``). With it, both DAGs succeed end to end through spark-submit, the provision
DAG's IAM check included (``iam_check: required``, the default); with any one action removed, a
named step fails and its error carries the AccessDenied of that action.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.admin.iam import (
    permission_check_permissions,
    policy_document,
    required_permissions,
)
from tests.conftest import create_table, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.emulators.iam import ACCOUNT, IamMoto
from tests.integration.test_ingest_dag import last_run_states, write_connector
from tests.integration.test_least_privilege_dynamodb import env_with, user_holding_the_printed_policy

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


def policy(stream: str, app: str, principal: str | None = None) -> dict[str, Any]:
    """What ingestion needs; with ``principal``, also what the provision DAG's IAM check needs."""
    return policy_document(
        required_permissions(stream_name=stream, region="us-east-1", account_id=ACCOUNT, application_name=app)
        + (permission_check_permissions(principal) if principal else [])
    )


def without(document: dict[str, Any], action: str) -> dict[str, Any]:
    statements = [
        {**s, "Action": [a for a in s["Action"] if a != action]}
        for s in document["Statement"]
        if s["Action"] != [action]
    ]
    return {**document, "Statement": [s for s in statements if s["Action"]]}


# The action the provision DAG's IAM check needs (on the connector's own principal).
CHECK_ACTION = "iam:SimulatePrincipalPolicy"


def connector(stream: str, app: str, table: str, iam_check: str | None = None) -> dict[str, Any]:
    """A connector file; ``source.iam_check`` left out (``required``) unless given."""
    source = {"stream_name": stream, "region": "us-east-1", "application_name": app}
    return {
        "connector_id": app.replace("-", "_"),
        "source": source | ({"iam_check": iam_check} if iam_check else {}),
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "snowflake": {"columns": {"ID": "NUMBER(38,0)"}},
        "batch": {"schedule": None, "retries": 0},
    }


def env_for(iam_moto: IamMoto, dag_env: dict[str, str], document: dict[str, Any]) -> dict[str, str]:
    _, key = iam_moto.user(inline={"connector": document})
    return env_with(iam_moto, dag_env, key)


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

    # With exactly the printed policy: provision (its IAM check required, the default), then ingest.
    app = unique("least-app")
    table = "LEAST_" + app.split("-")[-1].upper()
    file = connector(stream, app, table)
    dag_file = write_connector(tmp_path / "dags", file)
    arn, key, printed = user_holding_the_printed_policy(iam_moto, tmp_path, file)
    assert printed == policy(stream, app, principal=arn)
    env = env_with(iam_moto, dag_env, key)
    prefix = f"kinesis_snowflake_{app.replace('-', '_')}"
    for dag_id in (f"{prefix}_provision", f"{prefix}_ingest"):
        proc = run_dag(dag_id, env, dag_file=dag_file, log_path=tmp_path / f"{dag_id}.log")
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
        if dag_id.endswith("_provision"):
            assert last_run_states(env, dag_id)["check_iam_permissions"] == "success"
    assert [r[0] for r in query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table} ORDER BY ID")] == list(range(60))

    # The check needs its action: without it, provisioning stops at the check, before anything is created.
    app = unique("least-nocheck")
    file = connector(stream, app, "LEAST_" + app.split("-")[-1].upper())
    dag_file = write_connector(tmp_path / app, file)
    arn, key, _ = user_holding_the_printed_policy(iam_moto, tmp_path, file, leave_out=CHECK_ACTION)
    env = env_with(iam_moto, dag_env, key)
    dag_id = f"kinesis_snowflake_{app.replace('-', '_')}_provision"
    proc = run_dag(dag_id, env, dag_file=dag_file, log_path=tmp_path / f"{app}.log")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"{arn} may not call {CHECK_ACTION}" in output, output[-3000:]
    assert last_run_states(env, dag_id)["check_iam_permissions"] == "failed"
    assert "create_lease_table" not in {t for t, s in last_run_states(env, dag_id).items() if s == "success"}

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
    # Its user may not simulate itself: the check is skipped, and the read is what is denied.
    efo = connector(stream, app, table, iam_check="best_effort")
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
