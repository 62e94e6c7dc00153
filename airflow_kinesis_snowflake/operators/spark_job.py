"""What every task that runs a source's Spark job shares: its Spark settings, the job's hook on its
platform, where its metrics go besides Airflow's, ``on_kill``, and the deferred wait for a batch's
job run (:mod:`~airflow_kinesis_snowflake.core.engine.detached`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, Protocol, TypeVar

from airflow.providers.common.compat.sdk import conf

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.config import (
    DEFERRABLE_PLATFORMS,
    SPARK_SUBMIT_ARGUMENTS,
    SPARK_SUBMIT_PLATFORM,
    check_spark_conf,
)
from airflow_kinesis_snowflake.core.engine.detached import DetachedRun, JobDetached, JobRunState, recorded_run
from airflow_kinesis_snowflake.core.engine.leases import LeaseHold
from airflow_kinesis_snowflake.core.metrics import check_dimensions, check_namespace
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.hooks.cloudwatch import cloudwatch_publisher
from airflow_kinesis_snowflake.hooks.platforms import job_submit_hook
from airflow_kinesis_snowflake.hooks.spark import SparkJobSubmitHook
from airflow_kinesis_snowflake.metrics import Publish
from airflow_kinesis_snowflake.triggers.spark_job import SparkJobRunTrigger


class _Plan(Protocol):
    """A source's batch plan, as the deferred submit step reads it."""

    @property
    def application_name(self) -> str: ...

    @property
    def batch_id(self) -> str: ...


P = TypeVar("P", bound=_Plan)
R = TypeVar("R")


