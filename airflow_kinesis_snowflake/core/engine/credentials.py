"""The job's credentials: how AWS and Snowflake credentials reach a Spark job's driver, for every source.

Credentials reach the driver in one of two ways, never as an argument or a Spark setting:

* in client deploy mode only, in the spark-submit process's environment: the AWS credentials
  under names of the job's own (:data:`JOB_AWS_CREDENTIAL_ENV`: ``KINESIS_SNOWFLAKE_AWS_ACCESS_KEY_ID``
  ...), the region and endpoints as the standard ``AWS_*`` variables, and ``SNOWFLAKE_CONNECTION_JSON``
  with the snowflake-connector-python keyword arguments. Never as ``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY`` or ``AWS_SESSION_TOKEN``: Spark copies those from its environment into the
  Hadoop configuration (``fs.s3a.access.key``, ``fs.s3a.secret.key``, ``fs.s3a.session.token``, ...),
  which a YARN client uploads unredacted (``__spark_hadoop_conf__.xml``) to the staging directory and
  every container;
* with ``--snowflake-connection-ref`` (the driver's own identity, the only way in cluster deploy
  mode): AWS through boto3's default credential chain (EMR role, IRSA, instance profile), and the
  Snowflake connection read from that AWS Secrets Manager secret.

The driver hands them to its tasks inside the serialised task. It prints no secret, and whatever it
writes to stdout or stderr has every secret value it holds replaced by ``***``
(:func:`~..redaction.redacted_output`).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from airflow_kinesis_snowflake.core.keys import private_key_der
from airflow_kinesis_snowflake.core.redaction import SECRET_PARAMS, secret_forms
from airflow_kinesis_snowflake.core.snowflake_limits import bounded

SNOWFLAKE_ENV = "SNOWFLAKE_CONNECTION_JSON"
AWS_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# The AWS credential variables Spark reads from its environment (SparkHadoopUtil) and copies into
# the Hadoop configuration of every application: the job's credentials never travel under them.
SPARK_READ_AWS_CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# The names the job's AWS credentials reach the driver under instead (client deploy mode), by the
# standard name each stands for (the key of JobCredentials.aws).
JOB_AWS_CREDENTIAL_ENV = {name: f"KINESIS_SNOWFLAKE_{name}" for name in SPARK_READ_AWS_CREDENTIAL_ENV}
# Where a job using its own AWS identity is (no credentials): region and endpoints only.
AWS_LOCATION_ENV = ("AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_DYNAMODB")


def job_credential_environment(aws: Mapping[str, str]) -> dict[str, str]:
    """``aws`` (standard ``AWS_*`` names) as the job's environment: its credentials under the job's
    own names (:data:`JOB_AWS_CREDENTIAL_ENV`), everything else as it is."""
    return {JOB_AWS_CREDENTIAL_ENV.get(name, name): value for name, value in aws.items()}


def snowflake_params_from_secret(secret_string: str, secret_id: str) -> dict[str, Any]:
    """Connector keyword arguments from the JSON object of a Secrets Manager secret.

    The object holds snowflake-connector-python keyword arguments (``account``, ``user``, ``role``,
    ``warehouse``, ``host`` ...). A key pair is given as ``private_key`` (PEM text, or base64 DER),
    with ``private_key_passphrase`` when it is encrypted, or as ``private_key_der_base64``. The
    timeouts it does not set take their defaults (:func:`~.snowflake_limits.bounded`).

    :raises ValueError: the secret is not such an object, or a timeout in it is not a whole number
        of seconds above 0; the message never quotes the secret.
    """
    try:
        params = json.loads(secret_string)
    except ValueError:
        raise ValueError(
            f"secret {secret_id!r} is not JSON: it must hold a JSON object of connector arguments"
        ) from None
    if not isinstance(params, dict):
        raise ValueError(
            f"secret {secret_id!r} holds a JSON {type(params).__name__}, not an object of connector arguments"
        )
    key = params.pop("private_key", None)
    passphrase = params.pop("private_key_passphrase", None)
    if key:
        try:
            der = private_key_der(key, passphrase)
        except ValueError as err:
            raise ValueError(f"secret {secret_id!r}: {err}") from None
        params["private_key_der_base64"] = base64.b64encode(der).decode("ascii")
    return bounded(params, f"secret {secret_id!r}")


@dataclass(frozen=True)
class JobCredentials:
    """AWS and Snowflake credentials of the job, as its driver got them.

    From the spark-submit process's environment (:meth:`from_env`): AWS credentials (under the job's
    own names, :data:`JOB_AWS_CREDENTIAL_ENV`), region and endpoints, and the Snowflake connection.
    With the driver's own identity (:meth:`from_driver_identity`): the Snowflake connection from an
    AWS Secrets Manager secret and no AWS credential, only the region and endpoints; each executor
    then uses its own AWS identity (boto3's default chain), which it must have.

    They travel to executors inside the serialised task, never on a command line or in a Spark
    setting.
    """

    aws: dict[str, str] = field(repr=False)
    snowflake: dict[str, Any] = field(repr=False)
    # Values to keep out of the job's output beyond those of ``aws`` and ``snowflake`` (a secret's
    # fields in the form it held them, such as a PEM key and its passphrase).
    extra_secrets: tuple[str, ...] = field(default=(), repr=False)

    def secret_values(self) -> list[str]:
        """Every secret value the job holds, in each form it may be printed in (:func:`secret_forms`)."""
        values = [self.aws[k] for k in AWS_SECRET_ENV if self.aws.get(k)]
        values += [str(self.snowflake[k]) for k in SECRET_PARAMS if self.snowflake.get(k)]
        values += self.extra_secrets
        return sorted({form for value in values for form in secret_forms(value)}, key=len, reverse=True)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> JobCredentials:
        env = os.environ if environ is None else environ
        raw = env.get(SNOWFLAKE_ENV)
        if not raw:
            raise RuntimeError(f"{SNOWFLAKE_ENV} is not set: the Snowflake connection reaches the job through it")
        snowflake: dict[str, Any] = json.loads(raw)
        aws = {name: env[job] for name, job in JOB_AWS_CREDENTIAL_ENV.items() if env.get(job)}
        aws.update({k: env[k] for k in AWS_LOCATION_ENV if env.get(k)})
        return cls(aws=aws, snowflake=snowflake)

    @classmethod
    def from_driver_identity(
        cls, secret_id: str, region: str | None = None, environ: Mapping[str, str] | None = None
    ) -> JobCredentials:
        """The driver's own AWS identity, and the Snowflake connection from a Secrets Manager secret.

        The secret is read with boto3's default credential chain (instance profile, EMR role,
        IRSA, environment). No AWS credential is handed to the tasks: each executor uses its own
        identity the same way.

        :param secret_id: name or ARN of the secret; see :func:`snowflake_params_from_secret`.
        :param region: the secret's region when the environment names none (``AWS_DEFAULT_REGION``,
            ``AWS_REGION``); a secret given by ARN is read in the ARN's region.
        """
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError

        env = os.environ if environ is None else environ
        if secret_id.startswith("arn:") and len(secret_id.split(":")) > 3:
            region = secret_id.split(":")[3] or region
        else:
            region = env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION") or region
        try:
            client = boto3.client("secretsmanager", region_name=region)
            secret = client.get_secret_value(SecretId=secret_id)
        except (BotoCoreError, ClientError) as err:
            raise RuntimeError(f"the Snowflake connection could not be read from secret {secret_id!r}: {err}") from err
        if "SecretString" not in secret:
            raise RuntimeError(f"secret {secret_id!r} holds binary data, not a JSON object of connector arguments")
        snowflake = snowflake_params_from_secret(secret["SecretString"], secret_id)
        held = json.loads(secret["SecretString"])  # an object: snowflake_params_from_secret refuses others
        extra_secrets = tuple(str(held[k]) for k in SECRET_PARAMS if held.get(k))
        return cls(
            aws={k: env[k] for k in AWS_LOCATION_ENV if env.get(k)}, snowflake=snowflake, extra_secrets=extra_secrets
        )

    @classmethod
    def for_job(cls, snowflake_connection_ref: str | None, region: str | None) -> JobCredentials:
        """:meth:`from_driver_identity` with a secret's name or ARN, else :meth:`from_env`."""
        if snowflake_connection_ref:
            return cls.from_driver_identity(snowflake_connection_ref, region)
        return cls.from_env()

    def kinesis_client(self, region: str) -> Any:
        from botocore.config import Config

        from airflow_kinesis_snowflake.core.sources.readers import kinesis_client

        # Standard retries back off on ProvisionedThroughputExceeded / LimitExceeded throttling.
        return kinesis_client(
            region_name=region,
            aws_access_key_id=self.aws.get("AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=self.aws.get("AWS_SECRET_ACCESS_KEY"),
            aws_session_token=self.aws.get("AWS_SESSION_TOKEN"),
            endpoint_url=self.aws.get("AWS_ENDPOINT_URL_KINESIS"),
            config=Config(retries={"mode": "standard", "max_attempts": 10}),
        )

    def dynamodb_client(self, region: str) -> Any:
        """A DynamoDB client for the lease table (continuous mode: the driver runs the protocol)."""
        import boto3

        return boto3.client(
            "dynamodb",
            region_name=region,
            aws_access_key_id=self.aws.get("AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=self.aws.get("AWS_SECRET_ACCESS_KEY"),
            aws_session_token=self.aws.get("AWS_SESSION_TOKEN"),
            endpoint_url=self.aws.get("AWS_ENDPOINT_URL_DYNAMODB"),
        )

    def connect_snowflake(self) -> Any:
        """A new Snowflake connection, every request and statement of it bounded
        (:func:`~.snowflake_limits.bounded`); the caller closes it."""
        import snowflake.connector

        params = bounded(self.snowflake, "the job's Snowflake connection")
        if "private_key_der_base64" in params:
            params["private_key"] = base64.b64decode(params.pop("private_key_der_base64"))
        return snowflake.connector.connect(**params)

    @contextmanager
    def snowflake_connection(self) -> Iterator[Any]:
        conn = self.connect_snowflake()
        try:
            yield conn
        finally:
            conn.close()
