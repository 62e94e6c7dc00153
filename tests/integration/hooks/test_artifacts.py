"""The job's files on S3 for a managed Spark platform: under the hash of their bytes, uploaded once."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from airflow.providers.amazon.aws.hooks.s3 import S3Hook

from airflow_kinesis_snowflake.__main__ import main
from airflow_kinesis_snowflake.hooks.artifacts import upload_artifacts, upload_job_artifacts
from airflow_kinesis_snowflake.hooks.glue import GlueSubmitter
from airflow_kinesis_snowflake.hooks.spark import DEFAULT_APPLICATION
from tests.conftest import unique
from tests.emulators import Emulators
from tests.unit.test_config import _shipped_data

pytestmark = pytest.mark.integration


def keys(emulators: Emulators, bucket: str) -> list[str]:
    s3 = emulators.boto3_client("s3")
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


def test_the_same_bytes_get_the_same_key_once_and_new_bytes_a_new_key(
    aws_connections: Emulators, tmp_path: Path
) -> None:
    bucket = unique("artifacts")
    aws_connections.boto3_client("s3").create_bucket(Bucket=bucket)
    s3, location = S3Hook(aws_conn_id="aws_default"), f"s3://{bucket}/jobs/"
    job = tmp_path / "job.py"
    job.write_text("print('v1')\n")
    digest = hashlib.sha256(job.read_bytes()).hexdigest()

    (first,) = upload_artifacts(s3, location, [job])
    (again,) = upload_artifacts(s3, location, [job])
    job.write_text("print('v2')\n")  # a new version: a new key, the old file left as it was
    (second,) = upload_artifacts(s3, location, [job])

    assert first.uri == f"s3://{bucket}/jobs/sha256-{digest}/job.py" and first.uploaded
    assert again.uri == first.uri and not again.uploaded
    assert second.uri != first.uri and second.uploaded
    assert keys(aws_connections, bucket) == sorted([first.uri.split("/", 3)[3], second.uri.split("/", 3)[3]])
    body = aws_connections.boto3_client("s3").get_object(Bucket=bucket, Key=first.uri.split("/", 3)[3])["Body"]
    assert body.read() == b"print('v1')\n"


def test_the_package_zip_is_built_the_same_every_time_so_a_worker_uploads_nothing_new(
    aws_connections: Emulators,
) -> None:
    bucket = unique("artifacts")
    aws_connections.boto3_client("s3").create_bucket(Bucket=bucket)
    s3, location = S3Hook(aws_conn_id="aws_default"), f"s3://{bucket}/jobs"

    first = upload_job_artifacts(s3, location, DEFAULT_APPLICATION)
    stored = keys(aws_connections, bucket)
    second = upload_job_artifacts(s3, location, DEFAULT_APPLICATION)

    assert [a.uploaded for a in first] == [True, True] and [a.uploaded for a in second] == [False, False]
    assert [a.uri for a in first] == [a.uri for a in second]
    assert [a.uri.rsplit("/", 1)[1] for a in first] == ["kinesis_to_snowflake.py", "kinesis_snowflake_core.zip"]
    assert keys(aws_connections, bucket) == stored and len(stored) == 2


def test_the_cli_uploads_a_connector_s_files_and_prints_their_uris(
    aws_connections: Emulators, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = unique("artifacts")
    aws_connections.boto3_client("s3").create_bucket(Bucket=bucket)
    data = _shipped_data()
    data["spark"] = {
        "platform": "emr_serverless",
        "emr_serverless": {
            "application_id": "00fabcdefghijklm",
            "execution_role_arn": "arn:aws:iam::123456789012:role/job",
            "artifacts": f"s3://{bucket}/orders",
        },
    }
    connector = tmp_path / "orders.yaml"
    connector.write_text(yaml.safe_dump(data))

    assert main(["artifacts", "upload", "--connector", str(connector)]) == 0
    first = capsys.readouterr().out.splitlines()
    assert main(["artifacts", "upload", "--connector", str(connector)]) == 0
    second = capsys.readouterr().out.splitlines()

    uris = [line.split("\t")[0] for line in first]
    assert [line.split("\t")[1] for line in first] == ["uploaded", "uploaded"]
    assert second == [f"{uri}\talready there" for uri in uris]
    assert [uri.rsplit("/", 1)[1] for uri in uris] == ["kinesis_to_snowflake.py", "kinesis_snowflake_core.zip"]
    assert all(uri.startswith(f"s3://{bucket}/orders/sha256-") for uri in uris)


def test_the_cli_uploads_a_glue_connector_s_script_and_zip_where_its_tasks_look_for_them(
    aws_connections: Emulators, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = unique("artifacts")
    aws_connections.boto3_client("s3").create_bucket(Bucket=bucket)
    data = _shipped_data()
    data["spark"] = {
        "platform": "glue",
        "glue": {
            "job_name": "orders",
            "role_arn": "arn:aws:iam::123456789012:role/job",
            "artifacts": f"s3://{bucket}/g",
        },
    }
    connector = tmp_path / "orders.yaml"
    connector.write_text(yaml.safe_dump(data))

    assert main(["artifacts", "upload", "--connector", str(connector)]) == 0
    uris = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()]

    # The Glue job's script (for every source) and the zip, where a task of the connector uploads them.
    assert [uri.rsplit("/", 1)[1] for uri in uris] == ["glue_to_snowflake.py", "kinesis_snowflake_core.zip"]
    s3 = S3Hook(aws_conn_id="aws_default")
    task = upload_job_artifacts(s3, f"s3://{bucket}/g", GlueSubmitter.script(DEFAULT_APPLICATION))
    assert [(a.uri, a.uploaded) for a in task] == [(uri, False) for uri in uris]
