"""The DynamoDB source's job on the Spark driver: one batch, or the table's sync in continuous mode.

The engine's driver (:mod:`~.engine.driver`) opens the submission's work and hands a DynamoDB batch or
continuous run to :func:`dynamodb_job`, which runs :func:`run` (the batch's data plane,
:func:`~.dynamodb_job.load`, in a SparkContext of its own) or :func:`run_continuous` (the control
plane, :func:`~.dynamodb_continuous.sync_continuously`, with each batch's data plane in one
SparkContext).

It sits above both planes: :mod:`.dynamodb_job` (the data plane) imports neither the control plane
nor this module, so the package's imports form no cycle.
"""

from __future__ import annotations

import logging
import os
import sys

from airflow_kinesis_snowflake.core.dynamodb_continuous import TableContinuousRun, sync_continuously
from airflow_kinesis_snowflake.core.dynamodb_job import (
    STREAMS_ENDPOINT_ENV,
    AwsAccess,
    TableBatchPlan,
    TableBatchResult,
    load,
    report_entries,
)
from airflow_kinesis_snowflake.core.engine.credentials import JobCredentials
from airflow_kinesis_snowflake.core.engine.driver import package_log_to_stdout, spark_application
from airflow_kinesis_snowflake.core.engine.wire import Work, WorkKind
from airflow_kinesis_snowflake.core.job_log import say


def dynamodb_job(work: Work, *, credentials: JobCredentials, attempt_id: str) -> int:
    """The DynamoDB source's job on the driver (the registry's ``job`` role,
    :class:`~.engine.driver.SourceJob`): one batch, or the table's sync run after run."""
    if work.kind is WorkKind.CONTINUOUS:
        run_spec = TableContinuousRun.from_work(work)
        batches = run_continuous(run_spec, credentials, attempt_id)
        print(f"continuous run of {run_spec.sync.table}: {batches} batches applied")
    else:
        report(run(TableBatchPlan.from_work(work), credentials, attempt_id))
    return 0


def run(plan: TableBatchPlan, credentials: JobCredentials, attempt_id: str | None = None) -> TableBatchResult:
    """Driver: the batch of ``plan`` in a SparkContext of its own."""
    with spark_application(f"dynamodb-to-snowflake:{plan.application_name}:{plan.table}:{plan.batch_id}") as sc:
        return load(sc, plan, credentials, attempt_id)


def run_continuous(run_spec: TableContinuousRun, credentials: JobCredentials, attempt_id: str) -> int:
    """Driver, continuous mode: the table's sync run after run in one SparkContext
    (:func:`~.dynamodb_continuous.sync_continuously`), each batch recorded under ``attempt_id``.

    :param run_spec: the :class:`~.dynamodb_continuous.TableContinuousRun`.
    :returns: the batches applied.
    """
    sync = run_spec.sync
    # The sync's steps are logged as a scheduled run's task log shows them, through the redacted stdout.
    endpoint = credentials.aws.get(STREAMS_ENDPOINT_ENV) or os.environ.get(STREAMS_ENDPOINT_ENV)
    access = AwsAccess(credentials, run_spec.region, endpoint)
    name = f"dynamodb-to-snowflake:{sync.application_name}:{sync.table}:continuous"
    with package_log_to_stdout(), spark_application(name) as sc:

        def submit(plan: TableBatchPlan) -> TableBatchResult:
            result = load(sc, plan, credentials, attempt_id)
            report(result)
            return result

        outcomes = sync_continuously(
            run_spec,
            lease_dynamodb=credentials.dynamodb_client(run_spec.region),
            source_dynamodb=access.dynamodb(),
            streams=access.streams(),
            connect_snowflake=credentials.connect_snowflake,
            submit=submit,
        )
    return sum(len(outcome.batches) for outcome in outcomes)


def report(result: TableBatchResult) -> None:
    """Write what a batch read and applied (:func:`~.dynamodb_job.report_entries`), each line at its level:
    plain lines at INFO, the job's marked lines at theirs (:mod:`~.job_log`)."""
    for level, line in report_entries(result):
        if level > logging.INFO:
            say(level, line, sys.stdout)
        else:
            print(line, flush=True)
