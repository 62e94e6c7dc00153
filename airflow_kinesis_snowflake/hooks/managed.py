"""The steps every managed Spark platform's submitter takes alike
(:mod:`~airflow_kinesis_snowflake.hooks.platforms`): the refusal of a driver without its own identity
(:func:`check_driver_identity`), the task's Spark settings (:func:`spark_settings`), the refusal of a
plan too large for the platform's job arguments (:func:`check_argument_size`), the exception of a run
that did not succeed with its driver's last lines (:func:`driver_tail`, :func:`failure_message`), and
the wait for a stopped run to end (:func:`wait_until_ended`); and what every submitter holds and
does around its platform's own steps (:class:`ManagedSubmitter`).

A submission is three steps, shared by the blocking and the deferred task: **submit** (check, upload,
start the run: :meth:`ManagedSubmitter.start`), **wait** (here, :meth:`ManagedSubmitter._wait_for_run`; or in
Airflow's triggerer, :class:`~airflow_kinesis_snowflake.triggers.spark_job.SparkJobRunTrigger`, which
reads :meth:`ManagedSubmitter.run_state`) and **finish** (:meth:`ManagedSubmitter.finish`: a run that
did not succeed raises with what its platform says and its driver's last lines).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.hooks.s3 import S3Hook

from airflow_kinesis_snowflake import docs_url
from airflow_kinesis_snowflake.compat import AirflowException, redact
from airflow_kinesis_snowflake.core.engine.detached import JobRunState
from airflow_kinesis_snowflake.core.job_log import SPARK_LOG_LEVEL_SETTING, OutputLine, OutputTail, read_output_line

if TYPE_CHECKING:
    from airflow_kinesis_snowflake.hooks.spark import SparkJobSubmitHook


SPARK_DOC = docs_url("spark")
# The SparkSubmitHook arguments a connector's spark: section may set, as the Spark settings they are.
_SIZING = {
    "_executor_memory": "spark.executor.memory",
    "_driver_memory": "spark.driver.memory",
    "_executor_cores": "spark.executor.cores",
    "_num_executors": "spark.executor.instances",
}


def check_driver_identity(hook: SparkJobSubmitHook, *, platform: str, role: str, anchor: str) -> None:
    """Refuse a Spark connection without ``driver_identity`` and ``snowflake_connection_ref``: on a
    managed platform the driver can only use its own identity (``role``), and the credentials this
    worker holds could reach it only as job arguments or Spark settings, which the platform shows to
    anyone who may read the run.

    :param platform: the ``spark.platform`` value, as the message names it.
    :param role: the role the driver runs as, e.g. ``the execution role arn:...``.
    :param anchor: the section of the Spark page of the docs that tells the platform's setup.
    :raises AirflowException: naming the connection, the extras to set, and that nothing was submitted.
    """
    if hook.driver_identity and hook.snowflake_connection_ref:
        return
    raise AirflowException(
        f"Spark connection {hook._conn_id!r} (connections.spark of the connector file): spark.platform "
        f"{platform} runs the driver as {role}, and the AWS and Snowflake credentials this worker holds "
        "could reach it only as job arguments or Spark settings, which the job run shows. Set the connection's "
        'extras "driver_identity": true and "snowflake_connection_ref": the AWS Secrets Manager secret (name or '
        "ARN) holding the Snowflake connection, which that role may read; nothing was submitted "
        f"({SPARK_DOC}#{anchor})."
    )


def spark_settings(hook: SparkJobSubmitHook, *, sizes: bool = True) -> dict[str, str]:
    """The task's Spark settings on a managed platform: its sizes (when the platform takes them), its
    ``conf``, and Spark's log level (``spark.log_level``, WARN by default)."""
    settings = {}
    if sizes:
        settings = {setting: str(value) for name, setting in _SIZING.items() if (value := getattr(hook, name, None))}
    settings.update({key: str(value) for key, value in hook._conf.items()})
    settings[SPARK_LOG_LEVEL_SETTING] = hook.spark_log_level  # WARN unless the connector says otherwise
    return settings


