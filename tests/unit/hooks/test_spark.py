"""SparkJobSubmitHook: how the job's driver gets credentials, decided from the Spark connection."""

from __future__ import annotations

import inspect
import io
import json
import os
import subprocess
import sys
import threading
import uuid
import zipfile
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.providers.apache.spark.hooks import spark_submit
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from airflow_kinesis_snowflake.compat import AirflowException, redact
from airflow_kinesis_snowflake.core.batch import BatchOutcome, BatchRefused, BatchSettings
from airflow_kinesis_snowflake.core.continuous import ContinuousRun
from airflow_kinesis_snowflake.core.engine.credentials import (
    SPARK_READ_AWS_CREDENTIAL_ENV,
    JobCredentials,
    job_credential_environment,
)
from airflow_kinesis_snowflake.core.engine.wire import decode, encode
from airflow_kinesis_snowflake.core.load.snowflake_sink import KINESIS_SUPPORT_NAMES, OutcomeKey, SupportObjects
from airflow_kinesis_snowflake.core.model import BatchResult, Checkpoint, Destination, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import BatchPlan, ShardRange
from airflow_kinesis_snowflake.environment import SparkSubmitNotFoundError
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.hooks.spark import DEFAULT_APPLICATION, STANDALONE_PYTHON_CLUSTER, SparkJobSubmitHook
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from tests.unit.core.test_dynamodb_job import plan as table_plan

#: The published documentation (airflow_kinesis_snowflake.DOCS_URL), which messages point at.
SITE = "https://airflow-provider-kinesis-snowflake.github.io/airflow-provider-kinesis-snowflake/"


def spark_connection(monkeypatch: pytest.MonkeyPatch, host: str, **extra: Any) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_UNIT", json.dumps({"conn_type": "spark", "host": host, "extra": extra}))
    return "spark_unit"


def test_the_hooks_former_name_still_imports_with_a_deprecation_warning() -> None:
    from airflow_kinesis_snowflake.hooks import spark

    with pytest.warns(AirflowProviderDeprecationWarning, match="renamed SparkJobSubmitHook"):
        former = spark.KinesisJobSubmitHook
    assert former is SparkJobSubmitHook
    with pytest.raises(AttributeError, match="NoSuchHook"):
        spark.NoSuchHook  # noqa: B018


def test_env_vars_are_refused_they_would_become_spark_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = spark_connection(monkeypatch, "yarn")
    with pytest.raises(ValueError, match="env_vars would reach the driver as Spark settings"):
        SparkJobSubmitHook(conn_id=conn_id, env_vars={"AWS_SECRET_ACCESS_KEY": "x"})


def test_driver_identity_needs_the_secret_that_holds_the_snowflake_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = spark_connection(monkeypatch, "yarn", driver_identity=True)
    with pytest.raises(ValueError, match="driver_identity needs snowflake_connection_ref"):
        SparkJobSubmitHook(conn_id=conn_id)


def test_the_secret_name_is_not_masked_in_logs_and_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    # A short secret name, a common word: masked, it would hide that word in every log line.
    name = f"sf{uuid.uuid4().hex[:6]}"
    conn_id = spark_connection(monkeypatch, "local[2]", driver_identity="true", snowflake_connection_ref=name)

    hook = SparkJobSubmitHook(conn_id=conn_id)  # reads the connection, which registers its secrets

    assert hook.driver_identity and hook.snowflake_connection_ref == name
    assert redact(f"reading the Snowflake connection from secret {name}") == (
        f"reading the Snowflake connection from secret {name}"
    )
    assert str(redact(RuntimeError(f"secret {name!r} holds binary data"))) == f"secret {name!r} holds binary data"
    hook.check_credential_delivery()  # client mode: nothing to refuse


def test_snowflake_secret_id_still_works_deprecated_and_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"kinesis/snowflake-{uuid.uuid4().hex[:8]}"
    conn_id = spark_connection(monkeypatch, "yarn", driver_identity=True, snowflake_secret_id=name)

    with pytest.warns(AirflowProviderDeprecationWarning, match="rename it 'snowflake_connection_ref'"):
        hook = SparkJobSubmitHook(conn_id=conn_id)

    assert hook.snowflake_connection_ref == name
    # Why it is deprecated: Airflow masks the value of any extra whose name says "secret".
    assert redact(f"secret {name}") == "secret ***"


