"""The driver of the DynamoDB source's Spark job: one batch, or the table's sync in continuous mode.

``main`` parses the job's arguments (the encoded :class:`~.dynamodb_job.TableBatchPlan` or
:class:`~.dynamodb_continuous.TableContinuousRun`, the attempt id, the Snowflake secret's name),
builds the job's credentials (:class:`~.job.JobCredentials`), and runs :func:`run` (the batch's data
plane, :func:`~.dynamodb_job.load`, in a SparkContext of its own) or :func:`run_continuous` (the
control plane, :func:`~.dynamodb_continuous.sync_continuously`, with each batch's data plane in one
SparkContext). The driver's output is redacted.

It sits above both planes: :mod:`.dynamodb_job` (the data plane) imports neither the control plane
nor this module, so the package's imports form no cycle.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from airflow_kinesis_snowflake.core.dynamodb_continuous import TableContinuousRun, decode_table_run, sync_continuously
from airflow_kinesis_snowflake.core.dynamodb_job import (
    STREAMS_ENDPOINT_ENV,
    AwsAccess,
    TableBatchPlan,
    TableBatchResult,
    decode_table_plan,
    load,
    report_entries,
)
from airflow_kinesis_snowflake.core.job_log import JobLogFormatter, say, say_exception


def run(plan: TableBatchPlan, credentials: Any, attempt_id: str | None = None) -> TableBatchResult:
    """Driver: the batch of ``plan`` in a SparkContext of its own."""
    from airflow_kinesis_snowflake.core.job import spark_context

    sc = spark_context(f"dynamodb-to-snowflake:{plan.application_name}:{plan.table}:{plan.batch_id}")
    try:
        return load(sc, plan, credentials, attempt_id)
    finally:
        sc.stop()


def run_continuous(run_spec: TableContinuousRun, credentials: Any, attempt_id: str) -> int:
    """Driver, continuous mode: the table's sync run after run in one SparkContext
    (:func:`~.dynamodb_continuous.sync_continuously`), each batch recorded under ``attempt_id``.

    :param run_spec: the :class:`~.dynamodb_continuous.TableContinuousRun`.
    :returns: the batches applied.
    """
    from airflow_kinesis_snowflake.core.job import spark_context

    # The sync's steps are logged as a scheduled run's task log shows them, each at its level
    # (:mod:`~.job_log`); through the redacted stdout.
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JobLogFormatter())
    package_log = logging.getLogger("airflow_kinesis_snowflake")
    package_log.addHandler(handler)
    package_log.setLevel(logging.INFO)
    sync = run_spec.sync
    sc = spark_context(f"dynamodb-to-snowflake:{sync.application_name}:{sync.table}:continuous")
    endpoint = credentials.aws.get(STREAMS_ENDPOINT_ENV) or os.environ.get(STREAMS_ENDPOINT_ENV)
    access = AwsAccess(credentials, run_spec.region, endpoint)
    try:

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
    finally:
        sc.stop()
        package_log.removeHandler(handler)
    return sum(len(outcome.batches) for outcome in outcomes)


def main(argv: list[str] | None = None) -> int:
    from airflow_kinesis_snowflake.core.job import JobCredentials, job_arguments
    from airflow_kinesis_snowflake.core.redaction import redacted_output

    parser = job_arguments(
        "Sync one DynamoDB table into Snowflake: one batch, or continuously",
        plan_help="one batch: the TableBatchPlan, as encode_table_plan encodes it",
        continuous_help="continuous mode: the TableContinuousRun, as dynamodb_continuous.encode_table_run encodes it",
    )
    args = parser.parse_args(argv)
    if args.continuous:
        run_spec = decode_table_run(args.continuous)
        region = run_spec.region
    else:
        plan = decode_table_plan(args.plan)
        region = plan.region
    credentials = JobCredentials.for_job(args.snowflake_connection_ref, region)
    with redacted_output(credentials.secret_values()):
        try:
            if args.continuous:
                batches = run_continuous(run_spec, credentials, args.attempt)
                print(f"continuous run of {run_spec.sync.table}: {batches} batches applied")
                return 0
            result = run(plan, credentials, args.attempt)
        except Exception:  # noqa: BLE001 - printed, then the job fails with status 1
            say_exception()  # through the redaction, at ERROR
            return 1
        report(result)
    return 0


def report(result: TableBatchResult) -> None:
    """Write what a batch read and applied (:func:`~.dynamodb_job.report_entries`), each line at its level:
    plain lines at INFO, the job's marked lines at theirs (:mod:`~.job_log`)."""
    for level, line in report_entries(result):
        if level > logging.INFO:
            say(level, line, sys.stdout)
        else:
            print(line, flush=True)
