"""The command line for a connector on a managed Spark platform: `policy` grants what the Airflow side
needs of EMR Serverless, `artifacts upload` refuses a connector that runs spark-submit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_kinesis_snowflake.__main__ import main
from tests.unit.test_config import _shipped_data
from tests.unit.test_main_dynamodb import write_dynamodb_connector

ROLE = "arn:aws:iam::210987654321:role/orders-emr-job"
EMR = {
    "platform": "emr_serverless",
    "emr_serverless": {
        "application_id": "00fabc123",
        "execution_role_arn": ROLE,
        "artifacts": "s3://jobs-bucket/orders",
    },
}
APPLICATION = "arn:aws:emr-serverless:{region}:210987654321:/applications/00fabc123"


def write_connector(tmp_path: Path, spark: dict[str, Any] | None) -> Path:
    data = _shipped_data()
    data["spark"] = spark or {}
    connector = tmp_path / "orders.yaml"
    connector.write_text(yaml.safe_dump(data))
    return connector


def statements(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
    assert main(["policy", str(path), "--account-id", "210987654321"]) == 0
    return {s["Sid"]: s for s in json.loads(capsys.readouterr().out)["Statement"]}


def test_the_policy_of_a_connector_on_emr_serverless_grants_its_job_runs_role_and_artifacts_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    region = _shipped_data()["source"]["region"]
    granted = statements(write_connector(tmp_path, EMR), capsys)

    application = APPLICATION.format(region=region)
    assert granted["EmrServerlessJobRuns"]["Resource"] == [application, f"{application}/jobruns/*"]
    assert sorted(granted["EmrServerlessJobRuns"]["Action"]) == [
        "emr-serverless:CancelJobRun",
        "emr-serverless:GetApplication",
        "emr-serverless:GetJobRun",
        "emr-serverless:StartApplication",
        "emr-serverless:StartJobRun",
    ]
    assert granted["EmrServerlessPassRole"]["Resource"] == [ROLE]
    assert granted["EmrServerlessPassRole"]["Condition"] == {
        "StringEquals": {"iam:PassedToService": "emr-serverless.amazonaws.com"}
    }
    assert granted["EmrServerlessArtifacts"]["Resource"] == ["arn:aws:s3:::jobs-bucket/orders/*"]
    assert sorted(granted["EmrServerlessArtifacts"]["Action"]) == ["s3:GetObject", "s3:PutObject"]
    assert granted["EmrServerlessArtifactsList"]["Resource"] == ["arn:aws:s3:::jobs-bucket"]
    assert granted["EmrServerlessArtifactsList"]["Condition"] == {"StringLike": {"s3:prefix": "orders/*"}}


def test_the_policy_of_a_dynamodb_connector_on_emr_serverless_grants_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_dynamodb_connector(tmp_path, "  tables: [orders]\n")
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**data, "spark": EMR}))
    granted = statements(path, capsys)
    assert granted["EmrServerlessJobRuns"]["Resource"][0] == APPLICATION.format(region="eu-west-1")
    assert granted["EmrServerlessPassRole"]["Resource"] == [ROLE]


def test_a_connector_that_runs_spark_submit_gets_no_emr_serverless_grant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    granted = statements(write_connector(tmp_path, None), capsys)
    actions = [a for s in granted.values() for a in s["Action"]]
    assert not [a for a in actions if a.startswith(("emr-serverless:", "s3:", "iam:PassRole"))]


def test_a_connector_that_runs_spark_submit_has_nothing_to_upload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    connector = write_connector(tmp_path, None)

    assert main(["artifacts", "upload", "--connector", str(connector)]) == 1
    error = capsys.readouterr().err
    assert f"{connector}: spark.platform is spark_submit" in error and "nothing to upload" in error
    assert "Set spark.platform: emr_serverless and spark.emr_serverless.artifacts" in error
    assert "or databricks and spark.databricks.artifacts" in error


def test_a_connector_file_with_a_problem_is_named_with_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    connector = write_connector(tmp_path, {"platform": "emr_serverless"})

    assert main(["artifacts", "upload", "--connector", str(connector)]) == 1
    error = capsys.readouterr().err
    assert str(connector) in error and "needs the spark.emr_serverless section" in error


GLUE_ROLE = "arn:aws:iam::210987654321:role/orders-glue-job"
GLUE = {
    "platform": "glue",
    "glue": {"job_name": "orders-to-snowflake", "role_arn": GLUE_ROLE, "artifacts": "s3://jobs-bucket/glue"},
}


def test_the_policy_of_a_connector_on_glue_grants_its_job_role_artifacts_and_driver_logs_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    region = _shipped_data()["source"]["region"]
    granted = statements(write_connector(tmp_path, GLUE), capsys)

    assert granted["GlueJobRuns"]["Resource"] == [f"arn:aws:glue:{region}:210987654321:job/orders-to-snowflake"]
    assert sorted(granted["GlueJobRuns"]["Action"]) == [
        "glue:BatchStopJobRun",
        "glue:CreateJob",
        "glue:GetJob",
        "glue:GetJobRun",
        "glue:GetJobRuns",
        "glue:StartJobRun",
        "glue:UpdateJob",
    ]
    assert granted["GluePassRole"]["Resource"] == [GLUE_ROLE]
    assert granted["GluePassRole"]["Condition"] == {"StringEquals": {"iam:PassedToService": "glue.amazonaws.com"}}
    assert granted["GlueArtifacts"]["Resource"] == ["arn:aws:s3:::jobs-bucket/glue/*"]
    assert granted["GlueArtifactsList"]["Condition"] == {"StringLike": {"s3:prefix": "glue/*"}}
    assert granted["GlueDriverLogs"]["Resource"] == [
        f"arn:aws:logs:{region}:210987654321:log-group:/aws-glue/jobs/*:log-stream:*"
    ]
    assert not [sid for sid in granted if sid.startswith("EmrServerless")]


def test_the_policy_of_a_dynamodb_connector_on_glue_grants_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_dynamodb_connector(tmp_path, "  tables: [orders]\n")
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**data, "spark": GLUE}))
    granted = statements(path, capsys)
    assert granted["GlueJobRuns"]["Resource"] == ["arn:aws:glue:eu-west-1:210987654321:job/orders-to-snowflake"]
    assert granted["GluePassRole"]["Resource"] == [GLUE_ROLE]


DATABRICKS = {
    "platform": "databricks",
    "databricks": {"existing_cluster_id": "0123-456789-abcdefgh", "artifacts": "/Volumes/main/jobs/artifacts"},
}


def test_the_policy_of_a_connector_on_databricks_grants_the_airflow_side_nothing_more(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The worker calls Databricks with the workspace's connection, and the files go to Databricks's
    # storage: the AWS side of a run is the cluster's own identity, not the connector's principal.
    on_databricks = statements(write_connector(tmp_path, DATABRICKS), capsys)
    assert on_databricks == statements(write_connector(tmp_path, None), capsys)