CLUSTER_MASTERS = ["yarn", "k8s://https://k8s.example:443"]
IDENTITY = {"driver_identity": True, "snowflake_connection_ref": "kinesis/sf"}


@pytest.fixture
def kube(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """SparkSubmitHook refuses a k8s:// master without the Kubernetes provider, which it only uses to
    track and delete a driver pod: a stand-in client that records the pods deleted."""
    deleted: list[tuple[str, str]] = []

    class Client:
        def delete_namespaced_pod(self, name: str, namespace: str, **_: Any) -> None:
            deleted.append((namespace, name))

    stand_in = SimpleNamespace(get_kube_client=Client, ApiException=Exception)
    monkeypatch.setattr(spark_submit, "kube_client", stand_in, raising=False)
    monkeypatch.setitem(sys.modules, "kubernetes", SimpleNamespace(client=SimpleNamespace(V1DeleteOptions=dict)))
    return deleted


@pytest.mark.parametrize("master", CLUSTER_MASTERS)
@pytest.mark.parametrize(
    ("extra", "conf"),
    [({"deploy-mode": "cluster"}, None), ({}, {"spark.submit.deployMode": "cluster"})],
    ids=["connection deploy-mode", "spark.submit.deployMode"],
)
def test_cluster_deploy_mode_without_driver_identity_is_refused_naming_the_extras(
    monkeypatch: pytest.MonkeyPatch,
    kube: list[tuple[str, str]],
    master: str,
    extra: dict[str, Any],
    conf: dict[str, Any] | None,
) -> None:
    conn_id = spark_connection(monkeypatch, master, **extra)
    hook = SparkJobSubmitHook(conn_id=conn_id, conf=conf)
    assert hook.deploy_mode == "cluster"

    with pytest.raises(AirflowException) as raised:
        hook.submit("job.py")

    message = str(raised.value)
    assert f"Spark connection 'spark_unit' (master {master}) uses cluster deploy mode without the extras" in message
    assert '"driver_identity": true and "snowflake_connection_ref"' in message
    assert "its own AWS identity (EMR role, IRSA, instance profile)" in message
    assert 'or use client deploy mode (the extra "deploy-mode": "client"' in message
    assert f"({SITE}spark/, {SITE}connections/)" in message
    assert hook._submit_sp is None  # refused before spark-submit ran


def spark_core_jar() -> Path:
    import pyspark

    (jar,) = (Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar")
    return jar


@pytest.mark.parametrize("extra", [{}, IDENTITY], ids=["", "with driver_identity"])
def test_standalone_cluster_mode_is_refused_with_sparks_own_reason(
    monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any]
) -> None:
    conn_id = spark_connection(monkeypatch, "spark://spark-master:7077", **{"deploy-mode": "cluster", **extra})
    hook = SparkJobSubmitHook(conn_id=conn_id)

    with pytest.raises(AirflowException) as raised:
        hook.check_credential_delivery()

    message = str(raised.value)
    assert "uses cluster deploy mode on a Spark standalone cluster, which Spark refuses for a Python" in message
    assert f'"{STANDALONE_PYTHON_CLUSTER}"' in message
    assert 'use client deploy mode (the extra "deploy-mode": "client"' in message
    assert f"For a driver on the cluster, use a YARN (EMR) or Kubernetes master ({SITE}spark/)" in message
    # The reason quoted is the one spark-submit of the installed Spark gives.
    with zipfile.ZipFile(spark_core_jar()) as jar:
        submit_class = jar.read("org/apache/spark/deploy/SparkSubmit.class")
    assert STANDALONE_PYTHON_CLUSTER.encode() in submit_class


def test_local_master_in_cluster_mode_is_refused_as_spark_refuses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = spark_connection(monkeypatch, "local[2]", **{"deploy-mode": "cluster", **IDENTITY})
    with pytest.raises(AirflowException, match=r"which Spark refuses with a local master .*: use client deploy mode"):
        SparkJobSubmitHook(conn_id=conn_id).check_credential_delivery()
    with zipfile.ZipFile(spark_core_jar()) as jar:
        assert b'Cluster deploy mode is not compatible with master "local"' in jar.read(
            "org/apache/spark/deploy/SparkSubmit.class"
        )


def test_without_spark_submit_a_submission_is_refused_naming_the_extra_that_brings_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    hook = SparkJobSubmitHook(conn_id=spark_connection(monkeypatch, "local[2]"))
    # A worker without pyspark and without a Spark distribution on its PATH.
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))

    with pytest.raises(SparkSubmitNotFoundError) as raised:
        hook.check_submission()

    assert "spark-submit is not on the PATH" in str(raised.value)
    assert "`pip install 'airflow-provider-kinesis-snowflake[spark-submit]'`" in str(raised.value)


