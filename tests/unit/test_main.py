"""`python -m airflow_kinesis_snowflake policy FILE` prints the connector's IAM policy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from airflow_kinesis_snowflake.core.admin.iam import policy_document, required_permissions
from tests.emulators.servers import REPO_ROOT

ORDERS = REPO_ROOT / "dags" / "connectors" / "orders.yaml"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_kinesis_snowflake", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def write_connector(tmp_path: Path, **source: str) -> Path:
    fields = {
        "stream_name": "clicks",
        "region": "cn-north-1",
        "application_name": "clicks-app",
        "consumer_type": "ENHANCED_FAN_OUT",
    } | source
    body = "\n".join(f"  {k}: {v}" for k, v in fields.items())
    path = tmp_path / "clicks.yaml"
    path.write_text(
        f"connector_id: clicks\nsource:\n{body}\ndestination:\n  database: DB\n  schema: S\n  table: T\n",
        encoding="utf-8",
    )
    return path


def test_prints_the_policy_for_a_connector_file() -> None:
    result = run("policy", str(ORDERS), "--account-id", "210987654321")
    assert result.returncode == 0, result.stderr
    expected = policy_document(
        required_permissions(
            stream_name="orders",
            region="us-east-1",
            account_id="210987654321",
            application_name="orders-to-snowflake",
            consumer_type="SHARED_THROUGHPUT",
        )
    )
    assert json.loads(result.stdout) == expected


def test_account_defaults_to_a_placeholder() -> None:
    result = run("policy", str(ORDERS))
    assert result.returncode == 0, result.stderr
    resources = [r for s in json.loads(result.stdout)["Statement"] for r in s["Resource"]]
    assert resources == [
        "arn:aws:kinesis:us-east-1:${ACCOUNT_ID}:stream/orders",
        "arn:aws:dynamodb:us-east-1:${ACCOUNT_ID}:table/orders-to-snowflake",
    ]


def test_fan_out_in_china_with_the_migration_table(tmp_path: Path) -> None:
    result = run("policy", str(write_connector(tmp_path)), "--account-id", "123456789012", "--include-migration-table")
    assert result.returncode == 0, result.stderr
    statements = {s["Sid"]: s for s in json.loads(result.stdout)["Statement"]}
    assert statements["KinesisFanOutConsumer"]["Resource"] == [
        "arn:aws-cn:kinesis:cn-north-1:123456789012:stream/clicks/consumer/*"
    ]
    assert statements["DynamoDBMigrationTable"]["Resource"] == [
        "arn:aws-cn:dynamodb:cn-north-1:123456789012:table/clicks-app_migration"
    ]


def test_partition_option(tmp_path: Path) -> None:
    path = write_connector(tmp_path, region="us-east-1", consumer_type="SHARED_THROUGHPUT")
    result = run("policy", str(path), "--partition", "aws-us-gov")
    assert result.returncode == 0, result.stderr
    resources = [r for s in json.loads(result.stdout)["Statement"] for r in s["Resource"]]
    assert all(r.startswith("arn:aws-us-gov:") for r in resources)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = run("policy", str(missing))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {missing}: cannot read:")


def test_invalid_connector_names_the_field(tmp_path: Path) -> None:
    result = run("policy", str(write_connector(tmp_path, consumer_type="POLLING")))
    assert result.returncode == 1
    assert "invalid connector configuration" in result.stderr
    assert "source.consumer_type" in result.stderr
    assert result.stdout == ""


def test_bad_account_id_is_refused() -> None:
    result = run("policy", str(ORDERS), "--account-id", "1234")
    assert result.returncode == 1
    assert "account id '1234' must be 12 digits" in result.stderr


def test_a_command_is_required() -> None:
    result = run()
    assert result.returncode == 2
    assert "policy" in result.stderr


def test_maintenance_and_the_active_application_after_a_reset() -> None:
    result = run(
        "policy",
        str(ORDERS),
        "--account-id",
        "123456789012",
        "--include-maintenance",
        "--active-application-name",
        "orders-v2",
    )
    assert result.returncode == 0, result.stderr
    statements = {s["Sid"]: s for s in json.loads(result.stdout)["Statement"]}
    assert statements["DynamoDBLeaseTable"]["Resource"] == [
        "arn:aws:dynamodb:us-east-1:123456789012:table/orders-to-snowflake",
        "arn:aws:dynamodb:us-east-1:123456789012:table/orders-v2",
    ]
    assert statements["DynamoDBMaintenance"]["Resource"] == ["arn:aws:dynamodb:us-east-1:123456789012:table/*"]
    assert statements["DynamoDBListTables"]["Action"] == ["dynamodb:ListTables"]
    bad = run("policy", str(ORDERS), "--active-application-name", "x:y")
    assert bad.returncode == 1 and "table name 'x:y'" in bad.stderr
