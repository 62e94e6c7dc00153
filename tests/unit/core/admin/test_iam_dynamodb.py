"""The least-privilege policy of a DynamoDB source: its tables, their streams, the tags, its lease table."""

from __future__ import annotations

import pytest

from airflow_kinesis_snowflake.core.admin.iam import (
    ACCOUNT_ID_PLACEHOLDER,
    IamPolicyError,
    dynamodb_source_permissions,
    policy_document,
    purpose_of,
    simulation_pairs,
)

DDB_ACCOUNT = "123456789012"
DDB_TABLE = "arn:aws:dynamodb:eu-west-1:123456789012:table/{}"


def test_a_dynamodb_source_with_listed_tables_is_granted_exactly_its_tables_streams_and_lease_table() -> None:
    requirements = dynamodb_source_permissions(
        region="eu-west-1", account_id=DDB_ACCOUNT, application_name="orders-ddb", tables=["orders", "lines"]
    )
    statements = {s["Sid"]: s for s in policy_document(requirements)["Statement"]}
    assert statements["DynamoDBSourceTables"]["Action"] == ["dynamodb:DescribeTable", "dynamodb:Scan"]
    assert statements["DynamoDBSourceTables"]["Resource"] == [DDB_TABLE.format("lines"), DDB_TABLE.format("orders")]
    assert statements["DynamoDBSourceStreams"]["Action"] == [
        "dynamodb:DescribeStream",
        "dynamodb:GetRecords",
        "dynamodb:GetShardIterator",
    ]
    assert statements["DynamoDBSourceStreams"]["Resource"] == [
        DDB_TABLE.format("lines") + "/stream/*",
        DDB_TABLE.format("orders") + "/stream/*",
    ]
    # A stream's ARN comes with DescribeTable (LatestStreamArn): ListStreams is not granted.
    assert "DynamoDBListStreams" not in statements
    assert statements["DynamoDBLeaseTable"]["Resource"] == [DDB_TABLE.format("orders-ddb")]
    assert "dynamodb:CreateTable" in statements["DynamoDBLeaseTable"]["Action"]
    assert "TaggingGetResources" not in statements
    # Nothing is written to a source table, and no Kinesis is granted.
    granted = {action for s in statements.values() for action in s["Action"]}
    assert not {a for a in granted if a.startswith("kinesis:")}
    source_pairs = {(a, r) for a, r in simulation_pairs(requirements) if "orders-ddb" not in r}
    assert {a for a, _ in source_pairs} == {
        "dynamodb:DescribeTable",
        "dynamodb:Scan",
        "dynamodb:DescribeStream",
        "dynamodb:GetShardIterator",
        "dynamodb:GetRecords",
    }


def test_a_dynamodb_source_discovering_by_tags_reads_the_tags_and_every_table_of_the_region() -> None:
    requirements = dynamodb_source_permissions(
        region="cn-north-1", account_id=ACCOUNT_ID_PLACEHOLDER, application_name="orders-ddb", tables=None
    )
    statements = {s["Sid"]: s for s in policy_document(requirements)["Statement"]}
    every = "arn:aws-cn:dynamodb:cn-north-1:${ACCOUNT_ID}:table/*"
    assert statements["DynamoDBSourceTables"]["Resource"] == [every]
    assert statements["DynamoDBSourceStreams"]["Resource"] == [every + "/stream/*"]
    assert statements["TaggingGetResources"]["Action"] == ["tag:GetResources"]
    assert all(purpose_of(requirements, a, r) for a, r in simulation_pairs(requirements))


def test_a_dynamodb_source_without_tables_or_with_a_bad_name_is_refused() -> None:
    with pytest.raises(IamPolicyError, match="at least one table"):
        dynamodb_source_permissions(region="eu-west-1", account_id=DDB_ACCOUNT, application_name="app", tables=[])
    with pytest.raises(IamPolicyError, match="table name 'a b'"):
        dynamodb_source_permissions(region="eu-west-1", account_id=DDB_ACCOUNT, application_name="app", tables=["a b"])
