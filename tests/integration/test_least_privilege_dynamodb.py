"""The generated policy of a DynamoDB source is enough for its sync, and each source action is needed.

AWS runs in a moto server that enforces IAM, with DynamoDB and DynamoDB Streams requests scoped to
the table and stream ARNs they act on (see tests/emulators/moto_extensions.py); Snowflake is the
fakesnow server. The connector runs as an IAM user holding exactly the policy that
``python -m airflow_kinesis_snowflake policy`` prints for its connector file. With it, discovery and
:func:`~.core.dynamodb_sync.sync_table` (in-process) take the table's snapshot and then a stream
batch; with one source action removed, the run fails with the AccessDenied of that action on the
table or stream it needed it for.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.config import Config
from botocore.exceptions import ClientError

from airflow_kinesis_snowflake.__main__ import main
from airflow_kinesis_snowflake.core.dynamodb_sync import TableOutcome, TableSync, sync_table
from airflow_kinesis_snowflake.core.load.dynamodb_rows import Layout, key_attributes
from airflow_kinesis_snowflake.core.load.dynamodb_sink import Deletes, DynamoDBTarget, KeyColumn
from airflow_kinesis_snowflake.core.model import Destination
from airflow_kinesis_snowflake.core.sources.dynamodb.discovery import TableSelection, discover
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import SyncSettings
from tests.conftest import query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.emulators.iam import ACCOUNT, IamMoto, Key
from tests.integration.test_ingest_dag import last_run_states, write_connector

pytestmark = pytest.mark.integration

NO_RETRIES = Config(retries={"total_max_attempts": 1})
# The source actions the sync needs, and where it needs them (the lease table's are those of a
# Kinesis connector, proven needed in test_least_privilege.py).
SOURCE_ACTIONS = {
    "dynamodb:DescribeTable": "table",
    "dynamodb:Scan": "table",
    "dynamodb:DescribeStream": "stream",
    "dynamodb:GetShardIterator": "stream",
    "dynamodb:GetRecords": "stream",
}


# The principal the sync tests' policies name for the provision DAG's IAM check (the sync itself runs no check).
SYNC_PRINCIPAL = f"arn:aws:iam::{ACCOUNT}:user/least-privilege-sync"


def printed_policy(tmp_path: Path, connector: dict[str, Any], principal: str | None = None) -> dict[str, Any]:
    """What ``policy`` prints for the connector file; with ``principal``, the IAM check's grant names it."""
    path = tmp_path / f"{connector['connector_id']}.yaml"
    path.write_text(yaml.safe_dump(connector), encoding="utf-8")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert (
            main(["policy", str(path), "--account-id", ACCOUNT, *(["--principal", principal] if principal else [])])
            == 0
        )
    document: dict[str, Any] = json.loads(out.getvalue())
    return document


def user_holding_the_printed_policy(
    iam_moto: IamMoto, tmp_path: Path, connector: dict[str, Any], leave_out: str | None = None
) -> tuple[str, Key, dict[str, Any]]:
    """A user holding exactly what ``policy --principal <its ARN>`` prints, less ``leave_out``: ARN, key, policy."""
    arn, key = iam_moto.user()
    document = printed_policy(tmp_path, connector, principal=arn)
    statements = [{**s, "Action": [a for a in s["Action"] if a != leave_out]} for s in document["Statement"]]
    attached = {**document, "Statement": [s for s in statements if s["Action"]]}
    iam_moto.client("iam").put_user_policy(
        UserName=arn.rsplit("/", 1)[1], PolicyName="connector", PolicyDocument=json.dumps(attached)
    )
    return arn, key, document


