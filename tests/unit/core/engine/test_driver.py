"""The Spark job's driver (core/engine/driver.py): opens the work, builds credentials, runs the source's job.

The source's job is replaced by a recording fake here (the real ones run in the Spark tests); what
is checked is the driver's own part: which job it picks, what it hands over, the exit status, and
that nothing it prints carries a secret.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.engine import driver
from airflow_kinesis_snowflake.core.engine.credentials import SNOWFLAKE_ENV, JobCredentials
from airflow_kinesis_snowflake.core.engine.driver import JobRefused, main, source_job
from airflow_kinesis_snowflake.core.engine.wire import Work, WorkKind, encode
from airflow_kinesis_snowflake.registry import SOURCE_TYPES, registered
from tests.unit.core.engine.test_wire import SAMPLES

PASSWORD = "hunter2-of-the-driver"


class RecordingJob:
    def __init__(self, outcome: int | Exception = 0) -> None:
        self.outcome = outcome
        self.calls: list[tuple[Work, JobCredentials, str]] = []

    def __call__(self, work: Work, *, credentials: JobCredentials, attempt_id: str) -> int:
        self.calls.append((work, credentials, attempt_id))
        print(f"the job holds {credentials.snowflake['password']}")
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


@pytest.fixture
def snowflake_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SNOWFLAKE_ENV, json.dumps({"account": "acme", "user": "loader", "password": PASSWORD}))


@pytest.mark.parametrize("source", SOURCE_TYPES)
def test_the_job_of_every_registered_source_is_found_by_the_works_source(source: str) -> None:
    job: Any = source_job(source)

    assert f"{job.__module__}:{job.__name__}" == registered(source).job


@pytest.mark.usefixtures("snowflake_env")
@pytest.mark.parametrize(("item", "kind"), SAMPLES, ids=lambda v: type(v).__name__)
def test_the_driver_hands_the_work_to_its_sources_job_with_the_credentials_and_attempt(
    item: Any, kind: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = {source: RecordingJob() for source in SOURCE_TYPES}
    monkeypatch.setattr(driver, "source_job", jobs.__getitem__)
    work = item.work()
    flag = "--continuous" if work.kind is WorkKind.CONTINUOUS else "--plan"

    status = main([flag, encode(item), "--attempt", "a1"])

    assert status == 0
    ((got, credentials, attempt),) = jobs[work.source].calls
    assert kind.from_work(got) == item and attempt == "a1"
    assert credentials.snowflake["account"] == "acme"
    assert not [job for source, job in jobs.items() if source != work.source and job.calls]
    out = capsys.readouterr().out
    assert "the job holds ***" in out and PASSWORD not in out


@pytest.mark.usefixtures("snowflake_env")
def test_a_refusal_exits_2_with_one_line_and_a_failure_exits_1_with_its_traceback_both_redacted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = SAMPLES[0][0]
    monkeypatch.setattr(driver, "source_job", lambda source: RecordingJob(JobRefused("set on_unknown_key: ignore")))
    assert main(["--plan", encode(plan), "--attempt", "a1"]) == 2
    refused = capsys.readouterr()

    monkeypatch.setattr(driver, "source_job", lambda source: RecordingJob(RuntimeError(f"login {PASSWORD} failed")))
    assert main(["--plan", encode(plan), "--attempt", "a2"]) == 1
    failed = capsys.readouterr()

    assert "kinesis-snowflake ERROR: set on_unknown_key: ignore" in refused.err and "Traceback" not in refused.err
    assert "Traceback" in failed.err and "RuntimeError: login *** failed" in failed.err
    assert PASSWORD not in refused.err + refused.out + failed.err + failed.out


@pytest.mark.usefixtures("snowflake_env")
def test_work_given_under_the_wrong_flag_is_refused_before_any_job_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    job = RecordingJob()
    monkeypatch.setattr(driver, "source_job", lambda source: job)
    batch, continuous = SAMPLES[0][0], SAMPLES[1][0]

    with pytest.raises(SystemExit, match="--continuous carries batch work of source 'kinesis', not continuous work"):
        main(["--continuous", encode(batch), "--attempt", "a1"])
    with pytest.raises(SystemExit, match="--plan carries continuous work of source 'kinesis', not batch work"):
        main(["--plan", encode(continuous), "--attempt", "a1"])
    assert job.calls == []


def test_work_of_an_unregistered_source_is_refused_naming_the_registered_ones() -> None:
    with pytest.raises(KeyError, match=r"source\.type 'kafka' is not registered; the sources are kinesis, dynamodb"):
        source_job("kafka")


def test_the_spark_application_is_stopped_after_its_block_also_when_the_block_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stopped: list[str] = []

    class Context:
        def __init__(self, name: str) -> None:
            self.name = name

        def stop(self) -> None:
            stopped.append(self.name)

    monkeypatch.setattr(driver, "spark_context", Context)

    with driver.spark_application("a") as sc:
        assert sc.name == "a" and stopped == []
    with pytest.raises(RuntimeError, match="the batch failed"), driver.spark_application("b"):
        raise RuntimeError("the batch failed")

    assert stopped == ["a", "b"]
