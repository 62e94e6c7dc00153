"""The submit step of a managed platform in three: submit, wait, finish. The task that waits and the
deferred task (whose wait is the triggerer's) share the submission and the finish; a platform plugs in
with one class that starts a run, waits for it, reads its state and tells why it failed (here a platform
whose runs are entries of a dict, as :class:`~airflow_kinesis_snowflake.hooks.managed.ManagedSubmitter`
sees any platform)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.core.engine.detached import DetachedRun, JobRunState
from airflow_kinesis_snowflake.core.load.snowflake_sink import KINESIS_SUPPORT_NAMES, OutcomeKey
from airflow_kinesis_snowflake.core.model import BatchResult, Destination
from airflow_kinesis_snowflake.hooks.managed import ManagedSubmitter, Submission, check_driver_identity
from airflow_kinesis_snowflake.hooks.spark import SparkJobSubmitHook
from tests.unit.hooks.test_spark import IDENTITY, batch_plan, job_connections, outcome_of, spark_connection


class Platform(ManagedSubmitter):
    """A managed platform whose runs end as ``ends`` says, once waited for."""

    platform = "emr_serverless"

    def __init__(self, ends: str = "SUCCEEDED") -> None:
        super().__init__(artifacts="s3://jobs/orders", aws_conn_id=None, region_name=None, poll_seconds=1)
        self.ends = ends
        self.calls: list[Any] = []
        self.runs: dict[str, str] = {}

    def check(self, hook: SparkJobSubmitHook) -> None:
        self.calls.append("check")
        check_driver_identity(hook, platform=self.platform, role="its role", anchor="emr-serverless")

    def _start(self, job: Submission) -> str:
        job_run_id = f"run-{len(self.runs) + 1}"
        self.calls.append(("start", job.name, job.arguments))
        self.runs[job_run_id] = "RUNNING"
        return job_run_id

    def _wait_for_run(self, job_run_id: str, name: str) -> None:
        self.calls.append(("wait", job_run_id))
        self.runs[job_run_id] = self.ends

    def run_state(self, job_run_id: str) -> JobRunState:
        state = self.runs[job_run_id]
        return JobRunState(state, state != "RUNNING", state == "SUCCEEDED", "it said why")

    def failure(self, job_run_id: str, name: str) -> str:
        return f"The Spark job {name} failed: run {job_run_id} ended {self.runs[job_run_id]}"

    def _stop(self, job_run_id: str) -> None:
        self.runs[job_run_id] = "STOPPED"


def steps(platform: Platform) -> list[str]:
    """The platform's steps so far, in order, each once where it repeats (the hook checks before it encodes)."""
    names = [call if isinstance(call, str) else call[0] for call in platform.calls]
    return [name for i, name in enumerate(names) if i == 0 or names[i - 1] != name]


def hook(monkeypatch: pytest.MonkeyPatch, platform: Platform) -> tuple[SparkJobSubmitHook, list[OutcomeKey]]:
    """The job's hook on ``platform``, reading outcomes from a stand-in of Snowflake's outcomes table."""
    spark = SparkJobSubmitHook(submitter=platform, conn_id=spark_connection(monkeypatch, "yarn", **IDENTITY))
    read: list[OutcomeKey] = []
    recorded = outcome_of(batch_plan())

    def read_outcome(
        self: SparkJobSubmitHook, destination: Destination, key: OutcomeKey, sf: Any, **kwargs: Any
    ) -> BatchResult:
        assert kwargs["names"] == KINESIS_SUPPORT_NAMES
        read.append(key)
        return recorded

    monkeypatch.setattr(SparkJobSubmitHook, "read_outcome", read_outcome)
    return spark, read


def test_the_waiting_and_the_deferred_task_submit_the_same_run_and_finish_it_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kinesis, snowflake = job_connections(monkeypatch)
    platform = Platform()
    spark, read = hook(monkeypatch, platform)
    plan = batch_plan()

    waited = spark.run_batch(plan, kinesis=kinesis, snowflake=snowflake)  # submit, wait, finish
    assert steps(platform) == ["check", "start", "wait"]
    (_, name, waited_args) = platform.calls[-2]
    platform.calls.clear()

    run = spark.start_batch(plan, kinesis=kinesis)  # submit alone
    assert steps(platform) == ["check", "start"]
    assert platform.run_state(run.job_run_id).ended is False  # nobody waited here
    assert len(read) == 1  # nothing read yet

    # The same run: its name and arguments, but for the attempt (each submission's own).
    (_, deferred_name, deferred_args) = platform.calls[-1]
    attempt, waited_attempt = run.attempt_id, read[0].attempt_id
    assert deferred_name == name == f"kinesis-to-snowflake-{plan.application_name}"
    assert deferred_args == [attempt if a == waited_attempt else a for a in waited_args]
    assert attempt != waited_attempt and deferred_args[deferred_args.index("--attempt") + 1] == attempt
    assert run == DetachedRun(
        "emr_serverless", "run-2", attempt, plan.application_name, plan.generation_id, plan.batch_id, name
    )
    assert json.loads(json.dumps(run.to_dict())) == run.to_dict()  # ids and names, what a trigger carries

    # The run ends while the task is deferred; the task resumes and finishes it as the waiting task did.
    platform.runs[run.job_run_id] = "SUCCEEDED"
    spark.finish_run(run)
    resumed = spark.finish_batch(run.key, plan.destination, snowflake)
    assert resumed == waited
    assert read[1] == OutcomeKey(plan.application_name, plan.generation_id, plan.batch_id, attempt)


def test_a_run_that_did_not_succeed_raises_the_same_message_waited_for_here_or_in_the_triggerer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kinesis, snowflake = job_connections(monkeypatch)
    platform = Platform(ends="FAILED")
    spark, read = hook(monkeypatch, platform)
    plan = batch_plan()

    with pytest.raises(AirflowException) as waited:
        spark.run_batch(plan, kinesis=kinesis, snowflake=snowflake)
    run = spark.start_batch(plan, kinesis=kinesis)
    platform.runs[run.job_run_id] = "FAILED"
    with pytest.raises(AirflowException) as deferred:
        spark.finish_run(run)

    name = f"kinesis-to-snowflake-{plan.application_name}"
    assert str(waited.value) == f"The Spark job {name} failed: run run-1 ended FAILED"
    assert str(deferred.value) == f"The Spark job {name} failed: run run-2 ended FAILED"
    assert read == []  # no outcome is read of a run that failed
    assert platform.job_run_id is None  # the waiting task's run ended: on_kill has nothing to cancel


def test_a_platform_refuses_a_connection_without_the_driver_s_identity_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kinesis, _ = job_connections(monkeypatch)
    platform = Platform()
    spark = SparkJobSubmitHook(submitter=platform, conn_id=spark_connection(monkeypatch, "yarn"))

    with pytest.raises(AirflowException, match="nothing was submitted"):
        spark.start_batch(batch_plan(), kinesis=kinesis)
    assert platform.runs == {}


def test_spark_submit_has_no_run_to_leave_to_the_triggerer(monkeypatch: pytest.MonkeyPatch) -> None:
    kinesis, _ = job_connections(monkeypatch)
    spark = SparkJobSubmitHook(conn_id=spark_connection(monkeypatch, "local[2]", **IDENTITY))

    with pytest.raises(AirflowException, match="a deferred task waits for a job run on a managed Spark platform"):
        spark.start_batch(batch_plan(), kinesis=kinesis)
