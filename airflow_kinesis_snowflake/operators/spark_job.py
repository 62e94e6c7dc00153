"""What every task that runs a source's Spark job shares: its Spark settings, the job's hook on its
platform, where its metrics go besides Airflow's, ``on_kill``, and the deferred wait for a batch's
job run (:mod:`~airflow_kinesis_snowflake.core.engine.detached`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NoReturn, TypeVar

from airflow.providers.common.compat.sdk import conf
from airflow.sdk import Context

from airflow_kinesis_snowflake.config import SPARK_SUBMIT_ARGUMENTS, check_spark_conf
from airflow_kinesis_snowflake.core.engine.detached import (
    DetachedRun,
    JobDetached,
    detached_batch,
    wait_timeout,
)
from airflow_kinesis_snowflake.core.engine.leases import ResumedBatch
from airflow_kinesis_snowflake.core.load.snowflake_sink import OutcomeKey
from airflow_kinesis_snowflake.core.metrics import check_dimensions, check_namespace
from airflow_kinesis_snowflake.core.state.leases import LeaseOwner
from airflow_kinesis_snowflake.hooks.cloudwatch import cloudwatch_publisher
from airflow_kinesis_snowflake.hooks.platforms import deferrable_refusal, job_submit_hook
from airflow_kinesis_snowflake.hooks.spark import DetachablePlan, SparkJobSubmitHook
from airflow_kinesis_snowflake.metrics import Publish
from airflow_kinesis_snowflake.triggers.spark_job import SparkJobRunTrigger

P = TypeVar("P", bound=DetachablePlan)
R = TypeVar("R")


def spark_job_template_fields(*fields: str) -> tuple[str, ...]:
    """An operator's ``template_fields``: its own ``fields``, then the connections and the Spark settings
    that every task running a source's Spark job templates."""
    return (*fields, "aws_conn_id", "region_name", "snowflake_conn_id", "spark_conn_id", "spark_conf")


