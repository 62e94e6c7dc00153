"""The job on Amazon EMR Serverless: a job run per submission, through the Amazon provider's
:class:`~airflow.providers.amazon.aws.hooks.emr.EmrServerlessHook`.

The entry point and the package zip are uploaded to the connector's artifacts location,
content-addressed (:mod:`~airflow_kinesis_snowflake.hooks.artifacts`); StartJobRun runs the entry
point with the job's arguments (the encoded plan, the attempt id, the Snowflake connection's secret
name), ``--py-files`` the zip, and the driver's logs go to ``<artifacts>/logs``. The driver runs
as the application's execution role and reads the Snowflake connection from Secrets Manager: no
credential is in the job run's arguments or Spark settings. The task waits with the provider's
waiter for the run to end (or defers, and the triggerer reads the run's state), then reads the
outcome from Snowflake as after spark-submit; a failed run's state details and its driver's last
error lines (from the logs on S3) make the exception. ``on_kill`` cancels the job run.
"""

from __future__ import annotations

import gzip
import shlex
import uuid
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.hooks.emr import EmrServerlessHook
from airflow.providers.amazon.aws.utils.waiter_with_logging import wait
from botocore.exceptions import BotoCoreError, ClientError

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.config import EMR_SERVERLESS_PLATFORM
from airflow_kinesis_snowflake.core.engine.detached import JobRunState
from airflow_kinesis_snowflake.core.job_log import OutputTail
from airflow_kinesis_snowflake.hooks.artifacts import split_location, upload_job_artifacts
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

if TYPE_CHECKING:
    from airflow_kinesis_snowflake.hooks.spark import SparkJobSubmitHook

# StartJobRun refuses an entry point argument longer than this (jobDriver.sparkSubmit.entryPointArguments).
EMR_ARGUMENT_LIMIT = 10_280
# Spark settings that give the driver and the executors environment variables on EMR Serverless.
DRIVER_ENV_SETTING = "spark.emr-serverless.driverEnv."
EXECUTOR_ENV_SETTING = "spark.executorEnv."
# EMR Serverless's default executionTimeoutMinutes.
DEFAULT_TIMEOUT_MINUTES = 720
# Where EMR Serverless writes a job run's driver output under the monitoring configuration's logUri.
DRIVER_LOG = "{log_uri}/applications/{application_id}/jobs/{job_run_id}/SPARK_DRIVER/{stream}.gz"


