"""The Spark job's driver, the same for every source.

``spark-submit <entry point> --plan WORK --attempt ID [--snowflake-connection-ref SECRET]`` (one
batch), or ``--continuous WORK`` instead of ``--plan`` (batches back to back). :func:`main`:

1. opens the work (:func:`~.wire.decode`): which source it belongs to, one batch or a continuous run,
   the region, and the source's plan or run;
2. builds the job's credentials (:class:`~.credentials.JobCredentials`): from spark-submit's
   environment, or with ``--snowflake-connection-ref`` from the driver's own identity;
3. runs the source's job, found in the registry by the work's source (its ``job`` role, a
   :class:`SourceJob`), with every secret it holds replaced by ``***`` in whatever it prints. The
   source's job reads, stages and commits, and records each batch's outcome in Snowflake under the
   batch id and the submission's attempt id ``ID``: what the Airflow worker reads back once
   spark-submit returns. Nothing is shared with the worker but Snowflake.

A failure is printed through the redaction at ERROR (:mod:`~..job_log`) and the job exits with
status 1; a source's refusal that is a setting, not a fault (:class:`JobRefused`), prints one line
and exits with status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from airflow_kinesis_snowflake.core.engine.credentials import JobCredentials
from airflow_kinesis_snowflake.core.engine.wire import Work, WorkKind, decode
from airflow_kinesis_snowflake.core.job_log import JobLogFormatter, say, say_exception

# The job's argument naming the Secrets Manager secret with the Snowflake connection. No word
# Airflow's masker treats as sensitive ("secret" ...) in it: the Spark provider would mask its value.
SNOWFLAKE_CONNECTION_REF_ARG = "--snowflake-connection-ref"
#: One batch: its encoded work.
PLAN_ARG = "--plan"
#: A continuous run: its encoded work.
CONTINUOUS_ARG = "--continuous"
ATTEMPT_ARG = "--attempt"


class JobRefused(Exception):
    """A batch that a setting forbids (not a fault): the job prints the reason and exits with status 2."""


class SourceJob(Protocol):
    """A source's job on the driver (the registry's ``job`` role): runs one batch's or a continuous
    run's work and returns the exit status.

    :param work: the work, of this source.
    :param credentials: the job's credentials.
    :param attempt_id: the submission's id, which each batch's outcome is recorded under.
    :raises JobRefused: a setting forbids the batch; nothing was loaded.
    """

    def __call__(self, work: Work, *, credentials: JobCredentials, attempt_id: str) -> int: ...


def job_arguments() -> argparse.ArgumentParser:
    """The job's arguments: one batch's or a continuous run's encoded work, the submission's attempt
    id, and where the Snowflake connection is read from."""
    parser = argparse.ArgumentParser(description="Load a source's batch into Snowflake, or batches back to back")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument(PLAN_ARG, help="one batch: its work, as engine.wire.encode encodes it")
    what.add_argument(CONTINUOUS_ARG, help="continuous mode: the run's work, as engine.wire.encode encodes it")
    parser.add_argument(
        ATTEMPT_ARG,
        required=True,
        help="this submission's id, which the batch outcomes are recorded under in Snowflake",
    )
    parser.add_argument(
        SNOWFLAKE_CONNECTION_REF_ARG,
        help="name or ARN of the AWS Secrets Manager secret holding the Snowflake connection; AWS "
        "credentials then come from the default chain (the driver's own identity) instead of the environment",
    )
    return parser


def source_job(source: str) -> SourceJob:
    """The job of ``source``, from the registry (imported when first asked for).

    :raises KeyError: ``source`` is not registered.
    """
    from airflow_kinesis_snowflake.registry import registered

    job: SourceJob = registered(source).part("job")
    return job


def spark_context(name: str) -> Any:
    """The driver's SparkContext. The job only uses RDDs: a bare SparkContext starts seconds faster
    than a SparkSession."""
    from pyspark import SparkConf, SparkContext

    return SparkContext.getOrCreate(SparkConf().setAppName(name))


@contextmanager
def spark_application(name: str) -> Iterator[Any]:
    """The driver's SparkContext (:func:`spark_context`) for the block, stopped after it, also when it fails."""
    sc = spark_context(name)
    try:
        yield sc
    finally:
        sc.stop()


@contextmanager
def package_log_to_stdout() -> Iterator[None]:
    """The package's log lines on stdout, each at its level (:class:`~..job_log.JobLogFormatter`), as a
    scheduled run's task log shows them: a continuous run's driver runs the protocol itself."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JobLogFormatter())
    package_log = logging.getLogger("airflow_kinesis_snowflake")
    package_log.addHandler(handler)
    package_log.setLevel(logging.INFO)
    try:
        yield
    finally:
        package_log.removeHandler(handler)


def main(argv: list[str] | None = None) -> int:
    """Run the work of the job's arguments (``argv``, else the command line); returns the exit status."""
    from airflow_kinesis_snowflake.core.redaction import redacted_output

    args = job_arguments().parse_args(argv)
    work = decode(args.continuous or args.plan)
    expected = WorkKind.CONTINUOUS if args.continuous else WorkKind.BATCH
    if work.kind is not expected:
        flag = CONTINUOUS_ARG if args.continuous else PLAN_ARG
        raise SystemExit(f"{flag} carries {work.kind.value} work of source {work.source!r}, not {expected.value} work")
    run = source_job(work.source)
    credentials = JobCredentials.for_job(args.snowflake_connection_ref, work.region)
    with redacted_output(credentials.secret_values()):
        try:
            return run(work, credentials=credentials, attempt_id=args.attempt)
        except JobRefused as err:
            # A setting, not a fault: one line saying what to do, and nothing loaded.
            say(logging.ERROR, str(err))
            return 2
        except Exception:  # noqa: BLE001 - printed, then the job fails with status 1
            # Printed here rather than by the interpreter, so that it goes through the redaction, at ERROR.
            say_exception()
            return 1
