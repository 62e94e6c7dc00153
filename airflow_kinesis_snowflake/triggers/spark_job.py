"""The trigger a deferred ingest or sync task waits on: its batch's job run on a managed Spark platform."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_kinesis_snowflake.core.engine.detached import JobRunState
from airflow_kinesis_snowflake.core.engine.leases import LeaseHold, renew_hold
from airflow_kinesis_snowflake.hooks.kinesis import LeaseTableHook
from airflow_kinesis_snowflake.hooks.platforms import platform_submitter
from airflow_kinesis_snowflake.hooks.spark import PlatformSubmitter


class SparkJobRunTrigger(BaseTrigger):
    """Wait until a batch's job run on a managed Spark platform ended, keeping the batch's leases alive.

    Every ``poll_seconds`` the run's state is read through the platform's submitter
    (:meth:`~airflow_kinesis_snowflake.hooks.managed.ManagedSubmitter.run_state`: GetJobRun of EMR
    Serverless or Glue, runs/get of Databricks; any platform of
    :mod:`~airflow_kinesis_snowflake.hooks.platforms`), and every
    third of the lease duration the batch's leases are renewed with their owner's heartbeat
    (:func:`~airflow_kinesis_snowflake.core.engine.leases.renew_hold`), as the task renews them while it
    waits itself: so a reset, restore or clean-up, and any other worker, still sees the batch's units
    held. Should the triggerer stop, the renewals stop with it, and the leases expire after their
    duration, as a stopped worker's do; a trigger built again from :meth:`serialize` goes on with the
    same run and leases.

    Yields one event: ``status`` ``success`` (the run succeeded), ``failed`` (it ended otherwise:
    ``state`` and the platform's ``message``) or ``timeout`` (still not ended after ``timeout``
    seconds); each with ``job_run_id``, ``state``, ``message``, ``leases`` and ``batch``, the deferred
    task's state as it gave it (ids, names and figures: nothing secret). The Amazon provider's triggers
    (``EmrServerlessStartJobTrigger``, ``GlueJobCompleteTrigger``) wait for one platform's run without
    renewing leases, and at the provider's floor (9.6) take no region and end a failed run with an error
    rather than an event, which would leave the task no step to release its leases and tell why.

    Cancelling the trigger (the task is marked failed or cleared while deferred) does not stop the job
    run: it ends on its own, its commit guarded by the ledger, and the next try of the task finds it
    (:mod:`~airflow_kinesis_snowflake.core.engine.detached`).

    :param spark_platform: the platform's settings, as the operators' ``spark_platform`` gives them.
    :param job_run_id: the run on the platform.
    :param aws_conn_id: the AWS connection that calls the platform and DynamoDB.
    :param region_name: AWS region; defaults to the connection's.
    :param leases: the batch's leases to renew
        (:meth:`LeaseHold.to_dict <airflow_kinesis_snowflake.core.engine.leases.LeaseHold.to_dict>`); None: none.
    :param poll_seconds: seconds between two reads of the run's state; the platform's ``poll_seconds`` when None.
    :param timeout: seconds until the trigger gives up with a ``timeout`` event; None: never.
    :param batch: what the deferred task resumes with, handed back in the event.
    """

    def __init__(
        self,
        *,
        spark_platform: Mapping[str, Any],
        job_run_id: str,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        leases: Mapping[str, Any] | None = None,
        poll_seconds: float | None = None,
        timeout: float | None = None,
        batch: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.spark_platform = dict(spark_platform)
        self.job_run_id = job_run_id
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.leases = None if leases is None else dict(leases)
        self.poll_seconds = poll_seconds
        self.timeout = timeout
        self.batch = dict(batch or {})

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{self.__class__.__module__}.{self.__class__.__qualname__}",
            {
                "spark_platform": self.spark_platform,
                "job_run_id": self.job_run_id,
                "aws_conn_id": self.aws_conn_id,
                "region_name": self.region_name,
                "leases": self.leases,
                "poll_seconds": self.poll_seconds,
                "timeout": self.timeout,
                "batch": self.batch,
            },
        )

    def submitter(self) -> PlatformSubmitter:
        """The platform's submitter, as the task built it."""
        built = platform_submitter(self.spark_platform, aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        if built is None:
            raise ValueError("spark_platform: spark_submit runs on the worker; there is no job run to wait for")
        return built

    def _renew(self, hold: LeaseHold) -> set[str]:
        table = LeaseTableHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).table(hold.table_name)
        return renew_hold(table, hold)

    def _event(self, status: str, state: JobRunState | None, message: str) -> TriggerEvent:
        return TriggerEvent(
            {
                "status": status,
                "job_run_id": self.job_run_id,
                "state": state.state if state is not None else None,
                "message": message,
                "leases": self.leases,
                "batch": self.batch,
            }
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        submitter = self.submitter()
        poll = float(self.poll_seconds if self.poll_seconds is not None else getattr(submitter, "poll_seconds", 30))
        hold = None if self.leases is None else LeaseHold.from_dict(self.leases)
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        renew_at = time.monotonic()  # at once: the task renewed them last before it deferred
        lost: set[str] = set()
        seen = None
        while True:
            if hold is not None and time.monotonic() >= renew_at:
                try:
                    if newly := await asyncio.to_thread(self._renew, hold) - lost:
                        lost |= newly
                        self.log.warning("Leases of %s taken by another worker meanwhile: %s", hold.table_name, newly)
                except Exception:  # retried at the next renewal, as the task's own renewals are
                    self.log.warning("Could not renew the leases of %s", hold.table_name, exc_info=True)
                renew_at = time.monotonic() + hold.duration_seconds / 3
            state = await asyncio.to_thread(submitter.run_state, self.job_run_id)
            if state.state != seen:
                seen = state.state
                self.log.info("%s job run %s is %s", submitter.platform, self.job_run_id, state.state)
            if state.ended:
                yield self._event("success" if state.succeeded else "failed", state, state.details)
                return
            if deadline is not None and time.monotonic() >= deadline:
                message = (
                    f"{submitter.platform} job run {self.job_run_id} is still {state.state} after {self.timeout:.0f}s"
                )
                yield self._event("timeout", state, message)
                return
            wake = min(time.monotonic() + poll, renew_at if hold is not None else float("inf"))
            if deadline is not None:
                wake = min(wake, deadline)
            await asyncio.sleep(max(0.0, wake - time.monotonic()))
