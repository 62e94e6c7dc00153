"""The command line's `policy` for a DynamoDB connector file: its tables, their streams, the tags, its lease table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_kinesis_snowflake.__main__ import main
from airflow_kinesis_snowflake.core.admin.iam import (
    dynamodb_source_permissions,
    permission_check_permissions,
    policy_document,
)


def write_dynamodb_connector(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "orders_ddb.yaml"
    path.write_text(
        "connector_id: orders_ddb\n"
        "source:\n"
        "  type: dynamodb\n"
        "  region: eu-west-1\n"
        "  application_name: orders-ddb\n"
        f"{source}"
        "destination:\n  database: ANALYTICS\n  schema: RAW\n",
        encoding="utf-8",
    )
    return path


def test_prints_the_policy_of_listed_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_dynamodb_connector(tmp_path, "  tables: [orders, lines]\n")
    role = "arn:aws:iam::210987654321:role/orders-ddb"
    assert main(["policy", str(path), "--account-id", "210987654321", "--principal", role]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == policy_document(
        dynamodb_source_permissions(
            region="eu-west-1", account_id="210987654321", application_name="orders-ddb", tables=["orders", "lines"]
        )
        # The IAM check of the provision DAG (iam_check: required by default) simulates the principal.
        + permission_check_permissions(role)
    )
    resources = {r for s in printed["Statement"] for r in s["Resource"]}
    table = "arn:aws:dynamodb:eu-west-1:210987654321:table/"
    assert resources == {
        f"{table}orders",
        f"{table}lines",
        f"{table}orders/stream/*",
        f"{table}lines/stream/*",
        f"{table}orders-ddb",
        role,
    }
    assert not any(a.startswith(("kinesis:", "tag:")) for s in printed["Statement"] for a in s["Action"])


def test_tables_discovered_by_tags_get_the_tagging_read_over_every_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_dynamodb_connector(tmp_path, "  ingestion_tag_key: sync-to-snowflake\n")
    assert main(["policy", str(path), "--partition", "aws-us-gov"]) == 0
    statements = {s["Sid"]: s for s in json.loads(capsys.readouterr().out)["Statement"]}
    every = "arn:aws-us-gov:dynamodb:eu-west-1:${ACCOUNT_ID}:table/*"
    assert statements["DynamoDBSourceTables"]["Resource"] == [every]
    assert statements["DynamoDBSourceStreams"]["Resource"] == [f"{every}/stream/*"]
    assert statements["TaggingGetResources"] == {
        "Sid": "TaggingGetResources",
        "Effect": "Allow",
        "Action": ["tag:GetResources"],
        "Resource": ["*"],
    }


def test_an_invalid_dynamodb_connector_names_the_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_dynamodb_connector(tmp_path, "  tables: ['no such/table']\n")
    assert main(["policy", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: {path}: invalid connector configuration")
    assert "source.tables" in err and "'no such/table' is not a DynamoDB table name" in err


@pytest.mark.parametrize(
    ("option", "why"),
    [
        (["--include-migration-table"], "no legacy KCL lease table"),
        (["--include-maintenance"], "reset, restore and clean-up DAGs do not act on a DynamoDB source"),
        (["--active-application-name", "other-app"], "not reset to a new application name"),
    ],
)
def test_kinesis_only_options_are_refused_for_a_dynamodb_connector(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str], why: str
) -> None:
    path = write_dynamodb_connector(tmp_path, "  tables: [orders]\n")
    assert main(["policy", str(path), *option]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: {path}: {option[0]} does not apply: ") and why in err
