"""Submit the ingestion job without a secret on the spark-submit command line or in Spark settings."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk.exceptions import AirflowException

import airflow_kinesis_snowflake
from airflow_kinesis_snowflake.core.job import SNOWFLAKE_CONNECTION_REF_ARG, SNOWFLAKE_ENV
from airflow_kinesis_snowflake.core.model import BatchResult
from airflow_kinesis_snowflake.environment import check_spark_distribution
from airflow_kinesis_snowflake.spark_jobs import kinesis_to_snowflake

if TYPE_CHECKING:
    from airflow_kinesis_snowflake.core.planning import BatchPlan
    from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook
    from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook

# The file spark-submit runs: the job's entry point, shipped in this package.
DEFAULT_APPLICATION = kinesis_to_snowflake.__file__

CLIENT = "client"
CLUSTER = "cluster"
CONNECTIONS_DOC = "docs/connections.md"
# Spark connection extra naming the Secrets Manager secret that holds the Snowflake connection. Its
# name must not contain a word Airflow's secret masker treats as sensitive ("secret", "token" ...):
# the value, a secret's name, would be masked in every log line and message that names it.
CONNECTION_REF_EXTRA = "snowflake_connection_ref"
DEPRECATED_CONNECTION_REF_EXTRA = "snowflake_secret_id"


def package_core(directory: Path) -> Path:
    """Zip ``airflow_kinesis_snowflake/core`` for ``--py-files``: executors need nothing else."""
    package = Path(airflow_kinesis_snowflake.__file__).parent
    archive = directory / "kinesis_snowflake_core.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(package / "__init__.py", "airflow_kinesis_snowflake/__init__.py")
        for path in sorted((package / "core").rglob("*.py")):
            zf.write(path, f"airflow_kinesis_snowflake/{path.relative_to(package).as_posix()}")
    return archive


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)


class KinesisJobSubmitHook(SparkSubmitHook):
    """:class:`~airflow.providers.apache.spark.hooks.spark_submit.SparkSubmitHook` for the ingestion job.

    The Spark provider's ``env_vars`` are turned into ``--conf spark.yarn.appMasterEnv.*`` (YARN)
    or ``spark.kubernetes.driverEnv.*`` (Kubernetes) settings, which show on the command line, in
    the Spark UI and in event logs, and are refused in standalone cluster mode. This hook never
    uses them: :meth:`submit_job` gives the job's credentials to the spark-submit process alone, as
    its environment (``Popen(env=...)``). That reaches the driver only in client deploy mode, where
    the driver is that process (``local``, ``spark://``, ``yarn`` and ``k8s://`` masters alike).

    Cluster deploy mode is not supported: the driver reads the batch plan from a file on this
    worker and writes its result there. :meth:`check_credential_delivery` refuses it.

    Extras read from the Spark connection, besides the provider's own:

    * ``driver_identity`` (bool): the driver (on this worker, in client mode) and the executors use
      their own AWS identity (boto3's default chain: instance profile, EMR role, IRSA); no AWS
      credential is sent to the job, only the region and endpoints of the AWS connection.
    * ``snowflake_connection_ref``: with ``driver_identity``, the name or ARN of the AWS Secrets
      Manager secret holding the Snowflake connection (a JSON object of connector arguments); the
      job reads it, so no Snowflake credential is sent either. ``snowflake_secret_id`` is its
      deprecated name (Airflow masks that extra's value in logs, as it does any "secret" field).

    With ``driver_identity``, ``--snowflake-connection-ref <name or ARN>`` is added to the
    application arguments (a secret's name, not a secret).

    :param kwargs: passed to ``SparkSubmitHook``; ``env_vars`` is refused.
    """

    def __init__(self, **kwargs: Any) -> None:
        if kwargs.get("env_vars"):
            raise ValueError(
                "env_vars would reach the driver as Spark settings on the command line on YARN and "
                "Kubernetes; the job's credentials go to the spark-submit process's environment only "
                "(submit_job)"
            )
        super().__init__(**kwargs)
        extra = self._connection_extra()
        self.driver_identity = _flag(extra.get("driver_identity", False))
        ref = extra.get(CONNECTION_REF_EXTRA)
        if not ref and extra.get(DEPRECATED_CONNECTION_REF_EXTRA):
            warnings.warn(
                f"Spark connection {self._conn_id!r}: the extra {DEPRECATED_CONNECTION_REF_EXTRA!r} is deprecated "
                f"and Airflow masks its value in logs; rename it {CONNECTION_REF_EXTRA!r}",
                AirflowProviderDeprecationWarning,
                stacklevel=2,
            )
            ref = extra[DEPRECATED_CONNECTION_REF_EXTRA]
        self.snowflake_connection_ref: str | None = str(ref) if ref else None
        if self.driver_identity and not self.snowflake_connection_ref:
            raise ValueError(
                f"Spark connection {self._conn_id!r}: extra driver_identity needs {CONNECTION_REF_EXTRA}, the AWS "
                "Secrets Manager secret (name or ARN) that holds the Snowflake connection for the driver"
            )

    def _connection_extra(self) -> dict[str, Any]:
        try:
            extra: dict[str, Any] = self.get_connection(self._conn_id).extra_dejson
        except AirflowException:
            return {}  # SparkSubmitHook defaults to yarn without a connection; so do these extras
        return extra

    @property
    def master(self) -> str:
        """The Spark master URL, as the connection resolves it."""
        return str(self._connection["master"])

    @property
    def deploy_mode(self) -> str:
        """``client`` or ``cluster``: the connection's ``deploy-mode``, else ``spark.submit.deployMode``."""
        mode = self._connection["deploy_mode"] or self._conf.get("spark.submit.deployMode") or CLIENT
        return str(mode).strip().lower()

    def check_credential_delivery(self) -> None:
        """Refuse cluster deploy mode, which the ingestion job does not support, saying what to use.

        :raises AirflowException: in cluster deploy mode.
        """
        if self.deploy_mode != CLUSTER:
            return
        raise AirflowException(
            f"Spark connection {self._conn_id!r} (master {self.master}) uses cluster deploy mode, which is not "
            "supported yet: the batch plan and the job's result are files on this Airflow worker, which a driver "
            'on the cluster cannot read or write. Use client deploy mode (the extra "deploy-mode": "client", '
            "and no spark.submit.deployMode=cluster in spark_conf); with a YARN or Kubernetes master the driver "
            "then runs on this worker and the executors on the cluster. For the driver and executors to use "
            "their own AWS identity instead of the AWS connection's credentials, also set the extras "
            f'"driver_identity": true and "{CONNECTION_REF_EXTRA}": "<name or ARN of the Secrets Manager secret '
            f'holding the Snowflake connection>" ({CONNECTIONS_DOC}).'
        )

    def job_environment(self, kinesis: KinesisStreamHook, snowflake: KinesisSnowflakeHook) -> dict[str, str]:
        """The variables that tell the job where AWS is and, unless ``driver_identity``, its credentials.

        With ``driver_identity``: region and endpoints only; the Snowflake connection is not read.
        Otherwise the AWS connection's credentials as ``AWS_*`` variables and the Snowflake
        connection as ``SNOWFLAKE_CONNECTION_JSON``, every secret in them registered with Airflow's
        secret masker (:meth:`~.KinesisSnowflakeHook.job_connection_params`).

        :param kinesis: the hook of the AWS connection the job reads Kinesis with.
        :param snowflake: the hook of the Snowflake connection the job loads with.
        """
        if self.driver_identity:
            return kinesis.job_location()
        return {**kinesis.job_environment(), SNOWFLAKE_ENV: json.dumps(snowflake.job_connection_params())}

    def submit_job(
        self,
        application: str,
        *,
        application_args: list[str],
        kinesis: KinesisStreamHook,
        snowflake: KinesisSnowflakeHook,
        name: str | None = None,
        py_files: str | None = None,
    ) -> None:
        """Run spark-submit with the job's credentials in its environment (see the class).

        :param application: the PySpark job file.
        :param application_args: the job's arguments; ``--snowflake-connection-ref`` is added to them
            with ``driver_identity``.
        :param kinesis: see :meth:`job_environment`.
        :param snowflake: see :meth:`job_environment`.
        :param name: the Spark application's name; the hook's own when None.
        :param py_files: ``--py-files`` of this submission; the hook's own when None.
        :raises AirflowException: in cluster deploy mode, or when spark-submit fails.
        :raises SparkDistributionError: when pyspark's files come from two Spark versions.
        """
        self.check_credential_delivery()
        check_spark_distribution()  # before spark-submit: pyspark files of two Spark versions fail obscurely
        if self.driver_identity:
            assert self.snowflake_connection_ref is not None  # __init__ refuses driver_identity without it
            application_args = [*application_args, SNOWFLAKE_CONNECTION_REF_ARG, self.snowflake_connection_ref]
        self._application_args = application_args
        self._name = name or self._name
        self._py_files = py_files or self._py_files
        env = {**os.environ, **self.job_environment(kinesis, snowflake)}
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        if shutil.which("spark-submit", path=env.get("PATH")) is None:
            # pyspark from PyPI installs spark-submit next to the interpreter.
            env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        super().submit(application, env=env)

    def run_batch(
        self,
        plan: BatchPlan,
        *,
        kinesis: KinesisStreamHook,
        snowflake: KinesisSnowflakeHook,
        application: str | None = None,
    ) -> BatchResult:
        """Run the Spark job of one batch plan and read back what it loaded.

        The plan and the result are files in a working directory of their own, removed afterwards;
        ``core`` is shipped to the executors as ``--py-files``.

        :param plan: the batch.
        :param kinesis: see :meth:`job_environment`.
        :param snowflake: see :meth:`job_environment`.
        :param application: the PySpark job file; the packaged entry point when None.
        :raises AirflowException: when spark-submit fails, or the job wrote no result.
        """
        workdir = Path(tempfile.mkdtemp(prefix=f"kinesis-{plan.batch_id}-"))
        try:
            plan_path = workdir / "plan.json"
            result_path = workdir / "result.json"
            plan_path.write_text(plan.to_json())
            self.submit_job(
                application or DEFAULT_APPLICATION,
                application_args=["--plan", str(plan_path), "--result", str(result_path)],
                kinesis=kinesis,
                snowflake=snowflake,
                name=f"kinesis-to-snowflake-{plan.application_name}",
                py_files=str(package_core(workdir)),
            )
            if not result_path.exists():
                raise AirflowException(f"Spark job for batch {plan.batch_id} finished without writing {result_path}")
            return BatchResult.from_dict(json.loads(result_path.read_text()))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def submit(self, application: str = "", **kwargs: Any) -> None:
        """Run spark-submit as ``SparkSubmitHook`` does; cluster deploy mode is refused."""
        self.check_credential_delivery()
        super().submit(application, **kwargs)