def env_with(iam_moto: IamMoto, dag_env: dict[str, str], key: Key) -> dict[str, str]:
    """The DAGs' environment with the AWS connection of ``key`` on the IAM-enforcing moto server."""
    extra = {
        "region_name": "us-east-1",
        "endpoint_url": iam_moto.endpoint,
        "service_config": {"sts": {"endpoint_url": iam_moto.endpoint}},
    }
    aws = {"conn_type": "aws", "login": key.access_key_id, "password": key.secret_access_key, "extra": extra}
    return {**dag_env, "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(aws)}


def without(document: dict[str, Any], action: str, sid: str) -> dict[str, Any]:
    """The policy with ``action`` taken out of statement ``sid`` only (the lease table keeps its own)."""
    statements = [
        {**s, "Action": [a for a in s["Action"] if not (s["Sid"] == sid and a == action)]}
        for s in document["Statement"]
    ]
    return {**document, "Statement": [s for s in statements if s["Action"]]}


def connector(table: str, app: str) -> dict[str, Any]:
    return {
        "connector_id": app.replace("-", "_"),
        "source": {"type": "dynamodb", "region": "us-east-1", "application_name": app, "tables": [table]},
        "destination": {"database": "ANALYTICS", "schema": "RAW"},
    }


def source_table(iam_moto: IamMoto) -> dict[str, Any]:
    admin = iam_moto.client("dynamodb")
    name = unique("least-ddb")
    description: dict[str, Any] = admin.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )["TableDescription"]
    for n in range(12):
        admin.put_item(TableName=name, Item={"pk": {"S": f"k{n}"}, "n": {"N": str(n)}})
    return description


def table_sync(description: dict[str, Any], app: str, destination_table: str | None = None) -> TableSync:
    keys = key_attributes(description)
    name = description["TableName"]
    destination = Destination("ANALYTICS", "RAW", destination_table or name.replace("-", "_").upper())
    target = DynamoDBTarget(
        destination, name, tuple(KeyColumn(k.column, k.sql_type) for k in keys), Layout.PACKED, Deletes.HARD
    )
    return TableSync(
        application_name=app,
        table=name,
        stream_arn=description["LatestStreamArn"],
        target=target,
        keys=keys,
        settings=SyncSettings(total_segments=2, max_segments_per_batch=2),
        max_items_per_segment=100,
    )


def run_as(iam_moto: IamMoto, emulators: Emulators, key: Key, sync: TableSync) -> TableOutcome:
    """Discovery, then one sync run, with every AWS call made as the connector's user.

    :raises Denied: discovery skipped the table (its reason names what was denied).
    """

    def client(service: str) -> Any:
        return boto3.client(
            service,
            region_name="us-east-1",
            endpoint_url=iam_moto.endpoint,
            aws_access_key_id=key.access_key_id,
            aws_secret_access_key=key.secret_access_key,
            config=NO_RETRIES,
        )

    discovery = discover(client("dynamodb"), None, TableSelection(tables=(sync.table,)))
    if discovery.skipped:
        raise Denied("; ".join(f"{s.reason.value}: {s.describe()}" for s in discovery.skipped))
    assert [t.table for t in discovery.targets] == [sync.table], discovery
    return sync_table(
        sync,
        lease_dynamodb=client("dynamodb"),
        source_dynamodb=client("dynamodb"),
        streams=client("dynamodbstreams"),
        connect_snowflake=emulators.snowflake_connect,
        owner=f"ddb/least/run/-1/try-1/{sync.application_name}",
    )


class Denied(Exception):
    """Discovery did not sync the table: a denied DescribeTable is reported there, not raised."""


def ensure_schema(emulators: Emulators) -> None:
    conn = emulators.snowflake_connect()
    try:
        conn.cursor().execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
        conn.cursor().execute("CREATE SCHEMA IF NOT EXISTS ANALYTICS.RAW")
    finally:
        conn.close()


