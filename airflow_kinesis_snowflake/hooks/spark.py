"""Submit the ingestion job, in client or cluster deploy mode, without a secret on the spark-submit
command line or in Spark settings.

The job shares no disk with the Airflow worker: the batch plan travels inside the submission (one
application argument, :func:`~airflow_kinesis_snowflake.core.engine.wire.encode`), and the job
records its outcome in Snowflake, next to the ledger, where :meth:`SparkJobSubmitHook.run_batch`
reads it once spark-submit returns. Where the driver runs per master and deploy mode, and what
the cluster needs, is told in
https://airflow-provider-kinesis-snowflake.github.io/airflow-provider-kinesis-snowflake/spark/.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import sys
import tempfile
import uuid
import warnings
import zipfile
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

import airflow_kinesis_snowflake
from airflow_kinesis_snowflake import docs_url
from airflow_kinesis_snowflake.compat import AirflowException, redact
from airflow_kinesis_snowflake.core.batch import BatchOutcome, BatchSettings, outcome_of_results, pipe_definition_for
from airflow_kinesis_snowflake.core.continuous import ContinuousRun
from airflow_kinesis_snowflake.core.dynamodb_continuous import TableContinuousRun
from airflow_kinesis_snowflake.core.dynamodb_job import STREAMS_ENDPOINT_ENV, TableBatchPlan, TableBatchResult
from airflow_kinesis_snowflake.core.dynamodb_job import report_entries as table_report_entries
from airflow_kinesis_snowflake.core.engine.continuous import IDLE_SECONDS
from airflow_kinesis_snowflake.core.engine.credentials import (
    SNOWFLAKE_ENV,
    SPARK_READ_AWS_CREDENTIAL_ENV,
    job_credential_environment,
)
from airflow_kinesis_snowflake.core.engine.detached import (
    DetachedRun,
    JobDetached,
    JobRunState,
    recorded_run,
)
from airflow_kinesis_snowflake.core.engine.driver import (
    ATTEMPT_ARG,
    CONTINUOUS_ARG,
    PLAN_ARG,
    SNOWFLAKE_CONNECTION_REF_ARG,
)
from airflow_kinesis_snowflake.core.engine.leases import ResumedBatch
from airflow_kinesis_snowflake.core.engine.outcomes import OUTCOME_POLL_SECONDS, OutcomeWatcher
from airflow_kinesis_snowflake.core.engine.wire import PlanTooLargeError, Submittable, WorkKind, encode
from airflow_kinesis_snowflake.core.job import report_lines
from airflow_kinesis_snowflake.core.job_log import (
    DEFAULT_SPARK_LOG_LEVEL,
    SPARK_LOG_LEVEL_SETTING,
    OutputLine,
    OutputTail,
    log4j2_properties,
    read_output_line,
    spark_log_level,
)
from airflow_kinesis_snowflake.core.load.snowflake_sink import (
    DYNAMODB_SUPPORT_NAMES,
    KINESIS_SUPPORT_NAMES,
    OutcomeKey,
    SupportNames,
    SupportObjects,
)
from airflow_kinesis_snowflake.core.model import BatchResult, Destination
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.environment import (
    SparkDistributionError,
    check_spark_distribution,
    check_spark_submit,
)
from airflow_kinesis_snowflake.get_provider_info import SPARK_CONN_TYPE, SPARK_CONNECTION, field_behaviour
from airflow_kinesis_snowflake.spark_jobs import dynamodb_to_snowflake, kinesis_to_snowflake

if TYPE_CHECKING:
    from airflow_kinesis_snowflake.core.planning import BatchPlan
    from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook
    from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook

# The file spark-submit runs: the job's entry point, shipped in this package.
DEFAULT_APPLICATION = kinesis_to_snowflake.__file__
# The DynamoDB source's batches: one Spark task per snapshot segment and per stream shard.
DYNAMODB_APPLICATION = dynamodb_to_snowflake.__file__

CLIENT = "client"
CLUSTER = "cluster"
CONNECTIONS_DOC = docs_url("connections")
SPARK_DOC = docs_url("spark")
# Spark's own refusal (org.apache.spark.deploy.SparkSubmit), quoted in ours.
STANDALONE_PYTHON_CLUSTER = (
    "Cluster deploy mode is currently not supported for python applications on standalone clusters."
)
# Settings that make spark-submit return before the application finished; the outcome is read then.
DETACHING_CONF = ("spark.yarn.submit.waitAppCompletion", "spark.kubernetes.submission.waitAppCompletion")
# Spark connection extra naming the Secrets Manager secret that holds the Snowflake connection. Its
# name must not contain a word Airflow's secret masker treats as sensitive ("secret", "token" ...):
# the value, a secret's name, would be masked in every log line and message that names it.
CONNECTION_REF_EXTRA = "snowflake_connection_ref"
DEPRECATED_CONNECTION_REF_EXTRA = "snowflake_secret_id"


def package_core(directory: Path) -> Path:
    """Zip ``airflow_kinesis_snowflake/core`` for ``--py-files``, with the registry of sources (where the
    driver finds the job of the work's source): the driver and executors need nothing else.

    The same files give the same bytes (entries in one order, one fixed time), so that the zip's
    content-addressed key on object storage (:mod:`~airflow_kinesis_snowflake.hooks.artifacts`) is the
    same from every worker."""
    package = Path(airflow_kinesis_snowflake.__file__).parent
    archive = directory / "kinesis_snowflake_core.zip"
    files = [package / "__init__.py", package / "registry.py", *sorted((package / "core").rglob("*.py"))]
    with zipfile.ZipFile(archive, "w") as zf:
        for path in files:
            entry = zipfile.ZipInfo(f"airflow_kinesis_snowflake/{path.relative_to(package).as_posix()}")
            entry.external_attr = 0o644 << 16
            zf.writestr(entry, path.read_bytes())
    return archive


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)


class DetachablePlan(Protocol):
    """A source's batch plan, as a deferrable task's submit step reads it."""

    @property
    def application_name(self) -> str: ...

    @property
    def batch_id(self) -> str: ...


_P = TypeVar("_P", bound=DetachablePlan)
_R = TypeVar("_R")


class SparkJobSubmitHook(SparkSubmitHook):
    """:class:`~airflow.providers.apache.spark.hooks.spark_submit.SparkSubmitHook` for the ingestion job.

    The Spark provider's ``env_vars`` are turned into ``--conf spark.yarn.appMasterEnv.*`` (YARN)
    or ``spark.kubernetes.driverEnv.*`` (Kubernetes) settings, which show on the command line, in
    the Spark UI and in event logs, and are refused in standalone cluster mode. This hook never
    uses them: :meth:`submit_job` gives the job's credentials to the spark-submit process alone, as
    its environment (``Popen(env=...)``). That reaches the driver only in client deploy mode, where
    the driver is that process (``local``, ``spark://``, ``yarn`` and ``k8s://`` masters alike). The
    AWS credentials go under names of the job's own, never as ``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY`` or ``AWS_SESSION_TOKEN`` (those of this worker's own environment are
    left out too): Spark copies those into the application's Hadoop configuration, which a YARN
    client uploads unredacted to the staging directory and every container.

    Cluster deploy mode (``yarn`` and ``k8s://`` masters) needs the ``driver_identity`` and
    ``snowflake_connection_ref`` extras: the driver on the cluster then uses its own AWS identity
    and reads the Snowflake connection from AWS Secrets Manager. Nothing else the job needs is on
    this worker's disk: the plan is an application argument and the outcome is read from
    Snowflake (:meth:`run_batch`), in client mode too. :meth:`check_credential_delivery` refuses,
    before any side effect, cluster mode without those extras, on a standalone (``spark://``) or
    ``local`` master (Spark refuses both), settings that make spark-submit return before the
    application finished, and a YARN client-mode driver with ``driver_identity`` whose identity
    would be this worker's ``AWS_*`` credential variables.

    Extras read from the Spark connection, besides the provider's own:

    * ``driver_identity`` (bool): the driver (on this worker in client mode, on the cluster in
      cluster mode) and the executors use their own AWS identity (boto3's default chain: instance
      profile, EMR role, IRSA); no AWS credential is sent to the job, only the region and endpoints
      of the AWS connection (in client mode).
    * ``snowflake_connection_ref``: with ``driver_identity``, the name or ARN of the AWS Secrets
      Manager secret holding the Snowflake connection (a JSON object of connector arguments); the
      job reads it, so no Snowflake credential is sent either. ``snowflake_secret_id`` is its
      deprecated name (Airflow masks that extra's value in logs, as it does any "secret" field).

    With ``driver_identity``, ``--snowflake-connection-ref <name or ARN>`` is added to the
    application arguments (a secret's name, not a secret).

    With a ``submitter`` (:mod:`~airflow_kinesis_snowflake.hooks.platforms`), the job runs on that
    managed Spark platform instead of through spark-submit: the same entry point, arguments and
    outcome, the driver on the platform with its own identity (cluster deploy mode, as far as this
    hook is concerned).

    :param submitter: the managed platform that runs the job; None: spark-submit on this worker.
    :param kwargs: passed to ``SparkSubmitHook`` (``conf``, ``deploy_mode``, ``executor_memory``
        ...); ``env_vars`` is refused.
    """

    def __init__(self, submitter: PlatformSubmitter | None = None, **kwargs: Any) -> None:
        if kwargs.get("env_vars"):
            raise ValueError(
                "env_vars would reach the driver as Spark settings on the command line on YARN and "
                "Kubernetes; the job's credentials go to the spark-submit process's environment only "
                "(submit_job)"
            )
        self.submitter = submitter
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
        if not self._connection["deploy_mode"] and self.deploy_mode == CLUSTER:
            # Cluster mode asked for in spark_conf only: tell SparkSubmitHook too, which passes
            # --deploy-mode and, in cluster mode only, finds the YARN application or Kubernetes
            # driver pod in spark-submit's output, to check its exit code and to kill it (on_kill).
            self._connection["deploy_mode"] = CLUSTER
            self._should_track_driver_status = self._resolve_should_track_driver_status()
        self._plan_argument: str | None = None
        self._plan_label = ""
        self._output_tail: OutputTail | None = None
        # Seconds between two reads of a continuous submission's outcomes (:meth:`watching_outcomes`).
        self.outcome_poll_seconds = OUTCOME_POLL_SECONDS

    # Any Spark connection works; this type gives the extras above fields of their own in the UI.
    conn_type = SPARK_CONN_TYPE
    hook_name = "Spark (Kinesis to Snowflake job)"

    def _resolve_connection(self) -> dict[str, Any]:
        """The Spark provider's reading of the connection. One without a host (enough on a managed
        platform) keeps the provider's default master, ``yarn``, as its recent versions do; the
        provider's 5.0, this package's floor, reads no master from it, which its constructor fails on."""
        data: dict[str, Any] = super()._resolve_connection()
        if data.get("master") is None:
            data["master"] = "yarn"
        return data

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Login, password and schema hidden; the host is the master."""
        return field_behaviour(SPARK_CONNECTION)

    @classmethod
    def get_connection(cls, conn_id: str) -> Any:
        """The connection; one of type ``kinesis_snowflake_spark`` is read as the Spark provider reads a
        ``spark`` one (its host is the master URL), not as a master named after its type."""
        conn = super().get_connection(conn_id)
        if conn.conn_type == SPARK_CONN_TYPE:
            conn = copy.copy(conn)
            conn.conn_type = "spark"
        return conn

    def test_connection(self) -> tuple[bool, str]:
        """Check, without submitting anything, what a submission would be refused for
        (:meth:`check_submission`, the Spark binary among it).

        :return: whether the connection can submit the job, and a message naming the connection.
        """
        conn = f"Spark connection {self._conn_id!r}"
        try:
            self.check_submission()
        except (AirflowException, SparkDistributionError) as err:  # each refusal says what to change
            return False, f"{conn}: {err}"
        found = check_spark_submit(str(self._connection["spark_binary"]))
        identity = f", driver identity, Snowflake from {self.snowflake_connection_ref}" if self.driver_identity else ""
        return True, f"{conn}: master {self.master}, {self.deploy_mode} deploy mode, {found}{identity}"

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
        """``client`` or ``cluster``: the connection's ``deploy-mode``, else ``spark.submit.deployMode``;
        ``cluster`` on a managed platform (:attr:`submitter`)."""
        if self.submitter is not None:
            return CLUSTER
        mode = self._connection["deploy_mode"] or self._conf.get("spark.submit.deployMode") or CLIENT
        return str(mode).strip().lower()

    def check_submission(self) -> None:
        """Everything that refuses a submission, before any side effect: the deploy mode and how
        credentials reach the driver (:meth:`check_credential_delivery`), a Spark binary to run
        (:func:`~airflow_kinesis_snowflake.environment.check_spark_submit`: pyspark comes with the
        ``spark-submit`` extra), and one Spark version in this environment
        (:func:`~airflow_kinesis_snowflake.environment.check_spark_distribution`).

        :raises AirflowException: see :meth:`check_credential_delivery`.
        :raises SparkSubmitNotFoundError: when the connection's ``spark-binary`` is nowhere to be found,
            naming the ``spark-submit`` extra.
        :raises SparkDistributionError: when pyspark's files come from two Spark versions.
        """
        self.check_credential_delivery()
        if self.submitter is not None:
            return  # no spark-submit here
        check_spark_submit(str(self._connection["spark_binary"]))
        check_spark_distribution()

    def check_credential_delivery(self) -> None:
        """Refuse a submission the job cannot run with, saying what to use; before any side effect.

        In cluster deploy mode: a ``local`` or standalone (``spark://``) master, which Spark refuses
        for a Python application; a connection without ``driver_identity`` (the credentials this
        worker holds could reach a remote driver only as arguments or Spark settings); settings
        that make spark-submit return before the application finished (the outcome is read then).

        In client deploy mode on YARN with ``driver_identity``: the driver's identity is this
        worker's, and when this worker's environment holds ``AWS_ACCESS_KEY_ID`` and
        ``AWS_SECRET_ACCESS_KEY``, Spark would copy them into the Hadoop configuration that the YARN
        client uploads, unredacted, to the staging directory and every container.

        :raises AirflowException: naming the connection, the setting and what to set instead.
        """
        if self.submitter is not None:
            self.submitter.check(self)
            return
        master, conn = self.master, f"Spark connection {self._conn_id!r}"
        if self.deploy_mode != CLUSTER:
            self._check_client_identity(master, conn)
            return
        client_mode = (
            'use client deploy mode (the extra "deploy-mode": "client", and no spark.submit.deployMode=cluster in '
            "the Spark settings)"
        )
        if master.startswith("local"):
            raise AirflowException(
                f"{conn} (master {master}) uses cluster deploy mode, which Spark refuses with a local master "
                f'("Cluster deploy mode is not compatible with master "local""): {client_mode} ({SPARK_DOC}).'
            )
        if master.startswith("spark://"):
            raise AirflowException(
                f"{conn} (master {master}) uses cluster deploy mode on a Spark standalone cluster, which Spark "
                f'refuses for a Python application such as this job ("{STANDALONE_PYTHON_CLUSTER}"): {client_mode}; '
                "the driver then runs on this worker and the executors on the cluster. For a driver on the "
                f"cluster, use a YARN (EMR) or Kubernetes master ({SPARK_DOC})."
            )
        if not (self._is_yarn or self._is_kubernetes):
            raise AirflowException(
                f"{conn} (master {master}) uses cluster deploy mode, which this job supports with a YARN (yarn) or "
                f"Kubernetes (k8s://) master only: {client_mode} ({SPARK_DOC})."
            )
        if not self.driver_identity:
            raise AirflowException(
                f'{conn} (master {master}) uses cluster deploy mode without the extras "driver_identity": true and '
                f'"{CONNECTION_REF_EXTRA}": the driver runs on a cluster node, and the AWS and Snowflake credentials '
                "this worker holds could only reach it as command-line arguments or Spark settings, which show in "
                "the Spark UI and event logs. Set both extras in the connection: the driver then uses its own AWS "
                f"identity (EMR role, IRSA, instance profile) and reads the Snowflake connection from the AWS "
                f'Secrets Manager secret that "{CONNECTION_REF_EXTRA}" names; or {client_mode} '
                f"({SPARK_DOC}, {CONNECTIONS_DOC})."
            )
        detaching = [k for k in DETACHING_CONF if str(self._conf.get(k, "")).strip().lower() == "false"]
        # Arguments of recent Spark providers only.
        for argument in ("track_driver_via_k8s_api", "yarn_track_via_rm_api"):
            if getattr(self, f"_{argument}", False):
                detaching.append(f"{argument}=True")
        if detaching:
            raise AirflowException(
                f"{conn}: {', '.join(detaching)} makes spark-submit return before the application finished, "
                "but the batch's outcome is read from Snowflake when spark-submit returns: remove it, so that "
                f"spark-submit waits for the driver ({SPARK_DOC})."
            )

    def _check_client_identity(self, master: str, conn: str) -> None:
        """Client deploy mode: refuse a YARN driver with ``driver_identity`` whose identity is this
        worker's ``AWS_*`` credential variables (see :meth:`check_credential_delivery`)."""
        if not (self.driver_identity and self._is_yarn):
            return
        held = [name for name in SPARK_READ_AWS_CREDENTIAL_ENV if os.environ.get(name)]
        if not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(held):
            return
        raise AirflowException(
            f'{conn} (master {master}, client deploy mode) has "driver_identity": true, so the driver uses this '
            f"worker's AWS identity, and this worker's environment holds {', '.join(held)}: Spark copies them into "
            "the application's Hadoop configuration (fs.s3a.access.key, fs.s3a.secret.key ...), which the YARN "
            "client uploads unredacted to the HDFS staging directory and every container. Give this worker its "
            "AWS identity another way (an instance profile, a web identity role, a profile in ~/.aws), or remove "
            f'"driver_identity" so that the AWS connection\'s credentials reach the driver under names Spark does '
            f"not read ({SPARK_DOC}, {CONNECTIONS_DOC})."
        )

    def job_environment(self, aws: JobLocation, snowflake: KinesisSnowflakeHook) -> dict[str, str]:
        """The variables that tell the job where AWS is and, unless ``driver_identity``, its credentials.

        With ``driver_identity``: region and endpoints only; the Snowflake connection is not read.
        Otherwise the AWS connection's credentials under the job's own names
        (:data:`~airflow_kinesis_snowflake.core.job.JOB_AWS_CREDENTIAL_ENV`: Spark copies the standard
        ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_SESSION_TOKEN`` into its Hadoop
        configuration), its region and endpoints as ``AWS_*`` variables, and the Snowflake
        connection as ``SNOWFLAKE_CONNECTION_JSON``, every secret in them registered with Airflow's
        secret masker (:meth:`~.KinesisSnowflakeHook.job_connection_params`).

        :param aws: where the job reaches AWS: the AWS connection's hook (Kinesis), or one with the
            DynamoDB Streams endpoint too (:class:`_StreamsLocation`).
        :param snowflake: the hook of the Snowflake connection the job loads with.
        """
        if self.driver_identity:
            return aws.job_location()
        environment = job_credential_environment(aws.job_environment())
        return {**environment, SNOWFLAKE_ENV: json.dumps(snowflake.job_connection_params())}

    def submit_job(
        self,
        application: str,
        *,
        application_args: list[str],
        aws: JobLocation,
        snowflake: KinesisSnowflakeHook,
        name: str | None = None,
        py_files: str | None = None,
    ) -> None:
        """Run spark-submit with the job's credentials in its environment (see the class).

        :param application: the PySpark job file.
        :param application_args: the job's arguments; ``--snowflake-connection-ref`` is added to them
            with ``driver_identity``.
        :param aws: see :meth:`job_environment`.
        :param snowflake: see :meth:`job_environment`.
        :param name: the Spark application's name; the hook's own when None.
        :param py_files: ``--py-files`` of this submission; the hook's own when None.
        :raises AirflowException: when the deploy mode cannot work (:meth:`check_credential_delivery`), or when
            spark-submit fails.
        :raises SparkDistributionError: when pyspark's files come from two Spark versions.
        """
        self.check_submission()  # before spark-submit: pyspark files of two Spark versions fail obscurely
        level = self.spark_log_level
        if self.driver_identity:
            assert self.snowflake_connection_ref is not None  # __init__ refuses driver_identity without it
            application_args = [*application_args, SNOWFLAKE_CONNECTION_REF_ARG, self.snowflake_connection_ref]
        self._application_args = application_args
        self._name = name or self._name
        self._py_files = py_files or self._py_files
        env = dict(os.environ)
        if not self.driver_identity:
            # The job's credentials travel under names of its own; credentials of this worker's own
            # environment would reach the driver's Hadoop configuration (and a YARN staging directory).
            for name in SPARK_READ_AWS_CREDENTIAL_ENV:
                env.pop(name, None)
        env.update(self.job_environment(aws, snowflake))
        if self.deploy_mode == CLIENT:
            # The driver is spark-submit's child here. In YARN cluster mode spark-submit would pass
            # PYSPARK_PYTHON on to the driver, where this worker's interpreter path means nothing.
            env.setdefault("PYSPARK_PYTHON", sys.executable)
        if shutil.which("spark-submit", path=env.get("PATH")) is None:
            # pyspark from PyPI installs spark-submit next to the interpreter.
            env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        # Spark applies spark.log.level when the SparkContext starts, wherever the driver runs.
        self._conf = {**self._conf, SPARK_LOG_LEVEL_SETTING: level}
        with tempfile.TemporaryDirectory(prefix="kinesis-snowflake-log4j2-") as directory:
            self._configure_spark_logging(env, level, Path(directory))
            self.submit(application, env=env)

    @property
    def spark_log_level(self) -> str:
        """Spark's own log level for the job: ``spark.log.level`` of the hook's ``conf``, else WARN.

        :raises ValueError: when ``spark.log.level`` is not a Spark log level.
        """
        value = self._conf.get(SPARK_LOG_LEVEL_SETTING, DEFAULT_SPARK_LOG_LEVEL)
        try:
            return spark_log_level(value)
        except ValueError as err:
            raise ValueError(f"Spark setting {SPARK_LOG_LEVEL_SETTING} {err}") from None

    def _own_log4j_configuration(self, env: dict[str, str]) -> str | None:
        """Where this worker's Spark configuration sets the logging of spark-submit's JVM, if it does."""
        options = [("SPARK_SUBMIT_OPTS", env.get("SPARK_SUBMIT_OPTS", ""))]
        if self.deploy_mode == CLIENT:
            options.append(("spark.driver.extraJavaOptions", str(self._conf.get("spark.driver.extraJavaOptions", ""))))
        for where, value in options:
            if "-Dlog4j.configurationFile=" in value or "-Dlog4j2.configurationFile=" in value:
                return where
        conf_dir = env.get("SPARK_CONF_DIR") or (str(Path(env["SPARK_HOME"]) / "conf") if env.get("SPARK_HOME") else "")
        if conf_dir and (Path(conf_dir) / "log4j2.properties").is_file():
            return str(Path(conf_dir) / "log4j2.properties")
        return None

    def _configure_spark_logging(self, env: dict[str, str], level: str, directory: Path) -> None:
        """Keep spark-submit's JVM at ``level`` from its start: a log4j2 file in ``directory``, named in
        ``SPARK_SUBMIT_OPTS`` (an environment variable: no Spark setting is replaced). In client deploy mode
        that JVM is the driver; in cluster mode it submits, and the submission's loggers stay at INFO for
        the Spark provider's tracking. A log4j2 configuration of this worker's own is left in charge."""
        own = self._own_log4j_configuration(env)
        if own is not None:
            self.log.info(
                "Spark's logging as %s configures it; %s=%s once the SparkContext starts",
                own,
                SPARK_LOG_LEVEL_SETTING,
                level,
            )
            return
        path = directory / "log4j2.properties"
        path.write_text(log4j2_properties(level, cluster_deploy=self.deploy_mode == CLUSTER))
        env["SPARK_SUBMIT_OPTS"] = " ".join(
            filter(None, [env.get("SPARK_SUBMIT_OPTS"), f"-Dlog4j.configurationFile={path}"])
        )
        self.log.info(
            "Spark logs at %s (spark.log_level of the connector file, %s by default)", level, DEFAULT_SPARK_LOG_LEVEL
        )

    def submit_work(
        self,
        item: Submittable,
        *,
        application: str,
        aws: JobLocation,
        snowflake: KinesisSnowflakeHook,
        name: str,
        label: str,
        attempt_id: str,
    ) -> None:
        """The submit step of every source: run the Spark job of one plan or continuous run.

        ``item``'s work goes as the ``--plan`` or ``--continuous`` argument (encoded, no credential in
        it; shown as ``label`` in the logged command) with ``--attempt attempt_id``; the credentials
        as spark-submit's environment only (:meth:`submit_job`); ``core`` as ``--py-files``, from a
        working directory removed afterwards. The job records each batch's outcome in Snowflake under
        the batch id and ``attempt_id``: nothing here needs a disk the driver shares, so client and
        cluster deploy mode work alike. On a managed platform the :attr:`submitter` runs the same entry
        point with the same arguments (and ``--snowflake-connection-ref``), and waits for it.

        :param item: a source's plan or continuous run
            (:class:`~airflow_kinesis_snowflake.core.engine.wire.Submittable`).
        :param application: the PySpark entry point.
        :param aws: where the job reaches AWS (:meth:`job_environment`).
        :param name: the Spark application's name.
        :raises AirflowException: the work is too large for one argument (before anything is
            submitted), or spark-submit fails.
        """
        flag = self._encode_work(item, label)
        if self.submitter is not None:
            self.submitter.submit(
                self,
                application,
                self._platform_arguments(flag, attempt_id),
                name=name,
                label=self._plan_label,
                location=aws.job_location(),
            )
            return
        workdir = Path(tempfile.mkdtemp(prefix=f"{name}-"))
        try:
            self.submit_job(
                application,
                application_args=[flag, self._plan_argument or "", ATTEMPT_ARG, attempt_id],
                aws=aws,
                snowflake=snowflake,
                name=name,
                py_files=str(package_core(workdir)),
            )
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _encode_work(self, item: Submittable, label: str) -> str:
        """Check how credentials reach the driver, then encode ``item``'s work as the job's argument
        (:attr:`_plan_argument`, shown as ``<label: n characters>``); the flag it goes with.

        :raises AirflowException: the work is too large for one argument.
        """
        self.check_credential_delivery()
        try:
            self._plan_argument = encode(item)
        except PlanTooLargeError as err:
            raise AirflowException(str(err)) from err
        self._plan_label = f"<{label}: {len(self._plan_argument)} characters>"
        return CONTINUOUS_ARG if item.work().kind is WorkKind.CONTINUOUS else PLAN_ARG

    def _platform_arguments(self, flag: str, attempt_id: str) -> list[str]:
        """The job's arguments on a managed platform: the work, the attempt, the Snowflake connection's secret."""
        assert self.snowflake_connection_ref is not None  # the submitter's check refuses a submission without it
        assert self._plan_argument is not None
        arguments = [flag, self._plan_argument, ATTEMPT_ARG, attempt_id]
        return [*arguments, SNOWFLAKE_CONNECTION_REF_ARG, self.snowflake_connection_ref]

    def start_work(
        self,
        item: Submittable,
        key: OutcomeKey,
        *,
        application: str,
        aws: JobLocation,
        name: str,
        label: str,
    ) -> DetachedRun:
        """The submit step alone, for a task that waits elsewhere (a deferred one): start the job run of
        ``item`` on the managed platform, with the same arguments as :meth:`submit_work`, and return
        without waiting.

        :param key: the outcome key the job records its outcome under (its attempt id is the submission's).
        :returns: the run, by plain ids (nothing secret), for the wait and the finish
            (:meth:`finish_run`, then :meth:`read_outcome`).
        :raises AirflowException: spark-submit is the platform (it runs here: nothing to wait for
            elsewhere), or the platform refuses the submission; nothing was submitted.
        """
        if self.submitter is None:
            raise AirflowException(
                f"Spark connection {self._conn_id!r}: a deferred task waits for a job run on a managed Spark "
                "platform; spark-submit runs on this worker"
            )
        flag = self._encode_work(item, label)
        job_run_id = self.submitter.start(
            self,
            application,
            self._platform_arguments(flag, key.attempt_id),
            name=name,
            label=self._plan_label,
            location=aws.job_location(),
        )
        return DetachedRun(
            self.submitter.platform,
            job_run_id,
            key.attempt_id,
            key.application_name,
            key.generation_id,
            key.batch_id,
            name,
        )

    def finish_run(self, run: DetachedRun) -> None:
        """The platform's half of the finish of a job run that was waited for elsewhere (a deferred task):
        nothing when it succeeded, else raise with how it ended and its driver's last lines.

        :raises AirflowException: the run did not succeed.
        """
        assert self.submitter is not None and self.submitter.platform == run.platform
        self.submitter.finish(run.job_run_id, run.name)

    def detaching_submit(
        self, dynamodb: Any, start: Callable[[_P], DetachedRun], finish: Callable[[OutcomeKey], _R]
    ) -> Callable[[_P], _R]:
        """The protocol's submit step of a deferrable task: start the plan's job run and leave it
        (:class:`~airflow_kinesis_snowflake.core.engine.detached.JobDetached`).

        A run recorded in the lease table under the plan's batch id (an earlier try of this task deferred
        with the same plan and did not finish it) is not started again: while it runs, the task waits for
        it; once it succeeded, its outcome is the batch's (``finish``: it committed nothing, or the plan,
        which starts from the ledger's marks, would differ); once it failed, a new run starts.

        :param dynamodb: a DynamoDB client (the lease table, named after the plan's application).
        :param start: starts a plan's job run (:meth:`start_batch` or :meth:`start_table_batch`).
        :param finish: reads an ended run's outcome under its key (:meth:`finish_batch` or
            :meth:`finish_table_batch`).
        """

        def submit(plan: _P) -> _R:
            table, batch_id = LeaseTable(dynamodb, plan.application_name), plan.batch_id
            found = self._earlier_run(table, batch_id)
            if found is not None:
                earlier, state = found
                if not state.ended:
                    self.log.info(
                        "Batch %s: job run %s of an earlier try is %s: waiting for it, not starting another",
                        batch_id,
                        earlier.job_run_id,
                        state.state,
                    )
                    raise JobDetached(earlier)
                if state.succeeded:
                    self.log.info("Batch %s: job run %s of an earlier try succeeded", batch_id, earlier.job_run_id)
                    result = finish(earlier.key)
                    table.forget_run(batch_id)
                    return result
                self.log.info(
                    "Batch %s: job run %s of an earlier try ended %s: starting another",
                    batch_id,
                    earlier.job_run_id,
                    state.state,
                )
            raise JobDetached(start(plan))

        return submit

    def _earlier_run(self, table: LeaseTable, batch_id: str) -> tuple[DetachedRun, JobRunState] | None:
        """The job run an earlier try recorded for ``batch_id`` on this platform, and its state; None when
        there is none, or when the platform cannot tell its state (a run it no longer knows: a new run
        starts, its commit guarded by the ledger)."""
        assert self.submitter is not None
        earlier = recorded_run(table.recorded_run(batch_id), self.submitter.platform)
        if earlier is None:
            return None
        try:
            return earlier, self.submitter.run_state(earlier.job_run_id)
        except Exception as err:  # noqa: BLE001 - see above
            self.log.warning("Batch %s: job run %s of an earlier try: %s", batch_id, earlier.job_run_id, err)
            return None

    def finish_detached(self, resumed: ResumedBatch, finish: Callable[[OutcomeKey], _R]) -> _R:
        """The after-the-run step of a deferred task, as the blocking task's: raise unless the run
        succeeded (how it ended, the driver's last lines), then ``finish`` reads its outcome from
        Snowflake under its key. A wait that ran out (``timeout`` event) stops the run first.

        :param resumed: what the task resumed with (the trigger's event, the run).
        :raises AirflowException: the run did not succeed, or the wait ran out.
        """
        assert self.submitter is not None
        event, run = resumed.event, resumed.run
        if event.get("status") == "timeout":
            self.log.warning("%s: stopping job run %s", event.get("message"), run.job_run_id)
            self.submitter.stop(run.job_run_id)
            raise AirflowException(
                f"{event.get('message')}: it was stopped. Nothing it did not commit is visible; the next try plans "
                "the batch again from the ledger"
            )
        self.finish_run(run)
        return finish(run.key)

    def read_outcome(
        self,
        destination: Destination,
        key: OutcomeKey,
        snowflake: KinesisSnowflakeHook,
        *,
        names: SupportNames = KINESIS_SUPPORT_NAMES,
        what: str | None = None,
    ) -> BatchResult:
        """The outcome the job recorded for ``key``, read from Snowflake's batch outcomes table.

        :param names: the source's support objects (its outcomes table).
        :param what: the batch, for the error; ``batch <id>`` when None.
        :raises AirflowException: when the job exited successfully but recorded none.
        """
        with closing(snowflake.get_conn()) as conn:
            sink = SupportObjects(conn, destination, names)
            result = sink.read_outcome(key)
        if result is None:
            raise AirflowException(
                f"the Spark job of {what or f'batch {key.batch_id}'} (attempt {key.attempt_id}) exited successfully "
                f"but recorded no outcome in {sink.outcomes}. Whether or not it committed, nothing is lost or loaded "
                "twice: the next run fast-forwards each shard's checkpoint to the ledger's mark and reads on from "
                "there."
            )
        return result

    def read_attempt_outcomes(
        self, destination: Destination, attempt_id: str, snowflake: KinesisSnowflakeHook, *, names: SupportNames
    ) -> list[tuple[str, BatchResult]]:
        """Every outcome a continuous submission recorded, oldest first, by application name."""
        with closing(snowflake.get_conn()) as conn:
            return SupportObjects(conn, destination, names).read_attempt_outcomes(attempt_id)

    @contextmanager
    def watching_outcomes(
        self,
        destination: Destination,
        attempt_id: str,
        snowflake: KinesisSnowflakeHook,
        on_outcome: Callable[[tuple[str, BatchResult]], None] | None,
        *,
        names: SupportNames,
    ) -> Iterator[None]:
        """Within the block (a continuous submission), each batch outcome the submission records is read
        as it commits and handed to ``on_outcome`` once, oldest first, the last ones after the block
        (:class:`~airflow_kinesis_snowflake.core.engine.outcomes.OutcomeWatcher`); one Snowflake
        connection reads them, opened at the first read. Nothing is watched when ``on_outcome`` is None.
        """
        if on_outcome is None:
            yield
            return
        connection: list[Any] = []

        def read() -> list[tuple[str, BatchResult]]:
            if not connection:
                connection.append(snowflake.get_conn())
            try:
                return SupportObjects(connection[0], destination, names).read_attempt_outcomes(attempt_id)
            except Exception:
                connection.pop().close()  # opened again at the next read
                raise

        try:
            with OutcomeWatcher(read, on_outcome, self.outcome_poll_seconds):
                yield
        finally:
            for conn in connection:
                conn.close()

    def run_continuously(
        self,
        run: Submittable,
        destination: Destination,
        *,
        names: SupportNames,
        application: str,
        aws: JobLocation,
        snowflake: KinesisSnowflakeHook,
        name: str,
        what: str,
        on_outcome: Callable[[tuple[str, BatchResult]], None] | None,
    ) -> list[tuple[str, BatchResult]]:
        """Every source's continuous run on Spark: submit it (:meth:`submit_work`) under a new attempt
        id, hand each batch outcome it records to ``on_outcome`` as it commits
        (:meth:`watching_outcomes`), and return them all, oldest first, by application name.

        :param what: the run, in the log.
        :raises AirflowException: the job fails; the batches committed before stay committed.
        """
        attempt_id = uuid.uuid4().hex
        with self.watching_outcomes(destination, attempt_id, snowflake, on_outcome, names=names):
            self.submit_work(
                run,
                application=application,
                aws=aws,
                snowflake=snowflake,
                name=name,
                label=f"continuous run of {what}",
                attempt_id=attempt_id,
            )
        return self.read_attempt_outcomes(destination, attempt_id, snowflake, names=names)

    def run_batch(
        self,
        plan: BatchPlan,
        *,
        kinesis: KinesisStreamHook,
        snowflake: KinesisSnowflakeHook,
        application: str | None = None,
    ) -> BatchResult:
        """Run the Spark job of one Kinesis batch plan (:meth:`submit_work`) and read back, from
        Snowflake, what it loaded (:meth:`finish_batch`).

        :param plan: the batch.
        :param kinesis: see :meth:`job_environment`.
        :param snowflake: see :meth:`job_environment`; also reads the outcome.
        :param application: the PySpark job file; the packaged entry point when None.
        :raises AirflowException: when the plan is too large for one argument (before anything is
            submitted), spark-submit fails, or the job recorded no outcome.
        """
        key = self._batch_key(plan)
        self.submit_work(
            plan,
            application=application or DEFAULT_APPLICATION,
            aws=kinesis,
            snowflake=snowflake,
            name=f"kinesis-to-snowflake-{plan.application_name}",
            label=f"plan of batch {plan.batch_id}",
            attempt_id=key.attempt_id,
        )
        return self.finish_batch(key, plan.destination, snowflake)

    def start_batch(
        self,
        plan: BatchPlan,
        *,
        kinesis: KinesisStreamHook,
        application: str | None = None,
    ) -> DetachedRun:
        """Start the Spark job of one Kinesis batch plan on the managed platform, as :meth:`run_batch`
        does, without waiting for it (:meth:`start_work`): a deferred task's submit step."""
        return self.start_work(
            plan,
            self._batch_key(plan),
            application=application or DEFAULT_APPLICATION,
            aws=kinesis,
            name=f"kinesis-to-snowflake-{plan.application_name}",
            label=f"plan of batch {plan.batch_id}",
        )

    def finish_batch(self, key: OutcomeKey, destination: Destination, snowflake: KinesisSnowflakeHook) -> BatchResult:
        """After a Kinesis batch's job ended (waited for here or elsewhere): read back what it loaded,
        and log the driver's report when the driver ran elsewhere.

        :raises AirflowException: the job recorded no outcome.
        """
        result = self.read_outcome(destination, key, snowflake, names=KINESIS_SUPPORT_NAMES)
        if self.deploy_mode == CLUSTER:
            # The driver printed its report on the cluster: tell it here too.
            for line in report_lines(result):
                self.log.info("%s", line)
        return result

    @staticmethod
    def _batch_key(plan: Submittable) -> OutcomeKey:
        """A new submission's outcome key of a plan (``application_name``, ``generation_id``, ``batch_id``)."""
        application_name, generation_id, batch_id = (
            str(getattr(plan, name)) for name in ("application_name", "generation_id", "batch_id")
        )
        return OutcomeKey(application_name, generation_id, batch_id, uuid.uuid4().hex)

    def run_continuous(
        self,
        settings: BatchSettings,
        *,
        owner: str,
        max_runtime_minutes: float,
        idle_seconds: float = IDLE_SECONDS,
        kinesis: KinesisStreamHook,
        snowflake: KinesisSnowflakeHook,
        application: str | None = None,
        on_batch: Callable[[BatchOutcome], None] | None = None,
    ) -> BatchOutcome:
        """Run the Spark job in continuous mode and read back, from Snowflake, every batch it loaded.

        A settings error the protocol would refuse (a bad pipe definition) is refused here, before
        anything is submitted.

        The driver runs the micro-batch protocol itself (:mod:`~airflow_kinesis_snowflake.core.continuous`),
        reaching the lease table, Kinesis and Snowflake with the job's credentials, until
        ``run.max_runtime_seconds``; ``--continuous`` carries the encoded run (no credential in
        it). Each micro-batch records its outcome under its batch id and this submission's
        ``--attempt`` id, read here once spark-submit returned.

        :param settings: the connector's batch settings.
        :param owner: the lease owner of the application (of every micro-batch).
        :param max_runtime_minutes: no micro-batch starts after this long.
        :param idle_seconds: the pause after a micro-batch that read nothing.
        :param on_batch: called with each micro-batch as it commits, while the application runs (its metrics).
        :returns: the micro-batches, as :func:`~airflow_kinesis_snowflake.core.batch.outcome_of_results` reads them.
        :raises AirflowException: when spark-submit fails; the micro-batches committed before stay
            committed, and the next run reads on from the ledger.
        :raises BatchRefused: the settings cannot run; nothing was submitted.
        """
        self.check_credential_delivery()
        pipe_definition_for(settings.destination_type, settings.pipe_definition, settings.destination)
        region = kinesis.region_name or "us-east-1"
        run = ContinuousRun(settings, region, owner, max_runtime_minutes * 60, idle_seconds)
        committed = None if on_batch is None else lambda item: on_batch(outcome_of_results(item[0], [item]))
        results = self.run_continuously(
            run,
            settings.destination,
            names=KINESIS_SUPPORT_NAMES,
            application=application or DEFAULT_APPLICATION,
            aws=kinesis,
            snowflake=snowflake,
            name=f"kinesis-to-snowflake-{settings.application_name}",
            what=settings.application_name,
            on_outcome=committed,
        )
        if self.deploy_mode == CLUSTER:
            for _, result in results:
                for line in report_lines(result):
                    self.log.info("%s", line)
        return outcome_of_results(settings.application_name, results)

    def run_table_batch(
        self,
        plan: TableBatchPlan,
        *,
        aws: KinesisStreamHook,
        snowflake: KinesisSnowflakeHook,
        application: str | None = None,
    ) -> TableBatchResult:
        """Run the data plane of one DynamoDB table batch on Spark (:meth:`submit_work`) and read back
        what it applied (:meth:`finish_table_batch`). Give it as ``submit`` to :func:`~.dynamodb_sync.sync_table`.

        :param aws: the hook of the AWS connection the job reads DynamoDB and its stream with
            (anything with ``job_environment``, ``job_location`` and ``conn_config``).
        :raises AirflowException: the plan is too large for one argument (before anything is
            submitted), spark-submit fails, or the job recorded no outcome.
        """
        key = self._batch_key(plan)
        self.submit_work(
            plan,
            application=application or DYNAMODB_APPLICATION,
            aws=_StreamsLocation(aws),
            snowflake=snowflake,
            name=f"dynamodb-to-snowflake-{plan.application_name}-{plan.table}",
            label=f"plan of batch {plan.batch_id} of DynamoDB table {plan.table}",
            attempt_id=key.attempt_id,
        )
        return self.finish_table_batch(key, plan.target.destination, snowflake, table=plan.table)

    def start_table_batch(
        self,
        plan: TableBatchPlan,
        *,
        aws: KinesisStreamHook,
        application: str | None = None,
    ) -> DetachedRun:
        """Start the data plane of one DynamoDB table batch on the managed platform, as
        :meth:`run_table_batch` does, without waiting for it (:meth:`start_work`): a deferred task's submit step."""
        return self.start_work(
            plan,
            self._batch_key(plan),
            application=application or DYNAMODB_APPLICATION,
            aws=_StreamsLocation(aws),
            name=f"dynamodb-to-snowflake-{plan.application_name}-{plan.table}",
            label=f"plan of batch {plan.batch_id} of DynamoDB table {plan.table}",
        )

    def finish_table_batch(
        self, key: OutcomeKey, destination: Destination, snowflake: KinesisSnowflakeHook, *, table: str
    ) -> TableBatchResult:
        """After a DynamoDB table batch's job ended (waited for here or elsewhere): read back what it
        applied, and log the driver's report when the driver ran elsewhere.

        :param table: the DynamoDB table, in errors.
        :raises AirflowException: the job recorded no outcome.
        """
        what = f"batch {key.batch_id} of DynamoDB table {table}"
        recorded = self.read_outcome(destination, key, snowflake, names=DYNAMODB_SUPPORT_NAMES, what=what)
        result = TableBatchResult.from_batch_result(recorded)
        if self.deploy_mode == CLUSTER:
            self._log_entries(table_report_entries(result))
        return result

    def run_table_continuous(
        self,
        run: TableContinuousRun,
        *,
        aws: KinesisStreamHook,
        snowflake: KinesisSnowflakeHook,
        application: str | None = None,
        on_batch: Callable[[TableBatchResult], None] | None = None,
    ) -> list[TableBatchResult]:
        """Sync one DynamoDB table in continuous mode and read back, from Snowflake, every batch it applied.

        The driver runs the table's sync itself (:mod:`~airflow_kinesis_snowflake.core.dynamodb_continuous`),
        reaching the lease table, the table, its stream and Snowflake with the job's credentials, until
        ``run.max_runtime_seconds``; ``--continuous`` carries the encoded run (no credential in it).
        Each batch records its outcome under this submission's ``--attempt`` id, read here once
        spark-submit returned.

        :param aws: as for :meth:`run_table_batch`.
        :param on_batch: called with each batch as it commits, while the application runs (its metrics).
        :returns: the batches' results, oldest first.
        :raises AirflowException: spark-submit fails; the batches committed before stay committed,
            and the next run plans from the ledgers in Snowflake.
        """
        committed = None if on_batch is None else lambda item: on_batch(TableBatchResult.from_batch_result(item[1]))
        recorded = self.run_continuously(
            run,
            run.sync.target.destination,
            names=DYNAMODB_SUPPORT_NAMES,
            application=application or DYNAMODB_APPLICATION,
            aws=_StreamsLocation(aws),
            snowflake=snowflake,
            name=f"dynamodb-to-snowflake-{run.sync.application_name}-{run.sync.table}",
            what=run.sync.table,
            on_outcome=committed,
        )
        results = [TableBatchResult.from_batch_result(result) for _, result in recorded]
        if self.deploy_mode == CLUSTER:
            for result in results:
                self._log_entries(table_report_entries(result))
        return results

    def on_kill(self) -> None:
        """Stop the job: cancel the platform's job run, else kill spark-submit as ``SparkSubmitHook`` does."""
        if self.submitter is not None:
            self.submitter.cancel()
            return
        super().on_kill()

    def _mask_cmd(self, connection_cmd: str | list[str]) -> str:
        """The command as logged and quoted in errors: the encoded plan by its batch and length."""
        if self._plan_argument and isinstance(connection_cmd, list):
            connection_cmd = [self._plan_label if arg == self._plan_argument else arg for arg in connection_cmd]
        return super()._mask_cmd(connection_cmd)

    def submit(self, application: str = "", **kwargs: Any) -> Any:
        """Run spark-submit as ``SparkSubmitHook`` does, after :meth:`check_credential_delivery`.

        Returns what ``SparkSubmitHook.submit`` returns: the driver id with recent Spark providers,
        None with earlier ones.

        :raises AirflowException: when spark-submit fails: with the last error lines of its output
            (the last lines when it wrote none at ERROR), masked by Airflow's secret masker.
        """
        self.check_credential_delivery()
        self._output_tail = None
        try:
            return super().submit(application, **kwargs)
        except AirflowException as err:
            raise AirflowException(self._failure_message(err)) from None

    def _failure_message(self, err: AirflowException) -> str:
        """What failed and the last lines that say why, for the exception that replaces ``err``."""
        process = getattr(self, "_submit_sp", None)
        code = process.returncode if process is not None else None
        if code:
            what = f"The Spark job {self._name} failed: spark-submit exited with code {code}"
        else:
            what = str(err)  # a Kubernetes driver's exit code, a standalone driver's state
        tail = self._output_tail
        if tail is None or not (tail.errors or tail.last):
            return str(redact(f"{what}; it wrote nothing."))
        which = "error lines" if tail.errors else "lines (none at ERROR)"
        lines = "\n".join(f"  {line}" for line in tail.errors or tail.last)
        return str(redact(f"{what}. Its last {which}, of the output in the task log:\n{lines}"))

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        """Forward spark-submit's output to the task log, each line at its level
        (:func:`~airflow_kinesis_snowflake.core.job_log.read_output_line`): the job's warnings and errors,
        and Spark's WARN and ERROR lines, at WARNING and ERROR; the rest at INFO through ``SparkSubmitHook``,
        which reads them for the YARN application id and the Kubernetes driver pod. The last lines are
        kept for the exception of a failed job (:meth:`submit`)."""
        self._output_tail = OutputTail()
        super()._process_spark_submit_log(self._info_lines(itr, self._output_tail))

    def _info_lines(self, itr: Iterator[Any], tail: OutputTail) -> Iterator[str]:
        """The lines of ``itr`` below WARNING; those at WARNING and above are logged here."""
        previous: OutputLine | None = None
        for raw in itr:
            line = previous = read_output_line(str(raw).rstrip("\r\n"), previous)
            tail.add(line)
            if line.level >= logging.WARNING:
                self._log_entries([(line.level, line.text)])
            else:
                yield line.text

    def _log_entries(self, entries: list[tuple[int, str]]) -> None:
        """Log each ``(level, text)`` at its level."""
        for level, text in entries:
            if level >= logging.ERROR:
                self.log.error("%s", text)
            elif level >= logging.WARNING:
                self.log.warning("%s", text)
            else:
                self.log.info("%s", text)


class PlatformSubmitter(Protocol):
    """How the job runs on a managed Spark platform, the driver there with its own identity
    (:mod:`~airflow_kinesis_snowflake.hooks.platforms` builds one from ``spark.platform``)."""

    platform: str

    def check(self, hook: SparkJobSubmitHook) -> None:
        """Refuse, before any side effect, a submission that cannot run on the platform.

        :raises AirflowException: naming the field to change and how.
        """
        ...

    def submit(
        self,
        hook: SparkJobSubmitHook,
        application: str,
        arguments: list[str],
        *,
        name: str,
        label: str,
        location: dict[str, str],
    ) -> None:
        """Run ``application`` (a local PySpark file) with ``arguments`` and wait until it ends.

        :param hook: the job's hook: its Spark settings and sizes.
        :param name: the job's name.
        :param label: what stands for the encoded work in logs and errors.
        :param location: region and endpoints of AWS for the driver (no credentials).
        :raises AirflowException: the job did not succeed, with what its driver wrote last.
        """
        ...

    def start(
        self,
        hook: SparkJobSubmitHook,
        application: str,
        arguments: list[str],
        *,
        name: str,
        label: str,
        location: dict[str, str],
    ) -> str:
        """:meth:`submit` without the wait (a deferred task's submit step): the job run's id."""
        ...

    def run_state(self, job_run_id: str) -> JobRunState:
        """The job run's state, read once (the deferred wait polls it)."""
        ...

    def finish(self, job_run_id: str, name: str) -> None:
        """Raise unless the ended job run ``job_run_id`` succeeded, with what its driver wrote last."""
        ...

    @property
    def wait_seconds(self) -> float | None:
        """How long a wait for one job run lasts at most; None: unbounded."""
        ...

    def stop(self, job_run_id: str) -> None:
        """Stop the job run ``job_run_id`` and wait until it ended (a deferred wait that ran out)."""
        ...

    def cancel(self) -> None:
        """Stop the job this submitter is running, if any (the task is being killed)."""
        ...


class JobLocation(Protocol):
    """Where a job reaches AWS: an AWS connection's hook (:class:`~.kinesis.KinesisStreamHook`) or alike."""

    def job_environment(self) -> dict[str, str]:
        """Region, endpoints and the connection's credentials, as ``AWS_*`` variables."""
        ...

    def job_location(self) -> dict[str, str]:
        """Region and endpoints only (the driver uses its own identity)."""
        ...


class _StreamsLocation:
    """An AWS hook's job environment, with the DynamoDB Streams endpoint when the connection sets one."""

    def __init__(self, aws: Any) -> None:
        self.aws = aws

    def _streams(self) -> dict[str, str]:
        endpoint = self.aws.conn_config.get_service_endpoint_url(service_name="dynamodbstreams")
        return {STREAMS_ENDPOINT_ENV: endpoint} if endpoint else {}

    def job_environment(self) -> dict[str, str]:
        return {**self.aws.job_environment(), **self._streams()}

    def job_location(self) -> dict[str, str]:
        return {**self.aws.job_location(), **self._streams()}


def __getattr__(name: str) -> Any:
    """``KinesisJobSubmitHook``, the hook's name before it ran every source's job: still importable,
    with a deprecation warning, until the next major version."""
    if name == "KinesisJobSubmitHook":
        warnings.warn(
            "KinesisJobSubmitHook is renamed SparkJobSubmitHook (it runs the job of every source); "
            "import airflow_kinesis_snowflake.hooks.spark.SparkJobSubmitHook instead",
            AirflowProviderDeprecationWarning,
            stacklevel=2,
        )
        return SparkJobSubmitHook
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