DETACHING: list[tuple[str, dict[str, Any], str]] = [
    ("yarn", {"conf": {"spark.yarn.submit.waitAppCompletion": "false"}}, "spark.yarn.submit.waitAppCompletion"),
    (
        "k8s://https://k8s.example:443",
        {"conf": {"spark.kubernetes.submission.waitAppCompletion": "False"}},
        "spark.kubernetes.submission.waitAppCompletion",
    ),
]
# Arguments that recent Spark providers have, to return once the application is submitted.
DETACHING += [
    (master, {argument: True}, f"{argument}=True")
    for master, argument in [
        ("yarn", "yarn_track_via_rm_api"),
        ("k8s://https://k8s.example:443", "track_driver_via_k8s_api"),
    ]
    if argument in inspect.signature(spark_submit.SparkSubmitHook.__init__).parameters
]


@pytest.mark.parametrize(("master", "kwargs", "refused"), DETACHING)
def test_cluster_mode_settings_that_return_before_the_driver_finished_are_refused(
    monkeypatch: pytest.MonkeyPatch, kube: list[tuple[str, str]], master: str, kwargs: dict[str, Any], refused: str
) -> None:
    conn_id = spark_connection(monkeypatch, master, **{"deploy-mode": "cluster", **IDENTITY})
    hook = SparkJobSubmitHook(conn_id=conn_id, **kwargs)

    with pytest.raises(AirflowException) as raised:
        hook.check_credential_delivery()

    assert f"{refused} makes spark-submit return before the application finished" in str(raised.value)
    assert f"so that spark-submit waits for the driver ({SITE}spark/)" in str(raised.value)


