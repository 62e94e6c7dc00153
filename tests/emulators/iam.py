"""A moto server that enforces IAM, with an administrator to set the scene.

Started with ``INITIAL_NO_AUTH_ACTION_COUNT``: the first requests create an administrator and its
access key; every later request is signed and authorised against the caller's policies, with
resources scoped to the stream, consumer or table ARN of the request (see moto_extensions.py).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.emulators.servers import AWS_KEY, REGION, start_moto

ACCOUNT = "123456789012"  # moto's default account id
CONN_ID = "aws_iam_check"
# Requests the administrator bootstrap makes before IAM is enforced.
BOOTSTRAP_REQUESTS = 3


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def allow_everything() -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}


@dataclass(frozen=True)
class Key:
    access_key_id: str
    secret_access_key: str
    session_token: str | None = None


@dataclass
class IamMoto:
    """A moto server enforcing IAM, with an administrator to set the scene."""

    endpoint: str
    admin: Key

    def client(self, service: str, key: Key | None = None) -> Any:
        key = key or self.admin
        return boto3.client(
            service,
            region_name=REGION,
            endpoint_url=self.endpoint,
            aws_access_key_id=key.access_key_id,
            aws_secret_access_key=key.secret_access_key,
            aws_session_token=key.session_token,
        )

    def user(self, *, inline: dict[str, Any] | None = None) -> tuple[str, Key]:
        """A new IAM user with inline policies; its ARN and an access key."""
        iam = self.client("iam")
        name = unique("user")
        arn = iam.create_user(UserName=name)["User"]["Arn"]
        for policy_name, document in (inline or {}).items():
            iam.put_user_policy(UserName=name, PolicyName=policy_name, PolicyDocument=json.dumps(document))
        access = iam.create_access_key(UserName=name)["AccessKey"]
        return arn, Key(access["AccessKeyId"], access["SecretAccessKey"])

    def connection(self, key: Key, monkeypatch: pytest.MonkeyPatch, conn_id: str = CONN_ID) -> str:
        extra: dict[str, Any] = {
            "region_name": REGION,
            "endpoint_url": self.endpoint,
            "service_config": {"sts": {"endpoint_url": self.endpoint}},
        }
        if key.session_token:
            extra["aws_session_token"] = key.session_token
        connection = {"conn_type": "aws", "login": key.access_key_id, "password": key.secret_access_key, "extra": extra}
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))
        return conn_id


@contextmanager
def stock_moto(work_dir: Path) -> Iterator[IamMoto]:
    """A moto server as docker-compose.yml runs the stock image: no SimulatePrincipalPolicy, no IAM enforcement."""
    server, port = start_moto(work_dir, env={"MOTO_WITHOUT_POLICY_SIMULATOR": "1"})
    try:
        yield IamMoto(f"http://127.0.0.1:{port}", Key(AWS_KEY, AWS_KEY))
    finally:
        server.stop()


@contextmanager
def enforcing_moto(work_dir: Path) -> Iterator[IamMoto]:
    """Run a moto server enforcing IAM; yields it with an administrator's key."""
    server, port = start_moto(work_dir, env={"INITIAL_NO_AUTH_ACTION_COUNT": str(BOOTSTRAP_REQUESTS)})
    try:
        endpoint = f"http://127.0.0.1:{port}"
        bootstrap = IamMoto(endpoint, Key(AWS_KEY, AWS_KEY)).client("iam")
        bootstrap.create_user(UserName="admin")
        bootstrap.put_user_policy(
            UserName="admin", PolicyName="everything", PolicyDocument=json.dumps(allow_everything())
        )
        access = bootstrap.create_access_key(UserName="admin")["AccessKey"]
        yield IamMoto(endpoint, Key(access["AccessKeyId"], access["SecretAccessKey"]))
    finally:
        server.stop()
