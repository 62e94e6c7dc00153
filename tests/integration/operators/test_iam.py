"""CheckIamPermissionsOperator (and its DynamoDB twin), and the generated policy, against a moto server that
enforces IAM.

The server is started with ``INITIAL_NO_AUTH_ACTION_COUNT=3``: the first three requests create an
administrator and its access key, every later request is signed and authorised against the
caller's policies, with resources scoped to the stream, consumer or table ARN of the request.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from airflow.exceptions import AirflowProviderDeprecationWarning
from botocore.exceptions import ClientError

from airflow_kinesis_snowflake.compat import AirflowFailException, AirflowSkipException
from airflow_kinesis_snowflake.core.admin.iam import (
    dynamodb_source_permissions,
    permission_check_permissions,
    policy_document,
    required_permissions,
    simulation_pairs,
)
from airflow_kinesis_snowflake.core.model import ConsumerType, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import ShardRange
from airflow_kinesis_snowflake.core.sources.readers import read_shard_range
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook
from airflow_kinesis_snowflake.operators.iam import CheckDynamoDBIamPermissionsOperator, CheckIamPermissionsOperator
from airflow_kinesis_snowflake.operators.lease_table import CreateLeaseTableOperator
from tests.conftest import unique
from tests.emulators.iam import ACCOUNT, CONN_ID, IamMoto, Key
from tests.emulators.moto_extensions import ROOT_ACCESS_KEY_ID
from tests.emulators.servers import REGION

pytestmark = pytest.mark.integration


def allow(actions: str | list[str], resources: str | list[str], effect: str = "Allow") -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": [{"Effect": effect, "Action": actions, "Resource": resources}]}


def may_simulate(principal: str) -> dict[str, Any]:
    return allow("iam:SimulatePrincipalPolicy", principal)


def connector_policy(stream: str, app: str, principal: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """A Kinesis connector's policy; with ``principal``, the check's leave to simulate it too."""
    return policy_document(
        required_permissions(stream_name=stream, region=REGION, account_id=ACCOUNT, application_name=app, **kwargs)
        + (permission_check_permissions(principal) if principal else [])
    )


def pairs(stream: str, app: str, **kwargs: Any) -> list[tuple[str, str]]:
    return simulation_pairs(
        required_permissions(stream_name=stream, region=REGION, account_id=ACCOUNT, application_name=app, **kwargs)
    )


def check(stream: str, app: str, conn_id: str = CONN_ID, **kwargs: Any) -> dict[str, Any]:
    operator = CheckIamPermissionsOperator(
        task_id="check_iam", stream_name=stream, application_name=app, aws_conn_id=conn_id, **kwargs
    )
    result: dict[str, Any] = operator.execute(context={})
    return result


def connector_user(iam_moto: IamMoto, policy: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    """A user holding ``policy`` and leave to simulate itself, as the connection ``CONN_ID``; its ARN."""
    arn, key = iam_moto.user(inline={"connector": policy})
    iam_moto.client("iam").put_user_policy(
        UserName=arn.rsplit("/", 1)[1], PolicyName="simulate", PolicyDocument=json.dumps(may_simulate(arn))
    )
    iam_moto.connection(key, monkeypatch)
    return arn


def listed(message: str) -> list[str]:
    """The ``  - action on resource (decision...)`` lines of a failure message."""
    return [line for line in message.splitlines() if line.startswith("  - ")]


def stream_arn(stream: str) -> str:
    return f"arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/{stream}"


def table_arn(table: str) -> str:
    return f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{table}"


# -- the operator ------------------------------------------------------------------------------


def test_full_policy_passes_with_every_decision_allowed(iam_moto: IamMoto, monkeypatch: pytest.MonkeyPatch) -> None:
    stream, app = unique("orders"), unique("app")
    arn, key = iam_moto.user(inline={})
    iam_moto.client("iam").put_user_policy(
        UserName=arn.rsplit("/", 1)[1], PolicyName="connector", PolicyDocument=json.dumps(connector_policy(stream, app))
    )
    iam_moto.client("iam").put_user_policy(
        UserName=arn.rsplit("/", 1)[1], PolicyName="simulate", PolicyDocument=json.dumps(may_simulate(arn))
    )
    iam_moto.connection(key, monkeypatch)

    result = check(stream, app)

    assert result["principal_arn"] == arn
    # The policy to attach also lets the check simulate the principal (IamPermissionCheck).
    assert result["policy"] == connector_policy(stream, app, principal=arn)
    assert {(d["action"], d["resource"]) for d in result["decisions"]} == set(pairs(stream, app))
    assert len(result["decisions"]) == len(pairs(stream, app))
    assert {d["decision"] for d in result["decisions"]} == {"allowed"}
    json.dumps(result)  # an XCom value


def test_one_missing_action_is_named_with_its_resource(iam_moto: IamMoto, monkeypatch: pytest.MonkeyPatch) -> None:
    stream, app = unique("orders"), unique("app")
    policy = connector_policy(stream, app)
    table_statement = next(s for s in policy["Statement"] if s["Sid"] == "DynamoDBLeaseTable")
    table_statement["Action"].remove("dynamodb:UpdateItem")
    arn = connector_user(iam_moto, policy, monkeypatch)

    with pytest.raises(AirflowFailException) as failure:
        check(stream, app)

    message = str(failure.value)
    assert listed(message) == [f"  - dynamodb:UpdateItem on {table_arn(app)} (implicitDeny)"]
    assert message.startswith(f"{arn} lacks 1 of the {len(pairs(stream, app))} permissions")
    # The policy to attach is the full one, UpdateItem and the check's own SimulatePrincipalPolicy included.
    attach = json.loads(message.split(f"Attach this policy to {arn}:\n", 1)[1])
    assert attach == connector_policy(stream, app, principal=arn)


def test_no_permissions_lists_every_pair(iam_moto: IamMoto, monkeypatch: pytest.MonkeyPatch) -> None:
    stream, app = unique("orders"), unique("app")
    arn, key = iam_moto.user()
    iam_moto.client("iam").put_user_policy(
        UserName=arn.rsplit("/", 1)[1], PolicyName="simulate", PolicyDocument=json.dumps(may_simulate(arn))
    )
    iam_moto.connection(key, monkeypatch)

    with pytest.raises(AirflowFailException) as failure:
        check(stream, app, consumer_type=ConsumerType.ENHANCED_FAN_OUT, include_migration_table=True)

    expected = pairs(stream, app, consumer_type=ConsumerType.ENHANCED_FAN_OUT, include_migration_table=True)
    assert listed(str(failure.value)) == [f"  - {a} on {r} (implicitDeny)" for a, r in expected]
    assert f"{stream_arn(stream)}/consumer/*" in {r for _, r in expected}


def test_explicit_deny_overrides_allow_everything(iam_moto: IamMoto, monkeypatch: pytest.MonkeyPatch) -> None:
    stream, app = unique("orders"), unique("app")
    _, key = iam_moto.user(
        inline={
            "everything": allow("*", "*"),
            "no-reads": allow("kinesis:GetRecords", stream_arn(stream), effect="Deny"),
        }
    )
    iam_moto.connection(key, monkeypatch)

    with pytest.raises(AirflowFailException) as failure:
        check(stream, app)

    (line,) = listed(str(failure.value))
    assert line.startswith(f"  - kinesis:GetRecords on {stream_arn(stream)} (explicitDeny by user policy no-reads")
    assert "an Allow cannot override it" in line


def test_principal_that_may_not_simulate_fails_plainly(iam_moto: IamMoto, monkeypatch: pytest.MonkeyPatch) -> None:
    stream, app = unique("orders"), unique("app")
    arn, key = iam_moto.user(inline={"connector": connector_policy(stream, app)})
    iam_moto.connection(key, monkeypatch)

    with pytest.raises(AirflowFailException) as failure:
        check(stream, app)

    message = str(failure.value)
    assert message.startswith(f"{arn} may not call iam:SimulatePrincipalPolicy")
    assert f"(principal {arn}, an IAM user)" in message
    assert f"allow iam:SimulatePrincipalPolicy on {arn}" in message
    assert "AccessDenied" in message  # the AWS error is kept
    assert "check_mode is 'required'" in message
    assert "source.iam_check: best_effort" in message


def test_principal_that_may_not_simulate_is_skipped_on_request(
    iam_moto: IamMoto, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stream, app = unique("orders"), unique("app")
    arn, key = iam_moto.user(inline={"connector": connector_policy(stream, app)})
    iam_moto.connection(key, monkeypatch)

    with pytest.raises(AirflowSkipException) as skipped:
        check(stream, app, check_mode="best_effort")

    assert str(skipped.value).startswith(f"{arn} may not call iam:SimulatePrincipalPolicy")
    warnings = [line for line in capsys.readouterr().out.splitlines() if "[warning" in line]
    assert any(f"Skipping the IAM permission check: {arn} may not call" in line for line in warnings)


def test_deprecated_skip_if_simulation_denied_is_best_effort(
    iam_moto: IamMoto, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream, app = unique("orders"), unique("app")
    arn, key = iam_moto.user(inline={"connector": connector_policy(stream, app)})
    iam_moto.connection(key, monkeypatch)

    with pytest.warns(AirflowProviderDeprecationWarning, match="check_mode='best_effort'"):
        operator = CheckIamPermissionsOperator(
            task_id="check_iam",
            stream_name=stream,
            application_name=app,
            aws_conn_id=CONN_ID,
            skip_if_simulation_denied=True,
        )
    assert operator.check_mode == "best_effort"
    with pytest.raises(AirflowSkipException, match=f"^{arn} may not call iam:SimulatePrincipalPolicy"):
        operator.execute(context={})
    with pytest.raises(ValueError, match="set only check_mode"):
        CheckIamPermissionsOperator(
            task_id="both", stream_name=stream, application_name=app, skip_if_simulation_denied=True, check_mode="off"
        )
    with pytest.raises(ValueError, match="required, best_effort, off"):
        CheckIamPermissionsOperator(task_id="bad", stream_name=stream, application_name=app, check_mode="lenient")


def test_assumed_role_is_checked_as_its_role(iam_moto: IamMoto, monkeypatch: pytest.MonkeyPatch) -> None:
    stream, app = unique("orders"), unique("app")
    iam = iam_moto.client("iam")
    role_name = unique("ingest")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:user/admin"}, "Action": "sts:AssumeRole"}
        ],
    }
    role_arn = iam.create_role(RoleName=role_name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    fan_out: dict[str, Any] = {"consumer_type": ConsumerType.ENHANCED_FAN_OUT, "include_migration_table": True}
    iam.put_role_policy(
        RoleName=role_name, PolicyName="connector", PolicyDocument=json.dumps(connector_policy(stream, app, **fan_out))
    )
    iam.put_role_policy(RoleName=role_name, PolicyName="simulate", PolicyDocument=json.dumps(may_simulate(role_arn)))
    credentials = iam_moto.client("sts").assume_role(RoleArn=role_arn, RoleSessionName="airflow-task")["Credentials"]
    session = Key(credentials["AccessKeyId"], credentials["SecretAccessKey"], credentials["SessionToken"])
    iam_moto.connection(session, monkeypatch)

    result = check(stream, app, **fan_out)

    assert result["principal_arn"] == role_arn
    assert {(d["action"], d["resource"]) for d in result["decisions"]} == set(pairs(stream, app, **fan_out))
    assert {d["decision"] for d in result["decisions"]} == {"allowed"}


# -- when the check cannot run: check_mode ---------------------------------------------------------


def test_off_checks_nothing_and_calls_no_aws_api() -> None:
    # The connection does not exist: any AWS call would fail.
    with pytest.raises(AirflowSkipException, match="check is off"):
        check("orders", "app", conn_id="no_such_connection", check_mode="off")


def stock_connection(moto: IamMoto, key: Key, monkeypatch: pytest.MonkeyPatch) -> str:
    """The connection, with botocore retrying no more than once, so that a failed call fails at once."""
    conn_id = moto.connection(key, monkeypatch, conn_id="aws_stock")
    connection = json.loads(os.environ["AIRFLOW_CONN_AWS_STOCK"])
    connection["extra"]["config_kwargs"] = {"retries": {"max_attempts": 1, "mode": "standard"}}
    monkeypatch.setenv("AIRFLOW_CONN_AWS_STOCK", json.dumps(connection))
    return conn_id


def test_endpoint_without_the_simulator_fails_required_saying_why(
    moto_without_simulator: IamMoto, monkeypatch: pytest.MonkeyPatch
) -> None:
    arn, key = moto_without_simulator.user()
    conn_id = stock_connection(moto_without_simulator, key, monkeypatch)

    with pytest.raises(AirflowFailException) as failure:
        check("orders", "app", conn_id=conn_id)

    message = str(failure.value)
    assert message.startswith(f"the IAM endpoint {moto_without_simulator.endpoint} did not answer")
    assert f"(principal {arn}, an IAM user)" in message
    assert "stock motoserver/moto image" in message
    assert "ResponseParserError" in message  # botocore's error is kept
    assert "source.iam_check: best_effort" in message and "'off'" in message


def test_endpoint_without_the_simulator_is_skipped_in_best_effort(
    moto_without_simulator: IamMoto, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    arn, key = moto_without_simulator.user()
    conn_id = stock_connection(moto_without_simulator, key, monkeypatch)

    with pytest.raises(AirflowSkipException) as skipped:
        check("orders", "app", conn_id=conn_id, check_mode="best_effort")

    assert f"(principal {arn}, an IAM user)" in str(skipped.value)
    assert "did not answer SimulatePrincipalPolicy as AWS does" in str(skipped.value)
    warnings = [line for line in capsys.readouterr().out.splitlines() if "[warning" in line]
    assert any("Skipping the IAM permission check: the IAM endpoint" in line for line in warnings)


def test_the_compose_stacks_default_credentials_are_skipped_in_best_effort(
    moto_without_simulator: IamMoto, monkeypatch: pytest.MonkeyPatch
) -> None:
    # docker-compose.yml's aws_default: key "testing", for which moto answers arn:aws:sts::<account>:user/moto.
    conn_id = stock_connection(moto_without_simulator, moto_without_simulator.admin, monkeypatch)

    with pytest.raises(AirflowSkipException) as skipped:
        check("orders", "app", conn_id=conn_id, check_mode="best_effort")

    assert str(skipped.value).startswith(f"arn:aws:sts::{ACCOUNT}:user/moto is a principal of unknown kind")


@pytest.mark.parametrize("check_mode", ["required", "best_effort"])
def test_the_root_user_cannot_be_simulated(
    moto_without_simulator: IamMoto, monkeypatch: pytest.MonkeyPatch, check_mode: str
) -> None:
    conn_id = stock_connection(moto_without_simulator, Key(ROOT_ACCESS_KEY_ID, "root-secret"), monkeypatch)

    expected = AirflowFailException if check_mode == "required" else AirflowSkipException
    with pytest.raises(expected) as outcome:
        check("orders", "app", conn_id=conn_id, check_mode=check_mode)

    message = str(outcome.value)
    assert message.startswith(f"arn:aws:iam::{ACCOUNT}:root is the account root user, which IAM's")
    assert "python -m airflow_kinesis_snowflake policy" in message
    assert ("source.iam_check: best_effort" in message) is (check_mode == "required")


def test_a_federated_user_cannot_be_simulated(moto_without_simulator: IamMoto, monkeypatch: pytest.MonkeyPatch) -> None:
    credentials = moto_without_simulator.client("sts").get_federation_token(Name="alice")["Credentials"]
    session = Key(credentials["AccessKeyId"], credentials["SecretAccessKey"], credentials["SessionToken"])
    conn_id = stock_connection(moto_without_simulator, session, monkeypatch)

    with pytest.raises(AirflowFailException) as failure:
        check("orders", "app", conn_id=conn_id)

    assert str(failure.value).startswith(
        f"arn:aws:sts::{ACCOUNT}:federated-user/alice is a federated user (GetFederationToken credentials)"
    )


@pytest.mark.parametrize("check_mode", ["required", "best_effort"])
def test_a_session_of_a_role_under_a_path_cannot_be_found(
    iam_moto: IamMoto, monkeypatch: pytest.MonkeyPatch, check_mode: str
) -> None:
    iam = iam_moto.client("iam")
    role_name = unique("AWSReservedSSO_Ingest")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:user/admin"}, "Action": "sts:AssumeRole"}
        ],
    }
    role_arn = iam.create_role(
        RoleName=role_name, Path="/aws-reserved/sso.amazonaws.com/", AssumeRolePolicyDocument=json.dumps(trust)
    )["Role"]["Arn"]
    iam.put_role_policy(RoleName=role_name, PolicyName="simulate", PolicyDocument=json.dumps(allow("iam:*", "*")))
    credentials = iam_moto.client("sts").assume_role(RoleArn=role_arn, RoleSessionName="airflow")["Credentials"]
    iam_moto.connection(
        Key(credentials["AccessKeyId"], credentials["SecretAccessKey"], credentials["SessionToken"]), monkeypatch
    )

    expected = AirflowFailException if check_mode == "required" else AirflowSkipException
    with pytest.raises(expected) as outcome:
        check("orders", "app", check_mode=check_mode)

    message = str(outcome.value)
    assert message.startswith(f"IAM has no principal arn:aws:iam::{ACCOUNT}:role/{role_name}")
    assert f"an assumed-role session of role {role_name}" in message
    assert "NoSuchEntity" in message


def test_group_and_managed_policies_count(iam_moto: IamMoto, monkeypatch: pytest.MonkeyPatch) -> None:
    stream, app = unique("orders"), unique("app")
    iam = iam_moto.client("iam")
    statements = connector_policy(stream, app)["Statement"]
    kinesis = {"Version": "2012-10-17", "Statement": [s for s in statements if s["Sid"].startswith("Kinesis")]}
    dynamodb = {"Version": "2012-10-17", "Statement": [s for s in statements if s["Sid"].startswith("DynamoDB")]}
    arn, key = iam_moto.user()
    user_name = arn.rsplit("/", 1)[1]
    managed = iam.create_policy(PolicyName=unique("kinesis"), PolicyDocument=json.dumps(kinesis))["Policy"]["Arn"]
    iam.attach_user_policy(UserName=user_name, PolicyArn=managed)
    group = unique("connectors")
    iam.create_group(GroupName=group)
    iam.put_group_policy(GroupName=group, PolicyName="lease-table", PolicyDocument=json.dumps(dynamodb))
    iam.add_user_to_group(GroupName=group, UserName=user_name)
    iam.put_user_policy(UserName=user_name, PolicyName="simulate", PolicyDocument=json.dumps(may_simulate(arn)))
    iam_moto.connection(key, monkeypatch)

    result = check(stream, app)

    assert {d["decision"] for d in result["decisions"]} == {"allowed"}
    sources = {s for d in result["decisions"] for s in d["matched_statements"]}
    assert sources == {f"user-managed policy {managed.rsplit('/', 1)[1]}", "group policy lease-table"}


def test_unknown_consumer_type_fails_before_any_call(iam_moto: IamMoto, monkeypatch: pytest.MonkeyPatch) -> None:
    _, key = iam_moto.user()
    iam_moto.connection(key, monkeypatch)
    with pytest.raises(AirflowFailException, match="'POLLING' is not one of SHARED_THROUGHPUT, ENHANCED_FAN_OUT"):
        check("orders", "app", consumer_type="POLLING")


# -- IAM enforcement with resource scoping ------------------------------------------------------


def create_stream(iam_moto: IamMoto, name: str) -> None:
    kinesis = iam_moto.client("kinesis")
    kinesis.create_stream(StreamName=name, ShardCount=1)
    kinesis.get_waiter("stream_exists").wait(StreamName=name)


def create_table(iam_moto: IamMoto, name: str) -> None:
    iam_moto.client("dynamodb").create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )


def denied(call: Any, resource: str) -> None:
    with pytest.raises(ClientError) as error:
        call()
    assert error.value.response["Error"]["Code"] == "AccessDeniedException"
    assert f"on resource: {resource} " in error.value.response["Error"]["Message"]


def test_policies_scoped_to_a_stream_and_a_table_are_honoured(iam_moto: IamMoto) -> None:
    stream_a, stream_b = unique("a"), unique("b")
    table_a, table_b = unique("ta"), unique("tb")
    for stream in (stream_a, stream_b):
        create_stream(iam_moto, stream)
    for table in (table_a, table_b):
        create_table(iam_moto, table)
    _, key = iam_moto.user(
        inline={
            "stream-a": allow(
                ["kinesis:ListShards", "kinesis:GetShardIterator", "kinesis:GetRecords"], stream_arn(stream_a)
            ),
            "table-a": allow("dynamodb:DescribeTable", table_arn(table_a)),
        }
    )
    kinesis, dynamodb = iam_moto.client("kinesis", key), iam_moto.client("dynamodb", key)

    assert len(kinesis.list_shards(StreamName=stream_a)["Shards"]) == 1
    denied(lambda: kinesis.list_shards(StreamName=stream_b), stream_arn(stream_b))
    assert dynamodb.describe_table(TableName=table_a)["Table"]["TableName"] == table_a
    denied(lambda: dynamodb.describe_table(TableName=table_b), table_arn(table_b))

    # GetRecords names no stream: the shard iterator decides which stream it reads.
    own = kinesis.get_shard_iterator(
        StreamName=stream_a, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
    )
    assert kinesis.get_records(ShardIterator=own["ShardIterator"])["Records"] == []
    other = iam_moto.client("kinesis").get_shard_iterator(
        StreamName=stream_b, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
    )
    denied(lambda: kinesis.get_records(ShardIterator=other["ShardIterator"]), stream_arn(stream_b))


def test_fan_out_consumers_are_scoped_to_their_stream(iam_moto: IamMoto) -> None:
    stream_a, stream_b = unique("a"), unique("b")
    consumers = {}
    admin = iam_moto.client("kinesis")
    for stream in (stream_a, stream_b):
        create_stream(iam_moto, stream)
        consumers[stream] = admin.register_stream_consumer(StreamARN=stream_arn(stream), ConsumerName="app")[
            "Consumer"
        ]["ConsumerARN"]
    _, key = iam_moto.user(
        inline={"consumers-of-a": allow("kinesis:DescribeStreamConsumer", f"{stream_arn(stream_a)}/consumer/*")}
    )
    kinesis = iam_moto.client("kinesis", key)

    described = kinesis.describe_stream_consumer(ConsumerARN=consumers[stream_a])["ConsumerDescription"]
    assert described["ConsumerARN"] == consumers[stream_a]
    denied(lambda: kinesis.describe_stream_consumer(ConsumerARN=consumers[stream_b]), consumers[stream_b])


def test_generated_policy_is_enough_for_the_connector_and_no_more(
    iam_moto: IamMoto, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream, other_stream = unique("orders"), unique("other")
    app, other_app = unique("app"), unique("other-app")
    for name in (stream, other_stream):
        create_stream(iam_moto, name)
    iam_moto.client("kinesis").put_record(StreamName=stream, Data=b'{"id": 1}', PartitionKey="k")
    _, key = iam_moto.user(
        inline={"connector": connector_policy(stream, app, consumer_type=ConsumerType.SHARED_THROUGHPUT)}
    )
    conn_id = iam_moto.connection(key, monkeypatch)

    # The real code paths, with exactly the generated policy.
    created = CreateLeaseTableOperator(
        task_id="create_lease_table", application_name=app, stream_name=stream, aws_conn_id=conn_id
    ).execute(context={})
    assert created["created"] is True
    shards = KinesisStreamHook(aws_conn_id=conn_id).list_shards(stream)
    table = LeaseTableHook(aws_conn_id=conn_id, table_name=app).lease_table
    leases = table.sync_shards(shards, StartPosition(InitialPosition.TRIM_HORIZON))
    lease = table.take(leases[shards[0].shard_id], owner="worker-1", duration_seconds=60)
    assert lease is not None
    read = read_shard_range(
        KinesisStreamHook(aws_conn_id=conn_id).conn,
        stream,
        ShardRange(lease.shard_id, None, lease.start, 100),
        cutoff=datetime.now(UTC) + timedelta(days=1),
        max_records_per_call=100,
        sleep=lambda _: None,
    )
    assert [json.loads(r.data) for r in read.records] == [{"id": 1}]
    lease = table.checkpoint(lease, read.last)
    table.release(lease)
    assert table.leases()[lease.shard_id].checkpoint == read.last

    # Nothing beyond it: another stream, another application's table.
    denied(lambda: KinesisStreamHook(aws_conn_id=conn_id).list_shards(other_stream), stream_arn(other_stream))
    with pytest.raises(ClientError) as error:
        CreateLeaseTableOperator(
            task_id="create_other", application_name=other_app, stream_name=stream, aws_conn_id=conn_id
        ).execute(context={})
    assert error.value.response["Error"]["Code"] == "AccessDeniedException"
    assert table_arn(other_app) in error.value.response["Error"]["Message"]


def test_creating_the_tagged_lease_table_needs_tag_resource(iam_moto: IamMoto, monkeypatch: pytest.MonkeyPatch) -> None:
    stream, app = unique("orders"), unique("app")
    policy = connector_policy(stream, app)
    next(s for s in policy["Statement"] if s["Sid"] == "DynamoDBLeaseTable")["Action"].remove("dynamodb:TagResource")
    _, key = iam_moto.user(inline={"connector": policy})
    conn_id = iam_moto.connection(key, monkeypatch)
    create_stream(iam_moto, stream)  # the lease table records the stream's identity

    with pytest.raises(ClientError) as error:
        CreateLeaseTableOperator(
            task_id="create_lease_table", application_name=app, stream_name=stream, aws_conn_id=conn_id
        ).execute(context={})
    assert error.value.response["Error"]["Code"] == "AccessDeniedException"
    assert f"dynamodb:TagResource on resource: {table_arn(app)}" in error.value.response["Error"]["Message"]


# -- a DynamoDB connector's check --------------------------------------------------------------


def dynamodb_policy(tables: list[str] | None, app: str, principal: str | None = None) -> dict[str, Any]:
    """A DynamoDB connector's policy; with ``principal``, the check's leave to simulate it too."""
    return policy_document(
        dynamodb_source_permissions(region=REGION, account_id=ACCOUNT, application_name=app, tables=tables)
        + (permission_check_permissions(principal) if principal else [])
    )


def check_dynamodb(tables: list[str] | None, app: str) -> dict[str, Any]:
    operator = CheckDynamoDBIamPermissionsOperator(
        task_id="check_iam_permissions", tables=tables, application_name=app, aws_conn_id=CONN_ID
    )
    result: dict[str, Any] = operator.execute(context={})
    return result


@pytest.mark.parametrize("tables", [["orders", "order-lines"], None], ids=["listed tables", "tables found by tags"])
def test_a_dynamodb_connectors_check_simulates_its_tables_streams_lease_table_and_tagging(
    iam_moto: IamMoto, monkeypatch: pytest.MonkeyPatch, tables: list[str] | None
) -> None:
    app = unique("ddb-app")
    policy = dynamodb_policy(tables, app)
    arn = connector_user(iam_moto, policy, monkeypatch)

    result = check_dynamodb(tables, app)

    assert result["principal_arn"] == arn and result["check_mode"] == "required"
    requirements = dynamodb_source_permissions(region=REGION, account_id=ACCOUNT, application_name=app, tables=tables)
    assert result["policy"] == dynamodb_policy(tables, app, principal=arn)
    assert {(d["action"], d["resource"]) for d in result["decisions"]} == set(simulation_pairs(requirements))
    assert {d["decision"] for d in result["decisions"]} == {"allowed"}
    actions = {d["action"] for d in result["decisions"]}
    assert {"dynamodb:Scan", "dynamodb:GetRecords", "dynamodb:UpdateItem"} <= actions
    assert ("tag:GetResources" in actions) is (tables is None)


def test_a_dynamodb_connector_without_scan_on_one_table_is_told_which_and_what_to_attach(
    iam_moto: IamMoto, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, tables = unique("ddb-app"), ["orders", "order-lines"]
    policy = dynamodb_policy(tables, app)
    scan = next(s for s in policy["Statement"] if "dynamodb:Scan" in s["Action"])
    scan["Action"].remove("dynamodb:Scan")
    arn = connector_user(iam_moto, policy, monkeypatch)

    with pytest.raises(AirflowFailException) as failure:
        check_dynamodb(tables, app)

    message = str(failure.value)
    assert listed(message) == [
        f"  - dynamodb:Scan on {table_arn('order-lines')} (implicitDeny)",
        f"  - dynamodb:Scan on {table_arn('orders')} (implicitDeny)",
    ]
    assert json.loads(message.split(f"Attach this policy to {arn}:\n", 1)[1]) == dynamodb_policy(
        tables, app, principal=arn
    )