def check_argument_size(shown: str, size: int, limit: int, what: str) -> None:
    """Refuse, before anything is uploaded or submitted, job arguments the platform would refuse.

    :param shown: what is too large, e.g. the hook's plan label.
    :param size: its size, held against ``limit``.
    :param what: the limit's unit and what it bounds, e.g. "characters EMR Serverless takes in one job argument".
    :raises AirflowException: with the limit and the connector fields that make a plan smaller.
    """
    if size <= limit:
        return
    raise AirflowException(
        f"{shown} is longer than the {limit:,} {what}: lower batch.max_shards_per_batch (or the DynamoDB "
        "source's segments per batch) so that a batch's plan is smaller; nothing was submitted"
    )


def driver_tail(texts: Iterable[str]) -> OutputTail:
    """The last lines of a driver's output (``texts``: whole streams, e.g. stderr then stdout), read
    as the task log reads spark-submit's (:func:`~airflow_kinesis_snowflake.core.job_log.read_output_line`)."""
    tail = OutputTail()
    for text in texts:
        previous: OutputLine | None = None
        for raw in text.splitlines():
            previous = read_output_line(raw, previous)
            tail.add(previous)
    return tail


def failure_message(what: str, tail: OutputTail | None, where: str, nowhere: str) -> str:
    """The exception of a run that did not succeed: ``what`` ended how, then its driver's last error
    lines (its last lines when none is at ERROR) from ``where``, masked by Airflow's secret masker.

    :param nowhere: what to say when no driver output was found, e.g. where it was looked for.
    """
    if tail is None or not (tail.errors or tail.last):
        return str(redact(f"{what}; {nowhere}."))
    which = "error lines" if tail.errors else "lines (none at ERROR)"
    lines = "\n".join(f"  {line}" for line in tail.errors or tail.last)
    return str(redact(f"{what}. Its driver's last {which}, of {where}:\n{lines}"))


def wait_until_ended(
    get_state: Callable[..., Any],
    arguments: dict[str, Any],
    path: list[str],
    ended: Collection[str],
    *,
    poll_seconds: int,
    minutes: int = 5,
) -> None:
    """Wait, after a run was cancelled or stopped (the task is being killed), until it is in one of the
    ``ended`` states, with the Amazon provider's waiter.

    :param get_state: the client call that describes the run, called with ``arguments``.
    :param path: where its state is in the answer.
    :param minutes: how long to wait at most.
    """
    from airflow.providers.amazon.aws.utils.waiter import waiter

    waiter(
        get_state_callable=get_state,
        get_state_args=arguments,
        parse_response=path,
        desired_state=set(ended),
        failure_states=set(),
        object_type="job run",
        action="ended",
        countdown=minutes * 60,
        check_interval_seconds=poll_seconds,
    )


@dataclass(frozen=True)
class Submission:
    """One submission of the job to a managed platform: :meth:`ManagedSubmitter.submit`'s arguments."""

    hook: SparkJobSubmitHook
    application: str
    arguments: list[str]
    name: str
    label: str
    location: dict[str, str]