def job_connections(monkeypatch: pytest.MonkeyPatch) -> tuple[KinesisStreamHook, KinesisSnowflakeHook]:
    """An AWS connection with keys, and a Snowflake one whose key cannot be decrypted (wrong passphrase)."""
    aws = {
        "conn_type": "aws",
        "login": "AKIAJOBENVTEST000001",
        "password": "job-env-secret-key-3Xq9",
        "extra": {"region_name": "eu-west-1", "endpoint_url": "http://127.0.0.1:4566"},
    }
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"the-right-passphrase"),
    ).decode()
    snowflake = {
        "conn_type": "snowflake",
        "login": "KINESIS_INGEST",
        "extra": {"account": "myorg", "private_key_content": encrypted, "private_key_passphrase": "wrong-one"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_AWS_JOB_ENV", json.dumps(aws))
    monkeypatch.setenv("AIRFLOW_CONN_SNOWFLAKE_JOB_ENV", json.dumps(snowflake))
    return KinesisStreamHook(aws_conn_id="aws_job_env"), KinesisSnowflakeHook(snowflake_conn_id="snowflake_job_env")


def test_with_driver_identity_the_job_is_told_where_aws_is_and_no_credential_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kinesis, snowflake = job_connections(monkeypatch)
    conn_id = spark_connection(monkeypatch, "local[2]", driver_identity=True, snowflake_connection_ref="kinesis/sf")

    env = SparkJobSubmitHook(conn_id=conn_id).job_environment(kinesis, snowflake)

    # The Snowflake key is never decrypted: its wrong passphrase goes unnoticed.
    assert env == {
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL_KINESIS": "http://127.0.0.1:4566",
        "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:4566",
        "AWS_ENDPOINT_URL_SECRETS_MANAGER": "http://127.0.0.1:4566",
    }


def test_without_driver_identity_the_job_gets_both_connections_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    kinesis, snowflake = job_connections(monkeypatch)
    conn_id = spark_connection(monkeypatch, "local[2]")
    hook = SparkJobSubmitHook(conn_id=conn_id)

    with pytest.raises(ValueError, match="connection 'snowflake_job_env': the private key could not be read"):
        hook.job_environment(kinesis, snowflake)

    monkeypatch.setenv(
        "AIRFLOW_CONN_SNOWFLAKE_JOB_ENV",
        json.dumps({"conn_type": "snowflake", "login": "U", "password": "pw-4f1c2e9a", "extra": {"account": "a"}}),
    )
    env = hook.job_environment(kinesis, snowflake)
    # The AWS credentials under names Spark does not copy into its Hadoop configuration.
    assert env["KINESIS_SNOWFLAKE_AWS_ACCESS_KEY_ID"] == "AKIAJOBENVTEST000001"
    assert env["KINESIS_SNOWFLAKE_AWS_SECRET_ACCESS_KEY"] == "job-env-secret-key-3Xq9"
    assert not set(SPARK_READ_AWS_CREDENTIAL_ENV) & set(env) and env["AWS_DEFAULT_REGION"] == "eu-west-1"
    assert json.loads(env["SNOWFLAKE_CONNECTION_JSON"])["password"] == "pw-4f1c2e9a"


def test_in_client_mode_no_aws_credential_reaches_spark_submit_under_a_name_spark_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spark copies AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN from its environment into
    the Hadoop configuration (fs.s3a.*), which a YARN client uploads unredacted: the job's go under names of
    its own, and this worker's own are left out."""
    kinesis, snowflake = job_connections(monkeypatch)
    monkeypatch.setenv(
        "AIRFLOW_CONN_SNOWFLAKE_JOB_ENV",
        json.dumps({"conn_type": "snowflake", "login": "U", "password": "pw-5d2a9c1e", "extra": {"account": "a"}}),
    )
    for name in SPARK_READ_AWS_CREDENTIAL_ENV:
        monkeypatch.setenv(name, f"worker-own-{name.lower()}")
    submitted: list[dict[str, str]] = []

    def submit(self: spark_submit.SparkSubmitHook, application: str = "", **kwargs: Any) -> None:
        submitted.append(kwargs["env"])

    monkeypatch.setattr(spark_submit.SparkSubmitHook, "submit", submit)
    for master in ("local[2]", "yarn"):
        hook = SparkJobSubmitHook(conn_id=spark_connection(monkeypatch, master, **{"deploy-mode": "client"}))
        hook.submit_job(DEFAULT_APPLICATION, application_args=[], aws=kinesis, snowflake=snowflake)

        env = submitted.pop()
        assert not set(SPARK_READ_AWS_CREDENTIAL_ENV) & set(env), "an AWS credential under a name Spark reads"
        assert not [v for v in env.values() if v.startswith("worker-own-")]
        # The driver reads them back under the standard names, for its boto3 clients only.
        aws = JobCredentials.from_env(env).aws
        assert (aws["AWS_ACCESS_KEY_ID"], aws["AWS_SECRET_ACCESS_KEY"]) == (
            "AKIAJOBENVTEST000001",
            "job-env-secret-key-3Xq9",
        )
        assert "AWS_SESSION_TOKEN" not in aws and aws["AWS_DEFAULT_REGION"] == "eu-west-1"


def test_a_session_token_reaches_the_driver_under_the_jobs_own_name() -> None:
    aws = {
        "AWS_ACCESS_KEY_ID": "AKIA1",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_SESSION_TOKEN": "t",
        "AWS_DEFAULT_REGION": "r",
    }
    env = job_credential_environment(aws)
    assert env == {
        "KINESIS_SNOWFLAKE_AWS_ACCESS_KEY_ID": "AKIA1",
        "KINESIS_SNOWFLAKE_AWS_SECRET_ACCESS_KEY": "s",
        "KINESIS_SNOWFLAKE_AWS_SESSION_TOKEN": "t",
        "AWS_DEFAULT_REGION": "r",
    }
    assert JobCredentials.from_env({**env, "SNOWFLAKE_CONNECTION_JSON": "{}"}).aws == aws
    # Standard names in the driver's environment are not the job's credentials.
    assert JobCredentials.from_env({**aws, "SNOWFLAKE_CONNECTION_JSON": "{}"}).aws == {"AWS_DEFAULT_REGION": "r"}


def test_a_yarn_client_driver_whose_identity_is_this_workers_aws_variables_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With driver_identity the driver keeps this worker's environment: Spark would copy its AWS_* keys."""
    yarn = spark_connection(monkeypatch, "yarn", **{"deploy-mode": "client", **IDENTITY})
    SparkJobSubmitHook(conn_id=yarn).check_credential_delivery()  # an instance profile, a role: fine
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWORKER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "worker-secret")

    with pytest.raises(AirflowException) as raised:
        SparkJobSubmitHook(conn_id=yarn).check_credential_delivery()

    message = str(raised.value)
    assert "Spark connection 'spark_unit' (master yarn, client deploy mode) has \"driver_identity\": true" in message
    assert "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY" in message and "worker-secret" not in message
    assert "uploads unredacted to the HDFS staging directory" in message and f"{SITE}spark/" in message
    # Elsewhere the driver's Hadoop configuration stays in its own process.
    local = spark_connection(monkeypatch, "local[2]", **IDENTITY)
    SparkJobSubmitHook(conn_id=local).check_credential_delivery()


def test_the_py_files_zip_holds_every_module_of_core_and_nothing_of_airflow(tmp_path: Any) -> None:
    import zipfile
    from pathlib import Path

    import airflow_kinesis_snowflake
    from airflow_kinesis_snowflake.hooks.spark import DEFAULT_APPLICATION, package_core

    package = Path(airflow_kinesis_snowflake.__file__).parent
    with zipfile.ZipFile(package_core(tmp_path)) as zf:
        names = set(zf.namelist())
    core = {f"airflow_kinesis_snowflake/{p.relative_to(package).as_posix()}" for p in (package / "core").rglob("*.py")}
    assert "airflow_kinesis_snowflake/core/state/leases.py" in core  # subpackages too
    assert names == {"airflow_kinesis_snowflake/__init__.py", "airflow_kinesis_snowflake/registry.py", *core}
    # The file submitted is the packaged entry point, which runs the engine's driver.
    assert DEFAULT_APPLICATION == str(package / "spark_jobs" / "kinesis_to_snowflake.py")
    assert "from airflow_kinesis_snowflake.core.engine.driver import main" in Path(DEFAULT_APPLICATION).read_text()


def test_a_driver_with_only_the_py_files_zip_finds_the_job_of_every_registered_source(tmp_path: Any) -> None:
    """A driver on a cluster node may have no wheel installed: the zip holds what finds each source's job."""
    from airflow_kinesis_snowflake.hooks.spark import package_core
    from airflow_kinesis_snowflake.registry import SOURCE_TYPES

    archive = package_core(tmp_path)
    code = (
        f"import sys; sys.path.insert(0, {str(archive)!r}); "
        "import airflow_kinesis_snowflake as p; from airflow_kinesis_snowflake.core.engine.driver import source_job; "
        f"print(p.__file__); print(*[source_job(s).__name__ for s in {SOURCE_TYPES!r}])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path).stdout

    where, jobs = out.splitlines()
    assert where.startswith(str(archive))  # imported from the zip, not the installed package
    assert jobs.split() == ["kinesis_job", "dynamodb_job"]


def batch_plan(shards: int = 2) -> BatchPlan:
    return BatchPlan(
        application_name="orders-to-snowflake",
        generation_id="0123456789abcdef",
        stream_name="orders",
        region="eu-west-1",
        destination=Destination("ANALYTICS", "RAW", "ORDERS"),
        cutoff=datetime(2026, 1, 31, 12, tzinfo=UTC),
        max_records_per_call=10000,
        ranges=tuple(
            ShardRange(f"shardId-{i:012d}", Checkpoint(str(4959 + i)), StartPosition(InitialPosition.TRIM_HORIZON), 10)
            for i in range(shards)
        ),
    )


def outcome_of(plan: BatchPlan) -> BatchResult:
    return BatchResult(plan.batch_id, "stage/dir", True, 3, 0, (), datetime.now(UTC), {})


@pytest.mark.parametrize(
    ("master", "extra", "namespace_setting"),
    [
        ("yarn", {"queue": "ingest"}, None),
        ("k8s://https://k8s.example:443", {"namespace": "ingest"}, "spark.kubernetes.namespace=ingest"),
    ],
    ids=["yarn", "k8s"],
)
def test_the_cluster_mode_command_carries_the_plan_and_no_credential(
    monkeypatch: pytest.MonkeyPatch,
    kube: list[tuple[str, str]],
    master: str,
    extra: dict[str, Any],
    namespace_setting: str | None,
) -> None:
    kinesis, snowflake = job_connections(monkeypatch)
    monkeypatch.setenv(
        "AIRFLOW_CONN_SNOWFLAKE_JOB_ENV",
        json.dumps({"conn_type": "snowflake", "login": "U", "password": "pw-7c1e0b3d", "extra": {"account": "a"}}),
    )
    credentials = ["AKIAJOBENVTEST000001", "job-env-secret-key-3Xq9", "pw-7c1e0b3d"]
    conn_id = spark_connection(monkeypatch, master, **{"deploy-mode": "cluster", **IDENTITY, **extra})
    hook = SparkJobSubmitHook(conn_id=conn_id, conf={"spark.executor.memory": "2g"})
    submitted: list[tuple[list[str], dict[str, str]]] = []

    def submit(self: spark_submit.SparkSubmitHook, application: str = "", **kwargs: Any) -> None:
        # What SparkSubmitHook.submit would start: the command it builds, in the environment given.
        submitted.append((self._build_spark_submit_command(application), kwargs["env"]))

    monkeypatch.setattr(spark_submit.SparkSubmitHook, "submit", submit)
    plan = batch_plan()
    read: list[OutcomeKey] = []

    def read_outcome(
        self: SparkJobSubmitHook, destination: Destination, key: OutcomeKey, sf: Any, **kwargs: Any
    ) -> BatchResult:
        assert destination == plan.destination and kwargs["names"] == KINESIS_SUPPORT_NAMES
        read.append(key)
        return outcome_of(plan)

    monkeypatch.setattr(SparkJobSubmitHook, "read_outcome", read_outcome)

    result = hook.run_batch(plan, kinesis=kinesis, snowflake=snowflake)

    ((command, env),) = submitted
    assert result.batch_id == plan.batch_id and result.rows_loaded == 3  # what read_outcome read
    text = " ".join(command)
    assert not [c for c in credentials if c in text], "a credential is on the command line"
    # spark-submit inherits this process's environment (where the test defines its connections); the
    # hook adds the region and endpoints only (and the interpreter's bin to PATH, for spark-submit), and
    # the log4j2 file that keeps spark-submit's JVM at Spark's log level.
    added = {k: v for k, v in env.items() if os.environ.get(k) != v and k != "PATH"}
    assert set(added) == {
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL_KINESIS",
        "AWS_ENDPOINT_URL_DYNAMODB",
        "AWS_ENDPOINT_URL_SECRETS_MANAGER",
        "SPARK_SUBMIT_OPTS",
    }
    assert added["SPARK_SUBMIT_OPTS"].split()[-1].startswith("-Dlog4j.configurationFile=")
    assert not [c for c in credentials if c in json.dumps(added)], "a credential is in spark-submit's environment"
    settings = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    assert not [
        s
        for s in settings
        if s.startswith(("spark.yarn.appMasterEnv.", "spark.kubernetes.driverEnv.", "spark.executorEnv."))
    ]
    assert command[command.index("--deploy-mode") + 1] == "cluster"
    if namespace_setting:
        assert namespace_setting in settings
    # The application's arguments: the plan itself, this submission's attempt, the secret's name.
    args = command[command.index(DEFAULT_APPLICATION) + 1 :]
    assert args[0::2] == ["--plan", "--attempt", "--snowflake-connection-ref"]
    assert BatchPlan.from_work(decode(args[1])) == plan
    assert read == [OutcomeKey(plan.application_name, plan.generation_id, plan.batch_id, args[3])]
    assert args[5] == "kinesis/sf"
    # No file of this worker but the shipped code: no plan or result path, which a remote driver could not read.
    assert not [a for a in command if a.endswith(".json") or "/plan" in a] and "--result" not in command
    (py_files,) = [command[i + 1] for i, a in enumerate(command) if a == "--py-files"]
    assert py_files.endswith("kinesis_snowflake_core.zip")
    # The driver on the cluster uses its own interpreter, not a path of this worker's.
    assert env.get("PYSPARK_PYTHON") == os.environ.get("PYSPARK_PYTHON")


def test_the_logged_command_names_the_plan_by_batch_and_length(
    monkeypatch: pytest.MonkeyPatch, spark_submit_fails: Path, hook_log: Callable[[], list[tuple[str, str]]]
) -> None:
    kinesis, snowflake = job_connections(monkeypatch)
    conn_id = spark_connection(monkeypatch, "local[2]", **IDENTITY)
    hook = SparkJobSubmitHook(conn_id=conn_id)
    plan = batch_plan(shards=50)

    with pytest.raises(AirflowException) as raised:
        hook.run_batch(plan, kinesis=kinesis, snowflake=snowflake)

    argv = json.loads(spark_submit_fails.read_text())
    encoded = argv[argv.index("--plan") + 1]
    assert BatchPlan.from_work(decode(encoded)) == plan
    assert encoded not in str(raised.value)
    # The exception says what failed and why, not the command; the log names the plan by batch and length.
    (logged,) = [message for _, message in hook_log() if message.startswith("Spark-Submit cmd: ")]
    assert encoded not in logged
    assert f"--plan <plan of batch {plan.batch_id}: {len(encoded)} characters> --attempt " in logged


def test_a_plan_too_large_for_one_argument_is_refused_before_spark_submit_runs(
    monkeypatch: pytest.MonkeyPatch, spark_submit_fails: Path
) -> None:
    kinesis, snowflake = job_connections(monkeypatch)
    hook = SparkJobSubmitHook(conn_id=spark_connection(monkeypatch, "local[2]", **IDENTITY))
    monkeypatch.setattr("airflow_kinesis_snowflake.hooks.spark.encode", partial(encode, limit=200))

    with pytest.raises(AirflowException, match=r"set batch\.max_shards_per_batch in the connector file to at most"):
        hook.run_batch(batch_plan(shards=20), kinesis=kinesis, snowflake=snowflake)

    assert not spark_submit_fails.exists()


def test_a_dynamodb_table_plan_too_large_for_one_argument_is_refused_before_spark_submit_runs(
    monkeypatch: pytest.MonkeyPatch, spark_submit_fails: Path
) -> None:
    aws, snowflake = job_connections(monkeypatch)
    hook = SparkJobSubmitHook(conn_id=spark_connection(monkeypatch, "local[2]", **IDENTITY))
    monkeypatch.setattr("airflow_kinesis_snowflake.hooks.spark.encode", partial(encode, limit=100))

    with pytest.raises(AirflowException, match="lower snapshot_total_segments in the connector file; nothing was"):
        hook.run_table_batch(table_plan(), aws=aws, snowflake=snowflake)

    assert not spark_submit_fails.exists()


@pytest.fixture
def spark_submit_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A spark-submit first on the PATH that records its arguments and fails; where it records them."""
    record = tmp_path / "argv.json"
    script = tmp_path / "bin" / "spark-submit"
    script.parent.mkdir()
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\nsys.exit(3)\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(script.parent), os.environ["PATH"]]))
    return record


@pytest.mark.parametrize("master", CLUSTER_MASTERS, ids=["yarn", "k8s"])
def test_the_ingest_operators_on_kill_stops_a_cluster_mode_driver(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kube: list[tuple[str, str]], master: str
) -> None:
    # A `yarn` command on the PATH that records how it was called.
    calls = tmp_path / "yarn-calls"
    yarn = tmp_path / "bin" / "yarn"
    yarn.parent.mkdir()
    yarn.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    yarn.chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(yarn.parent), os.environ["PATH"]]))
    conn_id = spark_connection(monkeypatch, master, namespace="ingest", **{"deploy-mode": "cluster", **IDENTITY})
    hook = SparkJobSubmitHook(conn_id=conn_id)
    # spark-submit, still running, has said where the driver is (as it logs it in cluster mode).
    hook._process_spark_submit_log(
        iter(
            [
                "INFO Client: Submitted application application_1767225600000_0042",
                "\t pod name: kinesis-to-snowflake-orders-5f2c9a-driver",
            ]
        )
    )
    hook._submit_sp = subprocess.Popen(["sleep", "60"])
    operator = SparkKinesisIngestOperator(
        task_id="ingest", stream_name="s", application_name="a", database="D", schema="S", table="T"
    )
    operator._spark_hook = hook

    operator.on_kill()

    assert hook._submit_sp.wait(timeout=10) != 0  # spark-submit was killed
    if master == "yarn":
        assert calls.read_text().split() == ["application", "-kill", "application_1767225600000_0042"]
    else:
        assert kube == [("ingest", "kinesis-to-snowflake-orders-5f2c9a-driver")]


def test_continuous_mode_submits_the_run_once_and_reads_every_outcome_of_its_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kinesis, snowflake = job_connections(monkeypatch)
    conn_id = spark_connection(monkeypatch, "local[2]", **IDENTITY)
    hook = SparkJobSubmitHook(conn_id=conn_id)
    submitted: list[list[str]] = []
    monkeypatch.setattr(
        spark_submit.SparkSubmitHook,
        "submit",
        lambda self, application="", **kwargs: submitted.append(self._build_spark_submit_command(application)),
    )
    monkeypatch.setattr(KinesisSnowflakeHook, "get_conn", lambda self: io.StringIO())  # closed after reading
    plan = batch_plan()
    read: list[str] = []

    def read_attempt_outcomes(sink: SupportObjects, attempt_id: str) -> list[tuple[str, BatchResult]]:
        read.append(attempt_id)
        return [("orders-app", outcome_of(plan)), ("orders-app", outcome_of(plan))]  # two micro-batches

    monkeypatch.setattr(SupportObjects, "read_attempt_outcomes", read_attempt_outcomes)
    settings = BatchSettings(
        stream_name="orders", application_name="orders-app", destination=plan.destination, connector_id="orders"
    )

    outcome = hook.run_continuous(
        settings, owner="dag/run/1/ab", max_runtime_minutes=2, idle_seconds=7, kinesis=kinesis, snowflake=snowflake
    )

    (command,) = submitted
    run = ContinuousRun.from_work(decode(command[command.index("--continuous") + 1]))
    assert run == ContinuousRun(settings, "eu-west-1", "dag/run/1/ab", max_runtime_seconds=120, idle_seconds=7)
    assert "--plan" not in command
    assert read == [command[command.index("--attempt") + 1]]  # the outcomes of this submission only
    assert outcome.summary()["rows_loaded"] == 6 and len(outcome.batches) == 2
    assert not [c for c in ("AKIAJOBENVTEST000001", "job-env-secret-key-3Xq9") if c in " ".join(command)]


def test_continuous_mode_hands_on_each_micro_batch_as_it_commits_while_the_application_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kinesis, snowflake = job_connections(monkeypatch)
    hook = SparkJobSubmitHook(conn_id=spark_connection(monkeypatch, "local[2]", **IDENTITY))
    hook.outcome_poll_seconds = 0.01
    plan = batch_plan()
    recorded: list[tuple[str, BatchResult]] = []  # the outcomes table of this submission
    handed: list[str] = []
    reported_while_running = threading.Event()

    def submit(self: spark_submit.SparkSubmitHook, application: str = "", **kwargs: Any) -> None:
        # The driver commits a micro-batch, then another; spark-submit returns only after both.
        recorded.append(("orders-app", outcome_of(plan)))
        assert reported_while_running.wait(timeout=30), "the first micro-batch was not reported while running"
        recorded.append(("orders-app", replace(outcome_of(plan), batch_id="second")))

    def on_batch(batch: BatchOutcome) -> None:
        assert batch.result is not None
        handed.append(batch.result.batch_id)
        reported_while_running.set()

    monkeypatch.setattr(spark_submit.SparkSubmitHook, "submit", submit)
    monkeypatch.setattr(KinesisSnowflakeHook, "get_conn", lambda self: io.StringIO())
    monkeypatch.setattr(SupportObjects, "read_attempt_outcomes", lambda sink, attempt_id: list(recorded))
    settings = BatchSettings(
        stream_name="orders", application_name="orders-app", destination=plan.destination, connector_id="orders"
    )

    outcome = hook.run_continuous(
        settings, owner="o", max_runtime_minutes=1, kinesis=kinesis, snowflake=snowflake, on_batch=on_batch
    )

    assert handed == [plan.batch_id, "second"]  # each once, in order; the last after spark-submit returned
    assert [b.result.batch_id for b in outcome.batches if b.result] == handed


def test_continuous_mode_refuses_a_pipe_without_its_statement_before_submitting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kinesis, snowflake = job_connections(monkeypatch)
    hook = SparkJobSubmitHook(conn_id=spark_connection(monkeypatch, "local[2]"))
    monkeypatch.setattr(spark_submit.SparkSubmitHook, "submit", lambda *a, **k: pytest.fail("submitted"))
    settings = BatchSettings(
        stream_name="s", application_name="app", destination=Destination("D", "S", "T"), connector_id="c",
        destination_type="PIPE",
    )  # fmt: skip

    with pytest.raises(BatchRefused, match="pipe_definition is required"):
        hook.run_continuous(settings, owner="o", max_runtime_minutes=1, kinesis=kinesis, snowflake=snowflake)
