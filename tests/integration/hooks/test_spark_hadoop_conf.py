"""No AWS credential reaches the Spark driver's Hadoop configuration, through a real spark-submit.

Spark copies ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_SESSION_TOKEN`` from the
driver's environment into its Hadoop configuration (``fs.s3a.access.key``, ``fs.s3a.secret.key``,
``fs.s3a.session.token``, ``fs.s3.awsSecretAccessKey`` ...), and Spark's YARN client writes that
configuration, unredacted, into ``__spark_hadoop_conf__.xml`` inside ``__spark_conf__.zip``, uploaded
to the HDFS staging directory and every container. A client-mode job without ``driver_identity``
gets its AWS credentials through spark-submit's environment: this submits, through
:meth:`~.SparkJobSubmitHook.submit_job`, a probe application that reads the job's credentials as
the job does and reports its driver's Hadoop configuration, SparkConf and JVM environment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.hooks.spark import SparkJobSubmitHook, package_core
from tests.emulators.spark_env import spark_env

pytestmark = pytest.mark.integration

ACCESS_KEY_ID = "AKIASENTINEL7Q2W4E6R"
SECRET_ACCESS_KEY = "sentinel-secret-access-key-Zx81Lq"
SESSION_TOKEN = "sentinel-session-token-Pw39Vn"
# Credentials of the Airflow worker's own environment, which spark-submit would inherit.
WORKER_ENV = {
    "AWS_ACCESS_KEY_ID": "AKIAWORKERSENTINEL01",
    "AWS_SECRET_ACCESS_KEY": "worker-own-secret-Hj27Kd",
    "AWS_SESSION_TOKEN": "worker-own-token-Tb64Ns",
}
SECRETS = [ACCESS_KEY_ID, SECRET_ACCESS_KEY, SESSION_TOKEN, *WORKER_ENV.values()]
# Where Spark (SparkHadoopUtil.appendS3AndSessionCredentials) copies the AWS variables it finds.
CREDENTIAL_KEYS = (
    "fs.s3a.access.key",
    "fs.s3a.secret.key",
    "fs.s3a.session.token",
    "fs.s3.awsAccessKeyId",
    "fs.s3.awsSecretAccessKey",
    "fs.s3n.awsAccessKeyId",
    "fs.s3n.awsSecretAccessKey",
)

PROBE = """
import json, sys

from pyspark.sql import SparkSession

from airflow_kinesis_snowflake.core.engine.credentials import JobCredentials

credentials = JobCredentials.from_env()  # as the job's driver reads them, before Spark starts
spark = SparkSession.builder.appName("hadoop-conf-probe").getOrCreate()
sc = spark.sparkContext
hadoop = {}
entries = sc._jsc.hadoopConfiguration().iterator()
while entries.hasNext():
    entry = entries.next()
    hadoop[entry.getKey()] = entry.getValue()
names = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
aws = credentials.aws
# An executor's task gets the credentials inside the serialised task, as the job's tasks do.
on_executor = sc.parallelize([0], 1).map(lambda _: [aws.get(name) for name in names]).collect()[0]
report = {
    "hadoop": hadoop,
    "spark_conf": dict(sc.getConf().getAll()),
    "jvm_env": {name: sc._jvm.java.lang.System.getenv(name) for name in names},
    "driver": [aws.get(name) for name in names],
    "executor": on_executor,
}
spark.stop()
with open(sys.argv[1], "w") as out:
    json.dump(report, out)
"""


def connections(monkeypatch: pytest.MonkeyPatch) -> tuple[KinesisStreamHook, KinesisSnowflakeHook, str]:
    aws = {
        "conn_type": "aws",
        "login": ACCESS_KEY_ID,
        "password": SECRET_ACCESS_KEY,
        # Never contacted: the probe makes no AWS call.
        "extra": {"region_name": "us-east-1", "aws_session_token": SESSION_TOKEN, "endpoint_url": "http://127.0.0.1:9"},
    }
    snowflake = {
        "conn_type": "snowflake",
        "login": "PROBE",
        "password": "probe-password-4Rt8",
        "extra": {"account": "a"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_AWS_HADOOP_PROBE", json.dumps(aws))
    monkeypatch.setenv("AIRFLOW_CONN_SNOWFLAKE_HADOOP_PROBE", json.dumps(snowflake))
    spark = {"conn_type": "spark", "host": "local[2]", "extra": {"deploy-mode": "client"}}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_HADOOP_PROBE", json.dumps(spark))
    return (
        KinesisStreamHook(aws_conn_id="aws_hadoop_probe"),
        KinesisSnowflakeHook(snowflake_conn_id="snowflake_hadoop_probe"),
        "spark_hadoop_probe",
    )


def test_the_drivers_hadoop_configuration_holds_no_aws_credential_in_client_mode(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name, value in {**spark_env(), **WORKER_ENV}.items():
        monkeypatch.setenv(name, value)
    kinesis, snowflake, spark_conn = connections(monkeypatch)
    probe, report_path = tmp_path / "probe.py", tmp_path / "report.json"
    probe.write_text(PROBE)
    hook = SparkJobSubmitHook(conn_id=spark_conn)

    hook.submit_job(
        str(probe),
        application_args=[str(report_path)],
        aws=kinesis,
        snowflake=snowflake,
        name="hadoop-conf-probe",
        py_files=str(package_core(tmp_path)),
    )

    report: dict[str, Any] = json.loads(report_path.read_text())
    hadoop: dict[str, str] = report["hadoop"]
    assert len(hadoop) > 100  # the whole configuration was read (core-default.xml alone holds hundreds)
    assert {k: hadoop[k] for k in CREDENTIAL_KEYS if k in hadoop} == {}
    for secret in SECRETS:
        assert not [k for k, v in hadoop.items() if secret in str(v)], "a credential is in the Hadoop configuration"
        assert not [k for k, v in report["spark_conf"].items() if secret in str(v)], "a credential is in SparkConf"
    # Nothing Spark reads: the driver JVM's environment has no AWS credential variable.
    assert report["jvm_env"] == dict.fromkeys(WORKER_ENV)
    # The job still has the AWS connection's credentials, in its driver and in its tasks.
    assert report["driver"] == report["executor"] == [ACCESS_KEY_ID, SECRET_ACCESS_KEY, SESSION_TOKEN]