class SparkJobMixin:
    """Mixed into an operator, first among its bases; its ``__init__`` sets the Spark and metrics
    settings (``spark_conn_id``, ``spark_conf``, ``spark_submit``, ``spark_platform``, ``deferrable``,
    ``cloudwatch_namespace``, ``cloudwatch_dimensions``), which it documents, then calls
    :meth:`check_spark_job`. It has ``task_id``, ``aws_conn_id``, ``region_name`` and ``execution_timeout``.

    A deferrable task (:attr:`deferrable`) hands each batch's job run to Airflow's triggerer: its
    submit step starts the run (:meth:`submit_step`), the protocol stops with the run and its
    leases held (:class:`~airflow_kinesis_snowflake.core.engine.detached.JobDetached`), the task defers
    to :class:`~airflow_kinesis_snowflake.triggers.spark_job.SparkJobRunTrigger` (:meth:`defer_batch`)
    and resumes in ``execute_complete`` (:meth:`resumed`), whose finish
    (:meth:`~.SparkJobSubmitHook.finish_detached`) is the blocking path's.
    """

    task_id: str
    dag_id: str
    aws_conn_id: str | None
    region_name: str | None
    execution_timeout: Any
    log: Any
    defer: Callable[..., NoReturn]
    run_job: Callable[..., Any]  # the task's run: from execute, and from execute_complete with the event
    spark_conn_id: str | None
    spark_conf: dict[str, Any] | None
    spark_submit: dict[str, Any] | None
    spark_platform: dict[str, Any] | None
    deferrable: bool | None
    cloudwatch_namespace: str | None
    cloudwatch_dimensions: Sequence[str] | None

    def check_spark_job(self, *, continuous: bool = False) -> None:
        """Check the task's Spark and metrics settings, as its ``__init__`` set them (nothing is
        connected here); ``deferrable`` None becomes Airflow's ``[operators] default_deferrable`` where
        the task can defer (a managed platform, scheduled mode), else False.

        :param continuous: the task runs in continuous mode, which cannot defer.
        :raises ValueError: an unknown ``spark_submit`` argument, ``deferrable=True`` where the task cannot
            defer, or a CloudWatch namespace or dimension that cannot be.
        """
        if unknown := sorted(set(self.spark_submit or ()) - set(SPARK_SUBMIT_ARGUMENTS)):
            raise ValueError(f"spark_submit: {', '.join(unknown)} not among {', '.join(SPARK_SUBMIT_ARGUMENTS)}")
        self.spark_submit = dict(self.spark_submit or {})
        self.spark_platform = dict(self.spark_platform) if self.spark_platform else None
        refusal = deferrable_refusal(self.task_id, self.spark_platform, self.spark_conn_id, continuous=continuous)
        if self.deferrable and refusal is not None:
            raise ValueError(refusal)
        if self.deferrable is None:
            self.deferrable = refusal is None and conf.getboolean("operators", "default_deferrable", fallback=False)
        self.deferrable = bool(self.deferrable)
        if self.cloudwatch_namespace is not None:
            check_namespace(self.cloudwatch_namespace)
        if self.cloudwatch_dimensions is not None:
            self.cloudwatch_dimensions = check_dimensions(self.cloudwatch_dimensions)
        self._spark_hook: SparkJobSubmitHook | None = None

    def build_spark_hook(self, *, check: bool = False) -> SparkJobSubmitHook:
        """The job's hook of the Spark connection, with this task's Spark settings, on its platform;
        kept for :meth:`on_kill`. ``check``: its submission checked, so that one the job cannot run
        with fails before any lease is taken or anything recorded."""
        assert self.spark_conn_id is not None
        check_spark_conf(self.spark_conf or {}, f"spark_conf of task {self.task_id!r}")  # rendered, so here
        self._spark_hook = job_submit_hook(
            conn_id=self.spark_conn_id,
            conf=self.spark_conf,
            spark_submit=self.spark_submit or {},
            spark_platform=self.spark_platform,
            aws_conn_id=self.aws_conn_id,
            region_name=self.region_name,
        )
        if check:
            self._spark_hook.check_submission()
        return self._spark_hook

    def lease_owner(self, context: Context) -> str:
        """The lease owner this try writes: a retry takes over what an earlier try still holds."""
        return str(LeaseOwner.of_try(context.get("ti"), self.dag_id, self.task_id))

    @staticmethod
    def run_cutoff(context: Context) -> datetime | None:
        """The DAG run's start: shared by every try of the task, so a retry plans the same batch and reads
        up to the same records."""
        return getattr(context.get("dag_run"), "start_date", None)

    def publisher(self) -> Publish | None:
        """Where the metrics go besides Airflow's (CloudWatch, with ``metrics.cloudwatch``)."""
        return cloudwatch_publisher(
            self.cloudwatch_namespace,
            self.cloudwatch_dimensions,
            aws_conn_id=self.aws_conn_id,
            region_name=self.region_name,
        )

    def on_kill(self) -> None:
        """Stop the job: kill spark-submit, or cancel the platform's job run.

        A deferred task has no process to kill: Airflow cancels its trigger, and the job run goes on to
        its end, its commit guarded by the ledger; the next try finds it
        (:meth:`~.SparkJobSubmitHook.detaching_submit`).
        """
        if self._spark_hook is not None:
            self._spark_hook.on_kill()

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume once the deferred batch's job run ended: finish that batch, then go on with the run."""
        return self.run_job(context, event)

    # -- the deferred wait ---------------------------------------------------------------------------

    def submit_step(
        self,
        spark: SparkJobSubmitHook,
        dynamodb: Any,
        blocking: Callable[[P], R],
        start: Callable[[P], DetachedRun],
        finish: Callable[[OutcomeKey], R],
    ) -> Callable[[P], R]:
        """The protocol's submit step: ``blocking`` (run the plan's job and wait for it), or for a
        deferrable task the hook's :meth:`~.SparkJobSubmitHook.detaching_submit` (start it and leave it).

        :param dynamodb: a DynamoDB client (the lease table, where a detached run is recorded).
        :param start: starts a plan's job run (the hook's ``start_batch`` or ``start_table_batch``).
        :param finish: reads an ended run's outcome (the hook's ``finish_batch`` or ``finish_table_batch``).
        """
        return spark.detaching_submit(dynamodb, start, finish) if self.deferrable else blocking

    def defer_batch(self, detached: JobDetached) -> NoReturn:
        """Defer to the trigger that waits for the detached run and renews its leases; ``execute_complete``
        resumes with the trigger's event, which carries the run, the leases and the protocol's progress
        (:class:`~airflow_kinesis_snowflake.core.engine.leases.ResumedBatch`: nothing secret).

        The wait lasts at most the platform's (a little beyond the run's own timeout) and the task's
        ``execution_timeout``: a ``timeout`` event then stops the run
        (:meth:`~.SparkJobSubmitHook.finish_detached`).
        """
        spark = self._spark_hook
        assert spark is not None and spark.submitter is not None and self.spark_platform is not None
        self.log.info(
            "Deferred: %s job run %s of batch %s goes on; the triggerer waits for it and renews the leases on %s",
            spark.submitter.platform,
            detached.run.job_run_id,
            detached.run.batch_id,
            ", ".join(detached.hold.units),
        )
        trigger = SparkJobRunTrigger(
            spark_platform=self.spark_platform,
            job_run_id=detached.run.job_run_id,
            aws_conn_id=self.aws_conn_id,
            region_name=self.region_name,
            leases=detached.hold.to_dict(),
            timeout=wait_timeout(spark.submitter.wait_seconds, self.execution_timeout),
            batch=detached_batch(detached),
        )
        self.defer(trigger=trigger, method_name="execute_complete")

    @staticmethod
    def resumed(event: Mapping[str, Any] | None) -> ResumedBatch | None:
        """What a deferred task resumes with, from its trigger's event; None when it did not defer."""
        return None if event is None else ResumedBatch.of_event(event)
