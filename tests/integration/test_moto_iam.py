"""The moto extension's SimulatePrincipalPolicy evaluates policies as IAM does (moto server)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.conftest import unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration

STREAM = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
TABLE_A = "arn:aws:dynamodb:us-east-1:123456789012:table/a"
TABLE_B = "arn:aws:dynamodb:us-east-1:123456789012:table/b"


def statement(effect: str = "Allow", **fields: Any) -> dict[str, Any]:
    return {"Effect": effect, **fields}


def user_with(emulators: Emulators, *statements: dict[str, Any]) -> str:
    iam = emulators.boto3_client("iam")
    name = unique("sim")
    arn: str = iam.create_user(UserName=name)["User"]["Arn"]
    iam.put_user_policy(
        UserName=name,
        PolicyName="p",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": list(statements)}),
    )
    return arn


def decisions(
    emulators: Emulators, principal: str, actions: list[str], resources: list[str]
) -> dict[tuple[str, str], str]:
    response = emulators.boto3_client("iam").simulate_principal_policy(
        PolicySourceArn=principal, ActionNames=actions, ResourceArns=resources
    )
    assert response["IsTruncated"] is False
    return {(r["EvalActionName"], r["EvalResourceName"]): r["EvalDecision"] for r in response["EvaluationResults"]}


def test_wildcards_in_actions_and_resources(emulators: Emulators) -> None:
    principal = user_with(
        emulators,
        statement(Action="kinesis:Get*", Resource="arn:aws:kinesis:*:*:stream/ord?rs"),
        statement(Action="KINESIS:list?hards", Resource=STREAM),
    )
    got = decisions(
        emulators,
        principal,
        ["kinesis:GetRecords", "kinesis:ListShards", "kinesis:PutRecord"],
        [STREAM, STREAM + "2", STREAM.replace("orders", "Orders")],
    )
    assert got == {
        ("kinesis:GetRecords", STREAM): "allowed",
        ("kinesis:GetRecords", STREAM + "2"): "implicitDeny",  # '?' is exactly one character
        ("kinesis:GetRecords", STREAM.replace("orders", "Orders")): "implicitDeny",  # resources are case-sensitive
        ("kinesis:ListShards", STREAM): "allowed",  # actions are not
        ("kinesis:ListShards", STREAM + "2"): "implicitDeny",
        ("kinesis:ListShards", STREAM.replace("orders", "Orders")): "implicitDeny",
        ("kinesis:PutRecord", STREAM): "implicitDeny",
        ("kinesis:PutRecord", STREAM + "2"): "implicitDeny",
        ("kinesis:PutRecord", STREAM.replace("orders", "Orders")): "implicitDeny",
    }


def test_explicit_deny_wins_and_not_action_not_resource(emulators: Emulators) -> None:
    principal = user_with(
        emulators,
        statement(NotAction="kinesis:*", Resource="*"),
        statement("Deny", Action="dynamodb:*", NotResource=TABLE_A),
    )
    got = decisions(emulators, principal, ["dynamodb:GetItem", "kinesis:GetRecords"], [TABLE_A, TABLE_B])
    assert got == {
        ("dynamodb:GetItem", TABLE_A): "allowed",
        ("dynamodb:GetItem", TABLE_B): "explicitDeny",
        ("kinesis:GetRecords", TABLE_A): "implicitDeny",
        ("kinesis:GetRecords", TABLE_B): "implicitDeny",
    }


def test_matched_statements_and_conditions(emulators: Emulators) -> None:
    principal = user_with(
        emulators,
        statement(Action="dynamodb:GetItem", Resource=TABLE_A),
        statement(Action="dynamodb:PutItem", Resource=TABLE_A, Condition={"Bool": {"aws:SecureTransport": "true"}}),
    )
    results = emulators.boto3_client("iam").simulate_principal_policy(
        PolicySourceArn=principal, ActionNames=["dynamodb:GetItem", "dynamodb:PutItem"], ResourceArns=[TABLE_A]
    )["EvaluationResults"]
    get, put = results
    assert get["EvalDecision"] == "allowed"
    assert get["MatchedStatements"] == [{"SourcePolicyId": "p", "SourcePolicyType": "user"}]
    # No request context is simulated, so a conditional Allow does not apply.
    assert put["EvalDecision"] == "implicitDeny"
    assert put["MissingContextValues"] == ["aws:SecureTransport"]


def test_results_are_paginated(emulators: Emulators) -> None:
    principal = user_with(emulators, statement(Action="*", Resource="*"))
    actions = [f"kinesis:Action{i}" for i in range(5)]
    pages = list(
        emulators.boto3_client("iam")
        .get_paginator("simulate_principal_policy")
        .paginate(
            PolicySourceArn=principal, ActionNames=actions, ResourceArns=[STREAM], PaginationConfig={"PageSize": 2}
        )
    )
    assert [len(p["EvaluationResults"]) for p in pages] == [2, 2, 1]
    assert [r["EvalActionName"] for p in pages for r in p["EvaluationResults"]] == actions


def test_group_principal_and_policy_input_list(emulators: Emulators) -> None:
    iam = emulators.boto3_client("iam")
    group = unique("group")
    arn = iam.create_group(GroupName=group)["Group"]["Arn"]
    iam.put_group_policy(
        GroupName=group,
        PolicyName="reads",
        PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [statement(Action="kinesis:GetRecords", Resource=STREAM)]}
        ),
    )
    extra = json.dumps(
        {"Version": "2012-10-17", "Statement": [statement(Action="kinesis:ListShards", Resource=STREAM)]}
    )
    response = iam.simulate_principal_policy(
        PolicySourceArn=arn,
        ActionNames=["kinesis:GetRecords", "kinesis:ListShards"],
        ResourceArns=[STREAM],
        PolicyInputList=[extra],
    )
    assert [(r["EvalDecision"], r["MatchedStatements"]) for r in response["EvaluationResults"]] == [
        ("allowed", [{"SourcePolicyId": "reads", "SourcePolicyType": "group"}]),
        ("allowed", [{"SourcePolicyId": "PolicyInputList.1", "SourcePolicyType": "none"}]),
    ]


@pytest.mark.parametrize(
    ("principal", "code"),
    [
        ("arn:aws:iam::123456789012:user/nobody-here", "NoSuchEntity"),
        ("arn:aws:iam::123456789012:role/no-such-role", "NoSuchEntity"),
        ("arn:aws:s3:::a-bucket", "InvalidInput"),
    ],
)
def test_unknown_principals_are_aws_errors(emulators: Emulators, principal: str, code: str) -> None:
    with pytest.raises(ClientError) as error:
        emulators.boto3_client("iam").simulate_principal_policy(
            PolicySourceArn=principal, ActionNames=["kinesis:ListShards"]
        )
    assert error.value.response["Error"]["Code"] == code
