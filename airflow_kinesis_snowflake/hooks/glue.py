"""The job on AWS Glue: a run of the connector's Glue job per submission, through the Amazon
provider's :class:`~airflow.providers.amazon.aws.hooks.glue.GlueJobHook`.

The Glue job is the task's, as with ``GlueJobOperator`` and a script location: created when it is
missing and updated when its definition differs (``update_config``): its script the entry point of
:mod:`spark_jobs.glue_to_snowflake` (the same engine driver for every source, which keeps its own
arguments among Glue's), its role, Glue version, worker type and number of workers the connector's.
The script and the package zip are uploaded to the artifacts location, content-addressed
(:mod:`~airflow_kinesis_snowflake.hooks.artifacts`), so a new version never replaces the files of a
running job. StartJobRun passes the job's arguments (the encoded plan, the attempt id, the Snowflake
connection's secret name) as ``--key value`` run arguments, the zip as ``--extra-py-files``, the
task's Spark settings and the executors' environment as ``--conf``, and the driver's environment
(region and endpoints of AWS, no credential) as ``--driver-env``. The driver runs as the job's role
and reads the Snowflake connection from Secrets Manager. The task waits with the hook's
``job_completion`` (or defers, and the triggerer reads the run's state), then reads the outcome from
Snowflake as after spark-submit; a run that did not succeed raises with its ``ErrorMessage`` and the
driver's last lines (from CloudWatch Logs).
``on_kill`` stops the run (BatchStopJobRun) and waits until it is STOPPED.
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.hooks.glue import GlueJobHook
from airflow.providers.amazon.aws.hooks.logs import AwsLogsHook
from botocore.exceptions import BotoCoreError, ClientError

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.config import GLUE_PLATFORM
from airflow_kinesis_snowflake.core.engine.detached import JobRunState
from airflow_kinesis_snowflake.core.job_log import OutputTail
from airflow_kinesis_snowflake.hooks.artifacts import SOURCE_APPLICATIONS, upload_job_artifacts
from airflow_kinesis_snowflake.hooks.managed import (
    ManagedSubmitter,
    Submission,
    check_argument_size,
    check_driver_identity,
    driver_tail,
    failure_message,
    spark_settings,
    wait_until_ended,
)
from airflow_kinesis_snowflake.spark_jobs import glue_to_snowflake

if TYPE_CHECKING:
    from airflow_kinesis_snowflake.hooks.spark import SparkJobSubmitHook

# The script of the Glue job: the engine driver's entry point for Glue's arguments, for every source.
GLUE_APPLICATION = glue_to_snowflake.__file__
# Glue refuses a job run whose arguments (keys and values) come to more than 260 KB.
GLUE_ARGUMENTS_LIMIT = 260 * 1024
# The states a Glue job run ends in.
ENDED_STATES = frozenset({"SUCCEEDED", "FAILED", "STOPPED", "TIMEOUT", "ERROR", "EXPIRED"})
# Glue's default Timeout of a job run, in minutes.
DEFAULT_TIMEOUT_MINUTES = 2880
# The driver's lines read back from each CloudWatch Logs stream of a failed run.
LOG_LINES = 200
EXECUTOR_ENV_SETTING = "spark.executorEnv."


def conf_argument(settings: dict[str, str]) -> str:
    """Spark settings as the value of Glue's ``--conf`` job argument: ``k=v --conf k2=v2 ...``."""
    return " --conf ".join(f"{key}={value}" for key, value in settings.items())


