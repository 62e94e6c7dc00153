"""The IAM actions and ARNs a connector needs, and the least-privilege policy rendered from them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.parsers import ResponseParserError

from airflow_kinesis_snowflake.core.admin.iam import (
    ACCOUNT_ID_PLACEHOLDER,
    EXPLICIT_DENY,
    IMPLICIT_DENY,
    PRINCIPAL_ARN_PLACEHOLDER,
    CheckCannotRun,
    Decision,
    IamCheckMode,
    IamPolicyError,
    Requirement,
    UnsimulatablePrincipalError,
    all_tables_arn,
    check_mode_from_skip_if_denied,
    consumers_arn,
    describe_missing,
    partition_for_region,
    partition_of,
    permission_check_permissions,
    policy_document,
    principal_arn,
    purpose_of,
    required_permissions,
    resolve_check_mode,
    simulation_pairs,
    stream_arn,
    table_arn,
    why_check_cannot_run,
)
from airflow_kinesis_snowflake.core.model import ConsumerType

ACCOUNT = "123456789012"
STREAM = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
CONSUMERS = "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/*"
LEASE_TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/orders-to-snowflake"
MIGRATION_TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/orders-to-snowflake_migration"

STREAM_READ = {
    "kinesis:ListShards",
    "kinesis:GetShardIterator",
    "kinesis:GetRecords",
    "kinesis:DescribeStreamSummary",
}
FAN_OUT_ON_STREAM = {
    "kinesis:RegisterStreamConsumer",
    "kinesis:DescribeStreamConsumer",
}
FAN_OUT_ON_CONSUMERS = {
    "kinesis:SubscribeToShard",
    "kinesis:DescribeStreamConsumer",
    "kinesis:DeregisterStreamConsumer",
}
TABLE = {
    "dynamodb:DescribeTable",
    "dynamodb:CreateTable",
    "dynamodb:TagResource",
    "dynamodb:DescribeTimeToLive",
    "dynamodb:UpdateTimeToLive",
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:Scan",
    "dynamodb:DeleteItem",
}
# A migration deletes the KCL table whose name the lease table takes.
MIGRATION_ON_LEASE_TABLE = {"dynamodb:DeleteTable"}
MIGRATION = {
    "dynamodb:DescribeTable",
    "dynamodb:CreateTable",
    "dynamodb:TagResource",
    "dynamodb:BatchWriteItem",
    "dynamodb:Scan",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:DeleteItem",
    "dynamodb:DeleteTable",
}


def requirements(
    consumer_type: str = ConsumerType.SHARED_THROUGHPUT,
    migration: bool = False,
    include_maintenance: bool = False,
    **overrides: str,
) -> list[Requirement]:
    params: dict[str, Any] = {
        "stream_name": "orders",
        "region": "us-east-1",
        "account_id": ACCOUNT,
        "application_name": "orders-to-snowflake",
    } | overrides
    return required_permissions(
        consumer_type=consumer_type,
        include_migration_table=migration,
        include_maintenance=include_maintenance,
        **params,
    )


def pairs_of(actions: set[str], resource: str) -> set[tuple[str, str]]:
    return {(action, resource) for action in actions}


@pytest.mark.parametrize(
    ("consumer_type", "migration", "expected"),
    [
        (ConsumerType.SHARED_THROUGHPUT, False, pairs_of(STREAM_READ, STREAM) | pairs_of(TABLE, LEASE_TABLE)),
        (
            ConsumerType.SHARED_THROUGHPUT,
            True,
            pairs_of(STREAM_READ, STREAM)
            | pairs_of(TABLE | MIGRATION_ON_LEASE_TABLE, LEASE_TABLE)
            | pairs_of(MIGRATION, MIGRATION_TABLE),
        ),
        (
            ConsumerType.ENHANCED_FAN_OUT,
            False,
            pairs_of(STREAM_READ | FAN_OUT_ON_STREAM, STREAM)
            | pairs_of(FAN_OUT_ON_CONSUMERS, CONSUMERS)
            | pairs_of(TABLE, LEASE_TABLE),
        ),
        (
            ConsumerType.ENHANCED_FAN_OUT,
            True,
            pairs_of(STREAM_READ | FAN_OUT_ON_STREAM, STREAM)
            | pairs_of(FAN_OUT_ON_CONSUMERS, CONSUMERS)
            | pairs_of(TABLE | MIGRATION_ON_LEASE_TABLE, LEASE_TABLE)
            | pairs_of(MIGRATION, MIGRATION_TABLE),
        ),
    ],
    ids=["shared", "shared+migration", "fan-out", "fan-out+migration"],
)
def test_exact_action_resource_pairs(consumer_type: str, migration: bool, expected: set[tuple[str, str]]) -> None:
    pairs = simulation_pairs(requirements(consumer_type, migration))
    assert set(pairs) == expected
    assert len(pairs) == len(expected)  # no pair twice


def test_shared_throughput_policy_document() -> None:
    assert policy_document(requirements()) == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "KinesisStream",
                "Effect": "Allow",
                "Action": [
                    "kinesis:DescribeStreamSummary",
                    "kinesis:GetRecords",
                    "kinesis:GetShardIterator",
                    "kinesis:ListShards",
                ],
                "Resource": [STREAM],
            },
            {
                "Sid": "DynamoDBLeaseTable",
                "Effect": "Allow",
                "Action": [
                    "dynamodb:BatchGetItem",
                    "dynamodb:CreateTable",
                    "dynamodb:DeleteItem",
                    "dynamodb:DescribeTable",
                    "dynamodb:DescribeTimeToLive",
                    "dynamodb:GetItem",
                    "dynamodb:PutItem",
                    "dynamodb:Scan",
                    "dynamodb:TagResource",
                    "dynamodb:UpdateItem",
                    "dynamodb:UpdateTimeToLive",
                ],
                "Resource": [LEASE_TABLE],
            },
        ],
    }


def test_fan_out_with_migration_policy_document() -> None:
    document = policy_document(requirements(ConsumerType.ENHANCED_FAN_OUT, migration=True))
    statements = {s["Sid"]: s for s in document["Statement"]}
    assert list(statements) == [
        "KinesisStream",
        "KinesisFanOutConsumer",
        "DynamoDBLeaseTable",
        "DynamoDBMigrationTable",
    ]
    assert statements["KinesisStream"]["Action"] == sorted(STREAM_READ | FAN_OUT_ON_STREAM)
    assert statements["KinesisStream"]["Resource"] == [STREAM]
    assert statements["KinesisFanOutConsumer"]["Action"] == sorted(FAN_OUT_ON_CONSUMERS)
    assert statements["KinesisFanOutConsumer"]["Resource"] == [CONSUMERS]
    assert statements["DynamoDBLeaseTable"]["Action"] == sorted(TABLE | MIGRATION_ON_LEASE_TABLE)
    assert statements["DynamoDBMigrationTable"]["Action"] == sorted(MIGRATION)
    assert statements["DynamoDBMigrationTable"]["Resource"] == [MIGRATION_TABLE]
    assert all(s["Effect"] == "Allow" for s in document["Statement"])


def test_nothing_is_granted_on_wildcard_resources_or_unused_services() -> None:
    for requirement in requirements(ConsumerType.ENHANCED_FAN_OUT, migration=True):
        assert all(r.startswith("arn:aws:") for r in requirement.resources)
        assert all(a.split(":")[0] in ("kinesis", "dynamodb") for a in requirement.actions)
    # The provider lists shards instead of describing the stream; DescribeStreamSummary gives the ARN.
    actions = {a for a, _ in simulation_pairs(requirements(ConsumerType.ENHANCED_FAN_OUT, migration=True))}
    assert "kinesis:DescribeStream" not in actions
    # Deleting tables is only for a migration.
    assert "dynamodb:DeleteTable" not in {a for a, _ in simulation_pairs(requirements(ConsumerType.ENHANCED_FAN_OUT))}


def test_every_requirement_has_a_purpose() -> None:
    reqs = requirements(ConsumerType.ENHANCED_FAN_OUT, migration=True)
    assert all(r.purpose.strip() for r in reqs)
    assert "TagResource" in purpose_of(reqs, "dynamodb:TagResource", LEASE_TABLE)
    assert "orders-to-snowflake" in purpose_of(reqs, "kinesis:RegisterStreamConsumer", STREAM)
    assert purpose_of(reqs, "kinesis:PutRecord", STREAM) == ""


def test_arn_formats() -> None:
    where = {"partition": "aws", "region": "eu-west-1", "account_id": ACCOUNT}
    assert stream_arn(stream_name="s.1", **where) == "arn:aws:kinesis:eu-west-1:123456789012:stream/s.1"
    assert consumers_arn(stream_name="s", **where) == "arn:aws:kinesis:eu-west-1:123456789012:stream/s/consumer/*"
    assert table_arn(table_name="app_x-1", **where) == "arn:aws:dynamodb:eu-west-1:123456789012:table/app_x-1"


@pytest.mark.parametrize(
    ("region", "partition"),
    [("us-east-1", "aws"), ("cn-north-1", "aws-cn"), ("cn-northwest-1", "aws-cn"), ("us-gov-west-1", "aws-us-gov")],
)
def test_partition_follows_the_region(region: str, partition: str) -> None:
    assert partition_for_region(region) == partition
    pairs = simulation_pairs(requirements(region=region))
    assert {r for _, r in pairs} == {
        f"arn:{partition}:kinesis:{region}:{ACCOUNT}:stream/orders",
        f"arn:{partition}:dynamodb:{region}:{ACCOUNT}:table/orders-to-snowflake",
    }


def test_explicit_partition_wins() -> None:
    pairs = simulation_pairs(
        required_permissions(
            stream_name="s", region="cn-north-1", account_id=ACCOUNT, application_name="app", partition="aws-cn"
        )
    )
    assert all(r.startswith("arn:aws-cn:") for _, r in pairs)


def test_account_placeholder_is_kept_for_the_reader() -> None:
    document = policy_document(requirements(account_id=ACCOUNT_ID_PLACEHOLDER))
    assert document["Statement"][0]["Resource"] == ["arn:aws:kinesis:us-east-1:${ACCOUNT_ID}:stream/orders"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"account_id": "12345"}, "account id '12345' must be 12 digits"),
        ({"region": "mars"}, "region 'mars' is not an AWS region"),
        ({"partition": "azure"}, "partition 'azure' is not an AWS partition"),
        ({"stream_name": "a/b"}, "stream name 'a/b'"),
        ({"application_name": "x:y"}, "table name 'x:y'"),
    ],
)
def test_bad_parameters_are_named(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(IamPolicyError, match=message):
        requirements(ConsumerType.SHARED_THROUGHPUT, False, **overrides)


def test_unknown_consumer_type_is_refused() -> None:
    with pytest.raises(IamPolicyError, match="'POLLING' is not one of SHARED_THROUGHPUT, ENHANCED_FAN_OUT"):
        requirements("POLLING")


@pytest.mark.parametrize(
    ("caller", "principal"),
    [
        ("arn:aws:iam::123456789012:user/alice", "arn:aws:iam::123456789012:user/alice"),
        ("arn:aws:iam::123456789012:user/team/alice", "arn:aws:iam::123456789012:user/team/alice"),
        ("arn:aws:iam::123456789012:role/ingest", "arn:aws:iam::123456789012:role/ingest"),
        ("arn:aws:sts::123456789012:assumed-role/ingest/airflow-task", "arn:aws:iam::123456789012:role/ingest"),
        ("arn:aws-cn:sts::123456789012:assumed-role/ingest/s", "arn:aws-cn:iam::123456789012:role/ingest"),
    ],
)
def test_principal_of_a_caller(caller: str, principal: str) -> None:
    assert principal_arn(caller) == principal


@pytest.mark.parametrize(
    "caller",
    ["arn:aws:iam::123456789012:root", "arn:aws:sts::123456789012:federated-user/bob", "not-an-arn"],
)
def test_callers_that_cannot_be_simulated(caller: str) -> None:
    with pytest.raises(IamPolicyError):
        principal_arn(caller)


def test_partition_of() -> None:
    assert partition_of("arn:aws-us-gov:sts::123456789012:assumed-role/r/s") == "aws-us-gov"
    with pytest.raises(IamPolicyError):
        partition_of("role/r")


def test_missing_permissions_are_listed_with_the_policy() -> None:
    reqs = requirements()
    policy = policy_document(reqs)
    decisions = [
        Decision("kinesis:ListShards", STREAM, "allowed"),
        Decision("kinesis:GetRecords", STREAM, IMPLICIT_DENY),
        Decision("dynamodb:PutItem", LEASE_TABLE, EXPLICIT_DENY, ("user policy no-writes",)),
    ]
    text = describe_missing("arn:aws:iam::123456789012:user/u", decisions, reqs, policy)
    lines = text.splitlines()
    assert lines[0] == "arn:aws:iam::123456789012:user/u lacks 2 of the 3 permissions this connector needs:"
    assert f"  - kinesis:GetRecords on {STREAM} (implicitDeny)" in lines
    assert any(
        line.startswith(f"  - dynamodb:PutItem on {LEASE_TABLE} (explicitDeny by user policy no-writes")
        for line in lines
    )
    assert not any("ListShards on" in line for line in lines)
    assert any("needed to: Read each planned shard range" in line for line in lines)
    rendered = text.split("Attach this policy to arn:aws:iam::123456789012:user/u:\n", 1)[1]
    assert json.loads(rendered) == policy


ALL_TABLES = "arn:aws:dynamodb:us-east-1:123456789012:table/*"
MAINTENANCE_ON_STREAM = {"kinesis:DescribeStreamSummary", "kinesis:ListStreamConsumers"}
MAINTENANCE_ON_TABLES = {
    "dynamodb:DescribeTable",
    "dynamodb:CreateTable",
    "dynamodb:TagResource",
    "dynamodb:DescribeTimeToLive",
    "dynamodb:UpdateTimeToLive",
    "dynamodb:ListTagsOfResource",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:Scan",
    "dynamodb:DeleteTable",
}


@pytest.mark.parametrize("consumer_type", [ConsumerType.SHARED_THROUGHPUT, ConsumerType.ENHANCED_FAN_OUT])
def test_maintenance_adds_its_own_grants_and_leaves_the_ingest_ones_alone(consumer_type: str) -> None:
    base = set(simulation_pairs(requirements(consumer_type)))
    with_maintenance = set(simulation_pairs(requirements(consumer_type, include_maintenance=True)))
    assert base < with_maintenance
    assert with_maintenance - base == (
        pairs_of(MAINTENANCE_ON_STREAM, STREAM) - base
        | pairs_of({"kinesis:DeregisterStreamConsumer"}, CONSUMERS) - base
        | pairs_of(MAINTENANCE_ON_TABLES, ALL_TABLES)
        | {("dynamodb:ListTables", "*")}
    )
    # The base policy's statements keep their exact resources: maintenance has statements of its own.
    base_statements = {s["Sid"]: s for s in policy_document(requirements(consumer_type))["Statement"]}
    maintenance = {
        s["Sid"]: s for s in policy_document(requirements(consumer_type, include_maintenance=True))["Statement"]
    }
    assert maintenance["DynamoDBLeaseTable"] == base_statements["DynamoDBLeaseTable"]
    assert maintenance["DynamoDBMaintenance"]["Resource"] == [ALL_TABLES]
    assert maintenance["DynamoDBListTables"] == {
        "Sid": "DynamoDBListTables",
        "Effect": "Allow",
        "Action": ["dynamodb:ListTables"],
        "Resource": ["*"],
    }


def test_maintenance_grants_say_why() -> None:
    reqs = requirements(include_maintenance=True)
    assert "delete and create the lease table again" in purpose_of(reqs, "dynamodb:DeleteTable", ALL_TABLES)
    assert "tagged" in purpose_of(reqs, "dynamodb:ListTagsOfResource", ALL_TABLES)
    assert "deregister" in purpose_of(reqs, "kinesis:DeregisterStreamConsumer", CONSUMERS)
    assert all_tables_arn(partition="aws", region="us-east-1", account_id=ACCOUNT) == ALL_TABLES


# -- when the check cannot run: what it says, without AWS -------------------------------------------

CALLER = "arn:aws:iam::123456789012:user/ingest"


def client_error(code: str, message: str = "no") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "SimulatePrincipalPolicy")


def test_the_deprecated_boolean_maps_to_a_mode() -> None:
    assert check_mode_from_skip_if_denied(True) is IamCheckMode.BEST_EFFORT
    assert check_mode_from_skip_if_denied(False) is IamCheckMode.REQUIRED
    assert [m.value for m in IamCheckMode] == ["required", "best_effort", "off"]


def test_a_principal_iam_cannot_simulate() -> None:
    root = "arn:aws:iam::123456789012:root"
    with pytest.raises(UnsimulatablePrincipalError) as err:
        principal_arn(root)

    cannot_run = why_check_cannot_run(err.value, caller_arn=root)

    assert cannot_run is not None
    assert cannot_run.reason.startswith(f"{root} is the account root user, which IAM's SimulatePrincipalPolicy")
    assert "python -m airflow_kinesis_snowflake policy" in cannot_run.fix


@pytest.mark.parametrize("code", ["AccessDenied", "AccessDeniedException"])
def test_simulation_denied_to_the_caller(code: str) -> None:
    cannot_run = why_check_cannot_run(client_error(code, "not authorized"), caller_arn=CALLER, principal=CALLER)

    assert cannot_run is not None
    assert cannot_run.reason.startswith(f"{CALLER} may not call iam:SimulatePrincipalPolicy")
    assert f"(principal {CALLER}, an IAM user). AWS said: {code}: not authorized" in cannot_run.reason
    assert cannot_run.fix == f"allow iam:SimulatePrincipalPolicy on {CALLER} to enable this check"


def test_a_role_under_a_path_is_not_found() -> None:
    session = "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Ingest/alice"
    role = "arn:aws:iam::123456789012:role/AWSReservedSSO_Ingest"

    cannot_run = why_check_cannot_run(client_error("NoSuchEntity"), caller_arn=session, principal=role)

    assert cannot_run is not None
    assert cannot_run.reason.startswith(f"IAM has no principal {role} (the caller is {session}, an assumed-role")
    assert "/aws-reserved/" in cannot_run.reason
    assert "a role without a path" in cannot_run.fix


@pytest.mark.parametrize("code", ["InvalidAction", "NotImplemented", "UnknownOperation", "UnsupportedOperation"])
def test_an_endpoint_that_does_not_serve_the_simulator(code: str) -> None:
    cannot_run = why_check_cannot_run(client_error(code), caller_arn=CALLER, principal=CALLER)

    assert cannot_run is not None
    assert cannot_run.reason.startswith("the IAM endpoint does not serve SimulatePrincipalPolicy")
    assert "IAM endpoint that has the policy simulator" in cannot_run.fix


def test_an_endpoint_that_answers_unlike_aws() -> None:
    error = ResponseParserError("Unable to parse response (syntax error), invalid XML received.\nbody...")

    cannot_run = why_check_cannot_run(error, caller_arn=CALLER, principal=CALLER, endpoint="http://moto:5000")

    assert cannot_run is not None
    assert cannot_run.reason.startswith("the IAM endpoint http://moto:5000 did not answer SimulatePrincipalPolicy")
    assert "stock motoserver/moto image" in cannot_run.reason
    assert cannot_run.reason.endswith(
        "botocore said: ResponseParserError: Unable to parse response (syntax error), invalid XML received."
    )


def test_an_endpoint_that_cannot_be_reached() -> None:
    error = EndpointConnectionError(endpoint_url="https://iam.amazonaws.com/")

    cannot_run = why_check_cannot_run(error, caller_arn=CALLER, principal=CALLER, endpoint="https://iam.amazonaws.com")

    assert cannot_run is not None
    assert cannot_run.reason.startswith("the IAM endpoint https://iam.amazonaws.com cannot be reached")
    assert "IAM has no VPC endpoint" in cannot_run.reason
    assert "botocore said: EndpointConnectionError: Could not connect" in cannot_run.reason


@pytest.mark.parametrize(
    "error", [client_error("Throttling"), client_error("InvalidInput"), ValueError("a bug"), KeyError("EvalDecision")]
)
def test_other_errors_are_failures_of_their_own(error: Exception) -> None:
    assert why_check_cannot_run(error, caller_arn=CALLER, principal=CALLER) is None


def test_required_fails_saying_how_to_go_on_and_best_effort_warns() -> None:
    cannot_run = CheckCannotRun("REASON", "allow X on Y")

    assert cannot_run.message(IamCheckMode.BEST_EFFORT) == "REASON\nTo have it checked: allow X on Y."
    required = cannot_run.message(IamCheckMode.REQUIRED)
    assert required.startswith("REASON\nThe IAM permission check could not run, and check_mode is 'required'.")
    assert "To go on: allow X on Y; or set check_mode='best_effort'" in required
    assert "source.iam_check: best_effort" in required and "'off'" in required


def test_the_check_mode_is_required_by_default_and_the_deprecated_boolean_says_what_to_write() -> None:
    assert resolve_check_mode(None) == (IamCheckMode.REQUIRED, None)
    assert resolve_check_mode("best_effort") == (IamCheckMode.BEST_EFFORT, None)
    assert resolve_check_mode(None, True) == (
        IamCheckMode.BEST_EFFORT,
        "skip_if_simulation_denied is deprecated; use check_mode='best_effort'",
    )
    with pytest.raises(ValueError, match=r"check_mode must be one of required, best_effort, off \(got 'strict'\)"):
        resolve_check_mode("strict")
    with pytest.raises(ValueError, match="set only check_mode"):
        resolve_check_mode("off", False)


def test_the_permission_check_may_simulate_only_its_own_principal() -> None:
    role = "arn:aws:iam::123456789012:role/connector"
    for principal in (role, "arn:aws:sts::123456789012:assumed-role/connector/worker-1"):
        (requirement,) = permission_check_permissions(principal)
        assert (requirement.sid, requirement.actions, requirement.resources) == (
            "IamPermissionCheck",
            ("iam:SimulatePrincipalPolicy",),
            (role,),
        )
        assert "iam_check" in requirement.purpose
    user = "arn:aws:iam::123456789012:user/team/loader"
    assert permission_check_permissions(user)[0].resources == (user,)
    assert permission_check_permissions(PRINCIPAL_ARN_PLACEHOLDER)[0].resources == ("${PRINCIPAL_ARN}",)
    with pytest.raises(UnsimulatablePrincipalError, match="the account root user"):
        permission_check_permissions("arn:aws:iam::123456789012:root")
    with pytest.raises(IamPolicyError, match="is not an IAM or STS ARN"):
        permission_check_permissions("*")