class ManagedSubmitter:
    """What every managed platform's submitter (a
    :class:`~airflow_kinesis_snowflake.hooks.spark.PlatformSubmitter`) holds: the AWS connection, the
    artifacts location, the poll interval and the job run it is running; and its ``submit``, ``start``,
    ``finish`` and ``cancel`` around the platform's own steps: ``check``, ``_start`` (upload, start a run,
    its id), ``_wait_for_run`` (until it ended, blocking), ``run_state`` (one read of its state), ``failure``
    (the exception's message of a run that did not succeed) and ``_stop``. A platform's submitter is a
    subclass with those; it is then deferrable too (``spark.deferrable``).

    :param artifacts: ``s3://bucket/prefix`` of the uploaded entry point and package zip.
    :param aws_conn_id: the AWS connection that calls the platform and S3.
    :param region_name: its region; the connection's when None.
    :param poll_seconds: seconds between two reads of the job run's state.
    """

    platform: str

    def __init__(self, *, artifacts: str, aws_conn_id: str | None, region_name: str | None, poll_seconds: int) -> None:
        self.log = logging.getLogger(f"airflow.task.hooks.{type(self).__module__}.{type(self).__name__}")
        self.artifacts = artifacts.rstrip("/")
        self.aws_conn_id, self.region_name = aws_conn_id, region_name
        self.poll_seconds = poll_seconds
        self.job_run_id: str | None = None

    @cached_property
    def s3(self) -> S3Hook:
        """The Amazon provider's S3 hook of the AWS connection (the artifacts, and any driver logs there)."""
        return S3Hook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)

    def check(self, hook: SparkJobSubmitHook) -> None:
        """Refuse, before any side effect, a submission that cannot run on the platform."""
        raise NotImplementedError

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
        """Check the submission, then run it on the platform and wait until it ends (the platform's ``_run``).

        :raises AirflowException: a submission the platform would refuse (before anything is submitted),
            or the job run did not succeed: its state, what the platform says of it and the driver's last lines.
        """
        self.check(hook)
        try:
            self._run(Submission(hook, application, arguments, name, label, location))
        finally:
            self.job_run_id = None  # ended: nothing for on_kill to stop

    def _run(self, job: Submission) -> None:
        """Upload the artifacts, start a job run (its id in ``job_run_id``), wait until it ends, and
        raise unless it succeeded: :meth:`_start`, :meth:`_wait_for_run`, :meth:`finish`."""
        self.job_run_id = self._start(job)
        self._wait_for_run(self.job_run_id, job.name)
        self.finish(self.job_run_id, job.name)

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
        """The submit step alone, for a task that waits elsewhere (a deferred one): check the submission,
        then upload the artifacts and start the job run (the platform's ``_start``), without waiting.

        :returns: the job run's id on the platform.
        :raises AirflowException: a submission the platform would refuse; nothing was submitted.
        """
        self.check(hook)
        return self._start(Submission(hook, application, arguments, name, label, location))

    def _start(self, job: Submission) -> str:
        """Upload the artifacts and start a job run; its id."""
        raise NotImplementedError

    def _wait_for_run(self, job_run_id: str, name: str) -> None:
        """Wait here until the job run ended, whichever way (:meth:`finish` tells how); a wait that runs
        out stops the run and raises."""
        raise NotImplementedError

    def run_state(self, job_run_id: str) -> JobRunState:
        """The job run's state, read once (what a trigger polls)."""
        raise NotImplementedError

    def failure(self, job_run_id: str, name: str) -> str:
        """The exception's message for a job run that ended without success: how it ended, what the
        platform says of it, its driver's last lines."""
        raise NotImplementedError

    def finish(self, job_run_id: str, name: str) -> None:
        """The finish of an ended job run, whoever waited for it: nothing when it succeeded (its outcome is
        then read from Snowflake), else raise with what says why.

        :raises AirflowException: the run did not succeed: :meth:`failure`.
        """
        if not self.run_state(job_run_id).succeeded:
            raise AirflowException(self.failure(job_run_id, name))

    @property
    def wait_seconds(self) -> float | None:
        """How long a wait for one job run lasts at most: a little beyond the run's own timeout, after which
        the platform stops it; None when the run has none."""
        return None

    def stop(self, job_run_id: str) -> None:
        """Stop the job run ``job_run_id`` and wait until it ended (a deferred wait that ran out)."""
        self._stop(job_run_id)

    def cancel(self) -> None:
        """Stop the job run that is running, if one is, and wait until it ended (the task is being killed)."""
        if self.job_run_id is not None:
            self._stop(self.job_run_id)

    def _stop(self, job_run_id: str) -> None:
        """Stop the job run ``job_run_id`` and wait until it ended."""
        raise NotImplementedError