class SparkJobMixin:
    """Mixed into an operator, first among its bases; its ``__init__`` calls :meth:`init_spark_job`.

    The operator documents the parameters (``spark_conn_id``, ``spark_conf``, ``spark_submit``,
    ``spark_platform``, ``deferrable``, ``cloudwatch_namespace``, ``cloudwatch_dimensions``) and has
    ``task_id``, ``aws_conn_id``, ``region_name`` and ``execution_timeout``.

    A deferrable task (:attr:`deferrable`) hands each batch's job run to Airflow's triggerer: its
    submit step starts the run (:meth:`detaching_submit`), the protocol stops with the run and its
    leases held (:class:`~airflow_kinesis_snowflake.core.engine.detached.JobDetached`), the task defers
    to :class:`~airflow_kinesis_snowflake.triggers.spark_job.SparkJobRunTrigger` (:meth:`defer_batch`)
    and resumes in ``execute_complete``, whose finish (:meth:`finish_job`) is the blocking path's.
    """

    task_id: str
    aws_conn_id: str | None
    region_name: str | None
    execution_timeout: Any
    log: Any
    defer: Callable[..., NoReturn]

    def init_spark_job(
        self,
        *,
        spark_conn_id: str | None,
        spark_conf: dict[str, Any] | None,
        spark_submit: dict[str, Any] | None,
        spark_platform: dict[str, Any] | None,
        cloudwatch_namespace: str | None,
        cloudwatch_dimensions: Sequence[str] | None,
        deferrable: bool | None = None,
        continuous: bool = False,
    ) -> None:
        """Check and keep the task's Spark and metrics settings (nothing is connected here).

        :param deferrable: None: Airflow's ``[operators] default_deferrable`` where the task can defer (a
            managed platform, scheduled mode), else not.
        :param continuous: the task runs in continuous mode, which cannot defer.
        :raises ValueError: ``deferrable=True`` where the task cannot defer.
        """
        if unknown := sorted(set(spark_submit or ()) - set(SPARK_SUBMIT_ARGUMENTS)):
            raise ValueError(f"spark_submit: {', '.join(unknown)} not among {', '.join(SPARK_SUBMIT_ARGUMENTS)}")
        self.spark_conn_id, self.spark_conf = spark_conn_id, spark_conf
        self.spark_submit = dict(spark_submit or {})
        self.spark_platform = dict(spark_platform) if spark_platform else None
        platform = (self.spark_platform or {}).get("platform", SPARK_SUBMIT_PLATFORM)
        can_defer = platform in DEFERRABLE_PLATFORMS and spark_conn_id is not None and not continuous
        if deferrable and not can_defer:
            if continuous:
                why = "this task runs in continuous mode, which reports each micro-batch as it commits"
            elif platform == SPARK_SUBMIT_PLATFORM or spark_conn_id is None:
                why = "this task has no spark_platform: spark-submit runs in the task itself"
            else:
                why = f"spark_platform {platform}'s runs are waited for in the task"
            raise ValueError(
                f"task {self.task_id!r}: deferrable=True waits in Airflow's triggerer for a job run on a managed "
                f"Spark platform ({', '.join(DEFERRABLE_PLATFORMS)}), in scheduled mode; {why} (spark.deferrable "
                "and spark.platform in the connector file)"
            )
        if deferrable is None:
            deferrable = can_defer and conf.getboolean("operators", "default_deferrable", fallback=False)
        self.deferrable = bool(deferrable)
        if cloudwatch_namespace is not None:
            check_namespace(cloudwatch_namespace)
        self.cloudwatch_namespace = cloudwatch_namespace
        self.cloudwatch_dimensions = None if cloudwatch_dimensions is None else check_dimensions(cloudwatch_dimensions)
        self._spark_hook: SparkJobSubmitHook | None = None

    def build_spark_hook(self) -> SparkJobSubmitHook:
        """The job's hook of the Spark connection, with this task's Spark settings, on its platform;
        kept for :meth:`on_kill`."""
        assert self.spark_conn_id is not None
        check_spark_conf(self.spark_conf or {}, f"spark_conf of task {self.task_id!r}")  # rendered, so here
        self._spark_hook = job_submit_hook(
            conn_id=self.spark_conn_id,
            conf=self.spark_conf,
            spark_submit=self.spark_submit,
            spark_platform=self.spark_platform,
            aws_conn_id=self.aws_conn_id,
            region_name=self.region_name,
        )
        return self._spark_hook

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
        its end, its commit guarded by the ledger; the next try finds it (:meth:`detaching_submit`).
        """
        if self._spark_hook is not None:
            self._spark_hook.on_kill()

    # -- the deferred wait ---------------------------------------------------------------------------

    def detaching_submit(
        self,
        spark: SparkJobSubmitHook,
        dynamodb: Any,
        start: Callable[[P], DetachedRun],
        finish: Callable[[DetachedRun], R],
    ) -> Callable[[P], R]:
        """The protocol's submit step of a deferrable task: start the plan's job run and leave it
        (:class:`~airflow_kinesis_snowflake.core.engine.detached.JobDetached`).

        A run recorded in the lease table under the plan's batch id (an earlier try of this task deferred
        with the same plan and did not finish it) is not started again: while it runs, the task waits for
        it; once it succeeded, its outcome is the batch's (``finish``: it committed nothing, or the plan,
        which starts from the ledger's marks, would differ); once it failed, a new run starts.

        :param dynamodb: a DynamoDB client (the lease table, named after the plan's application).
        :param start: starts a plan's job run (the hook's ``start_batch`` or ``start_table_batch``).
        :param finish: reads an ended run's outcome (the hook's ``finish_batch`` or ``finish_table_batch``).
        """

        def submit(plan: P) -> R:
            table, batch_id = LeaseTable(dynamodb, plan.application_name), plan.batch_id
            found = self._earlier_run(spark, table, batch_id)
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
                    result = finish(earlier)
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

    def _earlier_run(
        self, spark: SparkJobSubmitHook, table: LeaseTable, batch_id: str
    ) -> tuple[DetachedRun, JobRunState] | None:
        """The job run an earlier try recorded for ``batch_id`` on this platform, and its state; None when
        there is none, or when the platform cannot tell its state (a run it no longer knows: a new run
        starts, its commit guarded by the ledger)."""
        assert spark.submitter is not None
        earlier = recorded_run(table.recorded_run(batch_id), spark.submitter.platform)
        if earlier is None:
            return None
        try:
            return earlier, spark.submitter.run_state(earlier.job_run_id)
        except Exception as err:  # noqa: BLE001 - see above
            self.log.warning("Batch %s: job run %s of an earlier try: %s", batch_id, earlier.job_run_id, err)
            return None

    def defer_batch(self, detached: JobDetached) -> NoReturn:
        """Defer to the trigger that waits for the detached run and renews its leases; ``execute_complete``
        resumes with the trigger's event, which carries the run, the leases and the protocol's progress
        (ids, names and figures: nothing secret).

        The wait lasts at most the platform's (a little beyond the run's own timeout) and the task's
        ``execution_timeout``: a ``timeout`` event then stops the run.
        """
        spark = self._spark_hook
        assert spark is not None and spark.submitter is not None and self.spark_platform is not None
        hold: LeaseHold = detached.hold
        limits = [spark.submitter.wait_seconds]
        if self.execution_timeout is not None:
            limits.append(self.execution_timeout.total_seconds())
        timeout = min((limit for limit in limits if limit is not None), default=None)
        self.log.info(
            "Deferred: %s job run %s of batch %s goes on; the triggerer waits for it and renews the leases on %s",
            spark.submitter.platform,
            detached.run.job_run_id,
            detached.run.batch_id,
            ", ".join(hold.units),
        )
        trigger = SparkJobRunTrigger(
            spark_platform=self.spark_platform,
            job_run_id=detached.run.job_run_id,
            aws_conn_id=self.aws_conn_id,
            region_name=self.region_name,
            leases=hold.to_dict(),
            timeout=timeout,
            batch={"run": detached.run.to_dict(), "progress": detached.progress},
        )
        self.defer(trigger=trigger, method_name="execute_complete")

    @staticmethod
    def resumed(event: Mapping[str, Any]) -> tuple[DetachedRun, LeaseHold, dict[str, Any]]:
        """What a deferred task resumes with, from its trigger's event: the run, its leases and the
        protocol's progress."""
        batch = event["batch"]
        return DetachedRun.from_dict(batch["run"]), LeaseHold.from_dict(event["leases"]), dict(batch["progress"])

    def finish_job(
        self,
        spark: SparkJobSubmitHook,
        event: Mapping[str, Any],
        run: DetachedRun,
        finish: Callable[[DetachedRun], R],
    ) -> R:
        """The after-the-run step of a deferred task, as the blocking task's: raise unless the run
        succeeded (how it ended, the driver's last lines), then ``finish`` reads its outcome from
        Snowflake. A wait that ran out (``timeout`` event) stops the run first.

        :raises AirflowException: the run did not succeed, or the wait ran out.
        """
        assert spark.submitter is not None
        if event.get("status") == "timeout":
            self.log.warning("%s: stopping job run %s", event.get("message"), run.job_run_id)
            spark.submitter.stop(run.job_run_id)
            raise AirflowException(
                f"{event.get('message')}: it was stopped. Nothing it did not commit is visible; the next try plans "
                "the batch again from the ledger"
            )
        spark.finish_run(run)
        return finish(run)