def test_the_printed_policy_syncs_a_table_through_snapshot_and_stream_and_each_source_action_is_needed(
    iam_moto: IamMoto, emulators: Emulators, tmp_path: Path
) -> None:
    ensure_schema(emulators)
    description = source_table(iam_moto)
    name, app = description["TableName"], unique("least-ddb-app")
    document = printed_policy(tmp_path, connector(name, app), principal=SYNC_PRINCIPAL)
    granted = {a for s in document["Statement"] if s["Sid"].startswith("DynamoDBSource") for a in s["Action"]}
    assert granted == set(SOURCE_ACTIONS)

    # With exactly the printed policy: the snapshot, then a stream batch with the changes made since.
    _, key = iam_moto.user(inline={"connector": document})
    sync = table_sync(description, app)
    first = run_as(iam_moto, emulators, key, sync)
    assert first.snapshots_completed, first
    destination = sync.target.destination.qualified_name
    assert query(emulators, f"SELECT COUNT(*) FROM {destination}") == [(12,)]
    admin = iam_moto.client("dynamodb")
    admin.put_item(TableName=name, Item={"pk": {"S": "k100"}, "n": {"N": "100"}})
    admin.delete_item(TableName=name, Key={"pk": {"S": "k0"}})
    second = run_as(iam_moto, emulators, key, sync)
    assert any(b.shards and sum(b.shards.values()) > 0 for b in second.batches), second
    rows = query(emulators, f"SELECT PK FROM {destination} ORDER BY PK")
    assert sorted(r[0] for r in rows) == sorted([f"k{n}" for n in range(1, 12)] + ["k100"])

    # Each source action is needed: without it, the run fails with its AccessDenied on that resource.
    for action, resource in sorted(SOURCE_ACTIONS.items()):
        sid = "DynamoDBSourceTables" if resource == "table" else "DynamoDBSourceStreams"
        # A new application, so that the run starts from the snapshot again (with its own lease table),
        # into a destination of its own (one application loads a destination).
        minus_app = unique("least-ddb-minus")
        minus_document = without(
            printed_policy(tmp_path, connector(name, minus_app), principal=SYNC_PRINCIPAL), action, sid
        )
        _, minus = iam_moto.user(inline={"connector": minus_document})
        fresh = table_sync(description, minus_app, minus_app.replace("-", "_").upper())
        with pytest.raises((ClientError, Denied)) as denied:
            run_as(iam_moto, emulators, minus, fresh)
        message = str(denied.value)
        arn = f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/{name}" + ("/stream/" if resource == "stream" else " ")
        assert f"not authorized to perform: {action} on resource: {arn}" in message, f"{action}: {message}"
        if isinstance(denied.value, ClientError):
            assert denied.value.response["Error"]["Code"] == "AccessDeniedException", message


def test_the_printed_policy_runs_the_provision_dag_with_its_iam_check_required(
    iam_moto: IamMoto, emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    ensure_schema(emulators)
    name = source_table(iam_moto)["TableName"]
    app = unique("least-ddb-prov")
    file = connector(name, app) | {"batch": {"schedule": None, "retries": 0}}
    assert "iam_check" not in file["source"]  # required, the default
    dag_file = write_connector(tmp_path / "dags", file)
    dag_id = f"dynamodb_snowflake_{file['connector_id']}_provision"

    # With exactly the printed policy, every step succeeds, the IAM check first.
    arn, key, printed = user_holding_the_printed_policy(iam_moto, tmp_path, file)
    check = next(s for s in printed["Statement"] if s["Sid"] == "IamPermissionCheck")
    assert (check["Action"], check["Resource"]) == (["iam:SimulatePrincipalPolicy"], [arn])
    env = env_with(iam_moto, dag_env, key)
    proc = run_dag(dag_id, env, dag_file=dag_file, log_path=tmp_path / "provision.log")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    assert f"{arn} has all" in output
    assert last_run_states(env, dag_id) == {
        "check_iam_permissions": "success",
        "create_lease_table": "success",
        "discover_tables": "success",
        "provision_table": "success",
    }
    destination = name.replace("-", "_").upper()
    assert query(
        emulators, f"SELECT COUNT(*) FROM ANALYTICS.INFORMATION_SCHEMA.TABLES WHERE TABLE_NAME = '{destination}'"
    ) == [(1,)]

    # Without the check's action, the run stops at the check, saying what to allow, and creates nothing.
    app = unique("least-ddb-nocheck")
    file = connector(name, app) | {"batch": {"schedule": None, "retries": 0}}
    dag_file = write_connector(tmp_path / app, file)
    dag_id = f"dynamodb_snowflake_{file['connector_id']}_provision"
    arn, key, _ = user_holding_the_printed_policy(iam_moto, tmp_path, file, leave_out="iam:SimulatePrincipalPolicy")
    env = env_with(iam_moto, dag_env, key)
    proc = run_dag(dag_id, env, dag_file=dag_file, log_path=tmp_path / "nocheck.log")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"allow iam:SimulatePrincipalPolicy on {arn}" in output, output[-3000:]
    states = last_run_states(env, dag_id)
    assert states["check_iam_permissions"] == "failed" and states.get("create_lease_table") != "success", states
    assert app not in iam_moto.client("dynamodb").list_tables()["TableNames"]