class EmrServerlessSubmitter(ManagedSubmitter):
    """Runs the job on an EMR Serverless application and waits for it (a
    :class:`~airflow_kinesis_snowflake.hooks.platforms.PlatformSubmitter`).

    :param application_id: the EMR Serverless application (type Spark).
    :param execution_role_arn: the job runtime role: the driver's AWS identity.
    :param artifacts: ``s3://bucket/prefix`` of the entry point, the package zip and the driver logs.
    :param execution_timeout_minutes: StartJobRun's ``executionTimeoutMinutes`` (720 when None).
    :param aws_conn_id: the AWS connection that calls EMR Serverless and S3.
    :param region_name: its region; the connection's when None.
    :param poll_seconds: seconds between two reads of the job run's state.
    """

    platform = EMR_SERVERLESS_PLATFORM

    def __init__(
        self,
        *,
        application_id: str,
        execution_role_arn: str,
        artifacts: str,
        execution_timeout_minutes: int | None = None,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        poll_seconds: int = 30,
    ) -> None:
        super().__init__(
            artifacts=artifacts, aws_conn_id=aws_conn_id, region_name=region_name, poll_seconds=poll_seconds
        )
        self.application_id, self.execution_role_arn = application_id, execution_role_arn
        self.execution_timeout_minutes = execution_timeout_minutes

    @cached_property
    def emr(self) -> EmrServerlessHook:
        """The Amazon provider's EMR Serverless hook of the AWS connection."""
        return EmrServerlessHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)

    @property
    def log_uri(self) -> str:
        """Where the job runs' logs go: ``<artifacts>/logs``."""
        return f"{self.artifacts}/logs"

    def check(self, hook: SparkJobSubmitHook) -> None:
        """Refuse a Spark connection without ``driver_identity`` and ``snowflake_connection_ref``
        (:func:`~airflow_kinesis_snowflake.hooks.managed.check_driver_identity`): on EMR Serverless the
        driver runs as the execution role."""
        check_driver_identity(
            hook,
            platform=EMR_SERVERLESS_PLATFORM,
            role=f"the execution role {self.execution_role_arn}",
            anchor="emr-serverless",
        )

    def spark_parameters(self, hook: SparkJobSubmitHook, package: str, location: dict[str, str]) -> str:
        """StartJobRun's ``sparkSubmitParameters``: the package zip as ``--py-files``, the task's Spark
        settings and sizes, Spark's log level (``spark.log_level``, WARN by default), and the region and
        endpoints of AWS (no credentials) as the driver's and executors' environment."""
        settings = spark_settings(hook)
        for name, value in location.items():
            settings[f"{DRIVER_ENV_SETTING}{name}"] = value
            settings[f"{EXECUTOR_ENV_SETTING}{name}"] = value
        words = ["--py-files", package]
        for key, value in settings.items():
            words += ["--conf", f"{key}={value}"]
        return shlex.join(words)

    def _start(self, job: Submission) -> str:
        """Upload the artifacts and start the job run (see the module); its id.

        :raises AirflowException: an argument too long for StartJobRun (before anything is submitted).
        """
        hook, arguments, name, label = job.hook, job.arguments, job.name, job.label
        if too_long := [argument for argument in arguments if len(argument) > EMR_ARGUMENT_LIMIT]:
            shown = label if too_long[0] == hook._plan_argument else f"an argument of {len(too_long[0])} characters"
            check_argument_size(
                shown, len(too_long[0]), EMR_ARGUMENT_LIMIT, "characters EMR Serverless takes in one job argument"
            )
        entry_point, package = upload_job_artifacts(self.s3, self.artifacts, job.application)
        self._start_application()
        request: dict[str, Any] = {
            "applicationId": self.application_id,
            "executionRoleArn": self.execution_role_arn,
            "clientToken": uuid.uuid4().hex,
            "name": name,
            "jobDriver": {
                "sparkSubmit": {
                    "entryPoint": entry_point.uri,
                    "entryPointArguments": arguments,
                    "sparkSubmitParameters": self.spark_parameters(hook, package.uri, job.location),
                }
            },
            "configurationOverrides": {
                "monitoringConfiguration": {"s3MonitoringConfiguration": {"logUri": f"{self.log_uri}/"}}
            },
        }
        if self.execution_timeout_minutes is not None:
            request["executionTimeoutMinutes"] = self.execution_timeout_minutes
        job_run_id: str = self.emr.conn.start_job_run(**request)["jobRunId"]
        self.log.info(
            "EMR Serverless job run %s of application %s started: %s %s (%s), --py-files %s",
            job_run_id,
            self.application_id,
            entry_point.uri,
            label,
            name,
            package.uri,
        )
        return job_run_id

    def _start_application(self) -> None:
        """Start the application when it is not (EMR Serverless starts one on a job run only when its
        auto-start is on), as the Amazon provider's operator does."""
        state = self.emr.conn.get_application(applicationId=self.application_id)["application"]["state"]
        if state in EmrServerlessHook.APPLICATION_SUCCESS_STATES:
            return
        self.log.info("EMR Serverless application %s is %s: starting it", self.application_id, state)
        self.emr.conn.start_application(applicationId=self.application_id)
        wait(
            waiter=self.emr.get_waiter("serverless_app_started"),
            waiter_delay=self.poll_seconds,
            waiter_max_attempts=max(1, 30 * 60 // self.poll_seconds),
            args={"applicationId": self.application_id},
            failure_message="EMR Serverless application failed to start",
            status_message="EMR Serverless application is",
            status_args=["application.state", "application.stateDetails"],
        )

    @property
    def wait_seconds(self) -> float:
        """A little beyond the run's own timeout (720 minutes by default), after which EMR Serverless cancels it."""
        return (self.execution_timeout_minutes or DEFAULT_TIMEOUT_MINUTES) * 60 + 10 * self.poll_seconds

    def _wait_for_run(self, job_run_id: str, name: str) -> None:
        """Wait for the job run to end, with the provider's waiter; a wait that runs out cancels it and raises."""
        try:
            wait(
                waiter=self.emr.get_waiter("serverless_job_completed"),
                waiter_delay=self.poll_seconds,
                waiter_max_attempts=int(self.wait_seconds // self.poll_seconds),
                args={"applicationId": self.application_id, "jobRunId": job_run_id},
                failure_message=f"EMR Serverless job run {job_run_id} failed",
                status_message=f"EMR Serverless job run {job_run_id} is",
                status_args=["jobRun.state", "jobRun.stateDetails"],
            )
        except AirflowException as err:
            if "max attempts reached" in str(err):  # the wait ran out (WaiterMaxAttemptsError in recent providers)
                self.cancel()
                raise
            # It ended without success: finish says how.

    def run_state(self, job_run_id: str) -> JobRunState:
        """The job run's state and state details (GetJobRun); CANCELLING has not ended."""
        run = self.emr.conn.get_job_run(applicationId=self.application_id, jobRunId=job_run_id)["jobRun"]
        state = str(run["state"])
        ended = state in EmrServerlessHook.JOB_TERMINAL_STATES - {"CANCELLING"}
        details = str(run.get("stateDetails") or "").strip()
        return JobRunState(state, ended, state in EmrServerlessHook.JOB_SUCCESS_STATES, details)

    def failure(self, job_run_id: str, name: str) -> str:
        """The job run's end and its driver's last error lines (its last lines when none is at ERROR)."""
        state = self.run_state(job_run_id)
        what = (
            f"The Spark job {name} failed on EMR Serverless: job run {job_run_id} of application "
            f"{self.application_id} ended {state.state}" + (f" ({state.details})" if state.details else "")
        )
        tail, where = self._driver_output(job_run_id)
        return failure_message(what, tail, where, f"no driver log was found under {self.log_uri}")

    def _driver_output(self, job_run_id: str) -> tuple[OutputTail | None, str]:
        """The driver's stderr then stdout (where the Python driver's own output and traceback are), as EMR
        Serverless uploaded them under the log URI."""
        bucket, _ = split_location(self.log_uri)
        texts, found = [], []
        for stream in ("stderr", "stdout"):
            uri = DRIVER_LOG.format(
                log_uri=self.log_uri, application_id=self.application_id, job_run_id=job_run_id, stream=stream
            )
            key = uri[len(f"s3://{bucket}/") :]
            try:
                if not self.s3.check_for_key(key, bucket_name=bucket):
                    continue
                text = gzip.decompress(self.s3.get_key(key, bucket_name=bucket).get()["Body"].read())
            except (ClientError, BotoCoreError, OSError) as err:  # the logs only explain a failure raised anyway
                self.log.warning("The driver's %s could not be read from %s: %s", stream, uri, err)
                continue
            found.append(uri)
            texts.append(text.decode("utf-8", "replace"))
        return (driver_tail(texts) if found else None), " and ".join(found)

    def _stop(self, job_run_id: str) -> None:
        """Cancel the job run ``job_run_id`` and wait until it ended (the task is being killed)."""
        self.log.info("Cancelling EMR Serverless job run %s of application %s", job_run_id, self.application_id)
        self.emr.conn.cancel_job_run(applicationId=self.application_id, jobRunId=job_run_id)
        wait_until_ended(
            self.emr.conn.get_job_run,
            {"applicationId": self.application_id, "jobRunId": job_run_id},
            ["jobRun", "state"],
            EmrServerlessHook.JOB_TERMINAL_STATES - {"CANCELLING"},
            poll_seconds=self.poll_seconds,
        )