class GlueSubmitter(ManagedSubmitter):
    """Runs the job as a run of an AWS Glue job and waits for it (a
    :class:`~airflow_kinesis_snowflake.hooks.spark.PlatformSubmitter`).

    :param job_name: the Glue job; created or updated to the definition below on each submission.
    :param role_arn: the job's IAM role: the driver's AWS identity.
    :param artifacts: ``s3://bucket/prefix`` of the script and the package zip.
    :param worker_type: the job's ``WorkerType``.
    :param number_of_workers: the job's ``NumberOfWorkers``.
    :param glue_version: the job's ``GlueVersion`` (5.0: Spark 3.5, Python 3.11).
    :param timeout_minutes: StartJobRun's ``Timeout`` (Glue's default, 2,880, when None).
    :param max_concurrent_runs: the job's ``MaxConcurrentRuns``.
    :param additional_python_modules: the run's ``--additional-python-modules`` (pip requirements).
    :param aws_conn_id: the AWS connection that calls Glue, S3 and CloudWatch Logs.
    :param region_name: its region; the connection's when None.
    :param poll_seconds: seconds between two reads of the job run's state.
    """

    platform = GLUE_PLATFORM

    def __init__(
        self,
        *,
        job_name: str,
        role_arn: str,
        artifacts: str,
        worker_type: str = "G.1X",
        number_of_workers: int = 2,
        glue_version: str = "5.0",
        timeout_minutes: int | None = None,
        max_concurrent_runs: int = 1,
        additional_python_modules: list[str] | None = None,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        poll_seconds: int = 30,
    ) -> None:
        super().__init__(
            artifacts=artifacts, aws_conn_id=aws_conn_id, region_name=region_name, poll_seconds=poll_seconds
        )
        self.job_name, self.role_arn = job_name, role_arn
        self.worker_type, self.number_of_workers, self.glue_version = worker_type, number_of_workers, glue_version
        self.timeout_minutes, self.max_concurrent_runs = timeout_minutes, max_concurrent_runs
        self.additional_python_modules = list(additional_python_modules or [])

    def glue(self, script_location: str | None = None) -> GlueJobHook:
        """The Amazon provider's Glue job hook, defining the job with ``script_location`` as its script."""
        create_job_kwargs: dict[str, Any] = {
            "GlueVersion": self.glue_version,
            "WorkerType": self.worker_type,
            "NumberOfWorkers": self.number_of_workers,
        }
        if script_location is not None:
            create_job_kwargs["Command"] = {"Name": "glueetl", "ScriptLocation": script_location, "PythonVersion": "3"}
        return GlueJobHook(
            job_name=self.job_name,
            desc="Loads a connector's batches into Snowflake (airflow-provider-kinesis-snowflake)",
            script_location=script_location,
            iam_role_arn=self.role_arn,
            concurrent_run_limit=self.max_concurrent_runs,
            retry_limit=0,  # a batch is retried by its task, which plans it again
            create_job_kwargs=create_job_kwargs,
            update_config=True,
            job_poll_interval=self.poll_seconds,
            aws_conn_id=self.aws_conn_id,
            region_name=self.region_name,
        )

    @cached_property
    def logs(self) -> AwsLogsHook:
        """The Amazon provider's CloudWatch Logs hook of the AWS connection (the driver's output)."""
        return AwsLogsHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)

    def check(self, hook: SparkJobSubmitHook) -> None:
        """Refuse a Spark connection without ``driver_identity`` and ``snowflake_connection_ref``
        (:func:`~airflow_kinesis_snowflake.hooks.managed.check_driver_identity`): on Glue the driver
        runs as the job's role."""
        check_driver_identity(
            hook, platform=GLUE_PLATFORM, role=f"the Glue job's role {self.role_arn}", anchor="aws-glue"
        )

    @staticmethod
    def script(application: str) -> str:
        """The Glue job's script for ``application``: :data:`GLUE_APPLICATION` for a source's packaged
        entry point, else ``application`` itself."""
        return GLUE_APPLICATION if application in SOURCE_APPLICATIONS.values() else application

    def run_arguments(
        self, hook: SparkJobSubmitHook, arguments: list[str], package: str, location: dict[str, str]
    ) -> dict[str, str]:
        """StartJobRun's ``Arguments``: the job's (``--flag value`` pairs), the package zip as
        ``--extra-py-files``, the driver's environment as ``--driver-env``, as ``--conf`` the task's
        Spark settings, Spark's log level and the executors' environment (region and endpoints), and
        the libraries Glue installs (``--additional-python-modules``) when there are any."""
        run = dict(zip(arguments[::2], arguments[1::2], strict=True))
        settings = spark_settings(hook, sizes=False)  # the worker type sizes the driver and executors
        settings.update({f"{EXECUTOR_ENV_SETTING}{name}": value for name, value in location.items()})
        run["--extra-py-files"] = package
        run[glue_to_snowflake.DRIVER_ENV_ARG] = json.dumps(location, sort_keys=True)
        run["--conf"] = conf_argument(settings)
        if self.additional_python_modules:
            run["--additional-python-modules"] = ",".join(self.additional_python_modules)
        return run

    def _start(self, job: Submission) -> str:
        """Upload the artifacts, define the job and start a run of it (see the module); its id.

        :param job: its ``application`` is the source's entry point, run on Glue by :data:`GLUE_APPLICATION`, which
            runs the same driver; another file (the operators' ``application``) is the job's script
            itself, and gets Glue's arguments with the job's.
        :raises AirflowException: arguments too large for StartJobRun (before anything is uploaded).
        """
        hook, arguments, name, label, location = job.hook, job.arguments, job.name, job.label, job.location
        # The package's key is not known before it is built: the size of an S3 URI of it stands for it.
        stand_in = self.run_arguments(
            hook, arguments, f"{self.artifacts}/sha256-{'0' * 64}/kinesis_snowflake_core.zip", location
        )
        size = sum(len(key.encode()) + len(value.encode()) for key, value in stand_in.items())
        check_argument_size(
            f"{label} with the run's other arguments ({size:,} bytes)",
            size,
            GLUE_ARGUMENTS_LIMIT,
            "bytes Glue takes in one job run's arguments",
        )
        script, package = upload_job_artifacts(self.s3, self.artifacts, self.script(job.application))
        glue = self.glue(script.uri)
        run_kwargs = {"Timeout": self.timeout_minutes} if self.timeout_minutes is not None else {}
        started = glue.initialize_job(self.run_arguments(hook, arguments, package.uri, location), run_kwargs)
        job_run_id: str = started["JobRunId"]
        self.log.info(
            "Glue job run %s of job %s started: %s %s (%s, from %s), --extra-py-files %s",
            job_run_id,
            self.job_name,
            script.uri,
            label,
            name,
            job.application,
            package.uri,
        )
        return job_run_id

    @property
    def wait_seconds(self) -> float:
        """A little beyond the run's own timeout (Glue's default, 2,880 minutes, when None), after which Glue
        ends it TIMEOUT."""
        return (self.timeout_minutes or DEFAULT_TIMEOUT_MINUTES) * 60 + 10 * self.poll_seconds

    def _wait_for_run(self, job_run_id: str, name: str) -> None:
        """Wait for the job run to end, with the hook's ``job_completion``."""
        try:
            self.glue().job_completion(self.job_name, job_run_id)
        except AirflowException:  # FAILED or TIMEOUT: finish says how
            pass

    def run_state(self, job_run_id: str) -> JobRunState:
        """The job run's state and error message (GetJobRun)."""
        run = self.glue().conn.get_job_run(JobName=self.job_name, RunId=job_run_id)["JobRun"]
        state = str(run["JobRunState"])
        return JobRunState(
            state, state in ENDED_STATES, state == "SUCCEEDED", str(run.get("ErrorMessage") or "").strip()
        )

    def failure(self, job_run_id: str, name: str) -> str:
        """The job run's end, its error message and its driver's last error lines (its last lines when
        none is at ERROR)."""
        run = self.glue().conn.get_job_run(JobName=self.job_name, RunId=job_run_id)["JobRun"]
        error = str(run.get("ErrorMessage") or "").strip()
        what = (
            f"The Spark job {name} failed on AWS Glue: job run {job_run_id} of job {self.job_name} ended "
            f"{run['JobRunState']}" + (f" ({error})" if error else "")
        )
        tail, where = self._driver_output(run)
        return failure_message(what, tail, where, "no driver output was found in CloudWatch Logs")

    def _driver_output(self, run: dict[str, Any]) -> tuple[OutputTail | None, str]:
        """The driver's last lines from CloudWatch Logs: the error log group (stderr: the Python driver's
        traceback and Spark's log) then the output group (stdout), in the run's stream."""
        texts, found = [], []
        for group in reversed(_log_groups(run)):
            try:
                events = self.logs.conn.get_log_events(
                    logGroupName=group, logStreamName=run["Id"], startFromHead=False, limit=LOG_LINES
                )["events"]
            except (ClientError, BotoCoreError) as err:  # the logs only explain a failure raised anyway
                self.log.warning("The driver's output could not be read from %s: %s", group, err)
                continue
            if events:
                found.append(f"{group}/{run['Id']}")
                texts.append("\n".join(str(event["message"]).rstrip("\n") for event in events))
        return (driver_tail(texts) if found else None), " and ".join(found)

    def _stop(self, job_run_id: str) -> None:
        """Stop the job run ``job_run_id`` and wait until it is STOPPED (the task is being killed)."""
        self.log.info("Stopping Glue job run %s of job %s", job_run_id, self.job_name)
        conn = self.glue().conn
        conn.batch_stop_job_run(JobName=self.job_name, JobRunIds=[job_run_id])
        wait_until_ended(
            conn.get_job_run,
            {"JobName": self.job_name, "RunId": job_run_id},
            ["JobRun", "JobRunState"],
            ENDED_STATES,
            poll_seconds=self.poll_seconds,
        )


def _log_groups(run: dict[str, Any]) -> tuple[str, str]:
    """The output and error log groups of a Glue job run (the Amazon provider's
    ``get_glue_log_group_names``, which older providers lack: 9.6 among them)."""
    try:
        from airflow.providers.amazon.aws.hooks.glue import get_glue_log_group_names
    except ImportError:
        prefix = run["LogGroupName"]
        return f"{prefix}/output", f"{prefix}/error"
    return get_glue_log_group_names(run)
