"""The Spark job: one task per shard range reads and stages; the driver commits once.

Submitted as :mod:`airflow_kinesis_snowflake.spark_jobs.kinesis_to_snowflake` (which calls
:func:`main`) through ``spark-submit``, in client or cluster deploy mode, with two arguments that
need no disk shared with the Airflow worker:

* ``--plan``: the :class:`BatchPlan` itself, encoded into the argument
  (:func:`~.planning.encode_plan`); it holds no credential;
* ``--attempt``: the id of this submission. The driver records the batch's
  :class:`~.model.BatchResult` in Snowflake's batch outcomes table under the batch id and this
  attempt id, in the transaction that commits the batch (or on its own when nothing was
  committed); the Airflow worker reads it from there once spark-submit returns
  (:meth:`~.snowflake_sink.SnowflakeSink.read_outcome`).

Credentials reach the driver in one of two ways, never as an argument or a Spark setting:

* in client deploy mode only, in the spark-submit process's environment: the AWS credentials
  under names of this job's own (:data:`JOB_AWS_CREDENTIAL_ENV`: ``KINESIS_SNOWFLAKE_AWS_ACCESS_KEY_ID``
  ...), the region and endpoints as the standard ``AWS_*`` variables (``AWS_ENDPOINT_URL_KINESIS``
  included), and ``SNOWFLAKE_CONNECTION_JSON`` with the snowflake-connector-python keyword
  arguments. Never as ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` or ``AWS_SESSION_TOKEN``:
  Spark copies those from its environment into the Hadoop configuration (``fs.s3a.access.key``,
  ``fs.s3a.secret.key``, ``fs.s3a.session.token``, ...), which a YARN client uploads unredacted
  (``__spark_hadoop_conf__.xml``) to the staging directory and every container;
* with ``--snowflake-connection-ref`` (the driver's own identity, the only way in cluster deploy
  mode): AWS through boto3's default credential chain (EMR role, IRSA, instance profile), and the
  Snowflake connection read from that AWS Secrets Manager secret.

The driver hands them to its tasks inside the serialised task. It prints no secret, and whatever
it writes to stdout or stderr (which the Airflow task log shows) has every secret value it holds
replaced by ``***`` (:func:`redacted_output`): the worker's masker does not know the values read
from the secret.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_kinesis_snowflake.core.job_log import JobLogFormatter, say, say_exception
from airflow_kinesis_snowflake.core.keys import private_key_der
from airflow_kinesis_snowflake.core.load.evolution import (
    NEVER_EVOLVED,
    EvolutionPolicy,
    KeySummary,
    UnknownKeyError,
    check_unknown_keys,
    held_back,
    merge,
    plan_changes,
    resolve_policy,
    summarize,
    takes_like,
)
from airflow_kinesis_snowflake.core.load.schema import ColumnMap, TableColumn
from airflow_kinesis_snowflake.core.load.snowflake_sink import (
    FAILURES_DIR,
    ROWS_DIR,
    CommitResult,
    OutcomeKey,
    SnowflakeSink,
)
from airflow_kinesis_snowflake.core.load.transform import BatchFiles, chunks_of
from airflow_kinesis_snowflake.core.model import BatchResult, ConsumerType, ShardResult
from airflow_kinesis_snowflake.core.planning import BatchPlan, ShardRange, decode_plan
from airflow_kinesis_snowflake.core.redaction import SECRET_PARAMS, redacted_output, secret_forms
from airflow_kinesis_snowflake.core.snowflake_limits import bounded

if TYPE_CHECKING:
    from airflow_kinesis_snowflake.core.continuous import ContinuousRun
from airflow_kinesis_snowflake.core.sources.readers import (
    CHUNK_BYTES,
    ChunkConsumer,
    RangeRead,
    kinesis_client,
    read_shard_range,
    read_shard_range_fan_out,
)

SNOWFLAKE_ENV = "SNOWFLAKE_CONNECTION_JSON"
# The job's argument naming the Secrets Manager secret with the Snowflake connection. No word
# Airflow's masker treats as sensitive ("secret" ...) in it: the Spark provider would mask its value.
SNOWFLAKE_CONNECTION_REF_ARG = "--snowflake-connection-ref"
PLAN_ARG = "--plan"
ATTEMPT_ARG = "--attempt"
AWS_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# The AWS credential variables Spark reads from its environment (SparkHadoopUtil) and copies into
# the Hadoop configuration of every application: the job's credentials never travel under them.
SPARK_READ_AWS_CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# The names the job's AWS credentials reach the driver under instead (client deploy mode), by the
# standard name each stands for (the key of JobCredentials.aws).
JOB_AWS_CREDENTIAL_ENV = {name: f"KINESIS_SNOWFLAKE_{name}" for name in SPARK_READ_AWS_CREDENTIAL_ENV}
# Where a job using its own AWS identity is (no credentials): region and endpoints only.
AWS_LOCATION_ENV = ("AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_DYNAMODB")


def job_credential_environment(aws: Mapping[str, str]) -> dict[str, str]:
    """``aws`` (standard ``AWS_*`` names) as the job's environment: its credentials under the job's
    own names (:data:`JOB_AWS_CREDENTIAL_ENV`), everything else as it is."""
    return {JOB_AWS_CREDENTIAL_ENV.get(name, name): value for name, value in aws.items()}


# Continuous mode: the driver runs micro-batches itself (:mod:`~.continuous`), from this encoded run.
CONTINUOUS_ARG = "--continuous"


def snowflake_params_from_secret(secret_string: str, secret_id: str) -> dict[str, Any]:
    """Connector keyword arguments from the JSON object of a Secrets Manager secret.

    The object holds snowflake-connector-python keyword arguments (``account``, ``user``, ``role``,
    ``warehouse``, ``host`` ...). A key pair is given as ``private_key`` (PEM text, or base64 DER),
    with ``private_key_passphrase`` when it is encrypted, or as ``private_key_der_base64``. The
    timeouts it does not set take their defaults (:func:`~.snowflake_limits.bounded`).

    :raises ValueError: the secret is not such an object, or a timeout in it is not a whole number
        of seconds above 0; the message never quotes the secret.
    """
    try:
        params = json.loads(secret_string)
    except ValueError:
        raise ValueError(
            f"secret {secret_id!r} is not JSON: it must hold a JSON object of connector arguments"
        ) from None
    if not isinstance(params, dict):
        raise ValueError(
            f"secret {secret_id!r} holds a JSON {type(params).__name__}, not an object of connector arguments"
        )
    key = params.pop("private_key", None)
    passphrase = params.pop("private_key_passphrase", None)
    if key:
        try:
            der = private_key_der(key, passphrase)
        except ValueError as err:
            raise ValueError(f"secret {secret_id!r}: {err}") from None
        params["private_key_der_base64"] = base64.b64encode(der).decode("ascii")
    return bounded(params, f"secret {secret_id!r}")


@dataclass(frozen=True)
class JobCredentials:
    """AWS and Snowflake credentials of the job, as its driver got them.

    From the spark-submit process's environment (:meth:`from_env`): AWS credentials (under the job's
    own names, :data:`JOB_AWS_CREDENTIAL_ENV`), region and endpoints, and the Snowflake connection.
    With the driver's own identity (:meth:`from_driver_identity`): the Snowflake connection from an
    AWS Secrets Manager secret and no AWS credential, only the region and endpoints; each executor
    then uses its own AWS identity (boto3's default chain), which it must have.

    They travel to executors inside the serialised task, never on a command line or in a Spark
    setting.
    """

    aws: dict[str, str] = field(repr=False)
    snowflake: dict[str, Any] = field(repr=False)
    # Values to keep out of the job's output beyond those of ``aws`` and ``snowflake`` (a secret's
    # fields in the form it held them, such as a PEM key and its passphrase).
    extra_secrets: tuple[str, ...] = field(default=(), repr=False)

    def secret_values(self) -> list[str]:
        """Every secret value the job holds, in each form it may be printed in (:func:`secret_forms`)."""
        values = [self.aws[k] for k in AWS_SECRET_ENV if self.aws.get(k)]
        values += [str(self.snowflake[k]) for k in SECRET_PARAMS if self.snowflake.get(k)]
        values += self.extra_secrets
        return sorted({form for value in values for form in secret_forms(value)}, key=len, reverse=True)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> JobCredentials:
        env = os.environ if environ is None else environ
        raw = env.get(SNOWFLAKE_ENV)
        if not raw:
            raise RuntimeError(f"{SNOWFLAKE_ENV} is not set: the Snowflake connection reaches the job through it")
        snowflake: dict[str, Any] = json.loads(raw)
        aws = {name: env[job] for name, job in JOB_AWS_CREDENTIAL_ENV.items() if env.get(job)}
        aws.update({k: env[k] for k in AWS_LOCATION_ENV if env.get(k)})
        return cls(aws=aws, snowflake=snowflake)

    @classmethod
    def from_driver_identity(
        cls, secret_id: str, region: str | None = None, environ: Mapping[str, str] | None = None
    ) -> JobCredentials:
        """The driver's own AWS identity, and the Snowflake connection from a Secrets Manager secret.

        The secret is read with boto3's default credential chain (instance profile, EMR role,
        IRSA, environment). No AWS credential is handed to the tasks: each executor uses its own
        identity the same way.

        :param secret_id: name or ARN of the secret; see :func:`snowflake_params_from_secret`.
        :param region: the secret's region when the environment names none (``AWS_DEFAULT_REGION``,
            ``AWS_REGION``); a secret given by ARN is read in the ARN's region.
        """
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError

        env = os.environ if environ is None else environ
        if secret_id.startswith("arn:") and len(secret_id.split(":")) > 3:
            region = secret_id.split(":")[3] or region
        else:
            region = env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION") or region
        try:
            client = boto3.client("secretsmanager", region_name=region)
            secret = client.get_secret_value(SecretId=secret_id)
        except (BotoCoreError, ClientError) as err:
            raise RuntimeError(f"the Snowflake connection could not be read from secret {secret_id!r}: {err}") from err
        if "SecretString" not in secret:
            raise RuntimeError(f"secret {secret_id!r} holds binary data, not a JSON object of connector arguments")
        snowflake = snowflake_params_from_secret(secret["SecretString"], secret_id)
        held = json.loads(secret["SecretString"])  # an object: snowflake_params_from_secret refuses others
        extra_secrets = tuple(str(held[k]) for k in SECRET_PARAMS if held.get(k))
        return cls(
            aws={k: env[k] for k in AWS_LOCATION_ENV if env.get(k)}, snowflake=snowflake, extra_secrets=extra_secrets
        )

    @classmethod
    def for_job(cls, snowflake_connection_ref: str | None, region: str | None) -> JobCredentials:
        """:meth:`from_driver_identity` with a secret's name or ARN, else :meth:`from_env`."""
        if snowflake_connection_ref:
            return cls.from_driver_identity(snowflake_connection_ref, region)
        return cls.from_env()

    def kinesis_client(self, region: str) -> Any:
        from botocore.config import Config

        # Standard retries back off on ProvisionedThroughputExceeded / LimitExceeded throttling.
        return kinesis_client(
            region_name=region,
            aws_access_key_id=self.aws.get("AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=self.aws.get("AWS_SECRET_ACCESS_KEY"),
            aws_session_token=self.aws.get("AWS_SESSION_TOKEN"),
            endpoint_url=self.aws.get("AWS_ENDPOINT_URL_KINESIS"),
            config=Config(retries={"mode": "standard", "max_attempts": 10}),
        )

    def dynamodb_client(self, region: str) -> Any:
        """A DynamoDB client for the lease table (continuous mode: the driver runs the protocol)."""
        import boto3

        return boto3.client(
            "dynamodb",
            region_name=region,
            aws_access_key_id=self.aws.get("AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=self.aws.get("AWS_SECRET_ACCESS_KEY"),
            aws_session_token=self.aws.get("AWS_SESSION_TOKEN"),
            endpoint_url=self.aws.get("AWS_ENDPOINT_URL_DYNAMODB"),
        )

    def connect_snowflake(self) -> Any:
        """A new Snowflake connection, every request and statement of it bounded
        (:func:`~.snowflake_limits.bounded`); the caller closes it."""
        import snowflake.connector

        params = bounded(self.snowflake, "the job's Snowflake connection")
        if "private_key_der_base64" in params:
            params["private_key"] = base64.b64decode(params.pop("private_key_der_base64"))
        return snowflake.connector.connect(**params)

    @contextmanager
    def snowflake_connection(self) -> Iterator[Any]:
        conn = self.connect_snowflake()
        try:
            yield conn
        finally:
            conn.close()


def read_range(
    shard_range: ShardRange, plan: BatchPlan, credentials: JobCredentials, on_chunk: ChunkConsumer | None = None
) -> RangeRead:
    """Spark task: the records of one shard range. A plan's ranges are fixed, so reading one again
    (after its cached partition was lost) gives the same records.

    :param on_chunk: takes the records in chunks as they are read (the result then holds none).
    """
    client = credentials.kinesis_client(plan.region)
    if plan.consumer_type == ConsumerType.ENHANCED_FAN_OUT:
        assert plan.consumer_arn is not None  # BatchPlan refuses a fan-out plan without one
        return read_shard_range_fan_out(client, plan.consumer_arn, shard_range, cutoff=plan.cutoff, on_chunk=on_chunk)
    return read_shard_range(
        client,
        plan.stream_name,
        shard_range,
        cutoff=plan.cutoff,
        max_records_per_call=plan.max_records_per_call,
        on_chunk=on_chunk,
    )


def summarize_range(read: RangeRead, columns: Sequence[TableColumn]) -> KeySummary:
    """Spark task: the range's unknown keys and empty NOT NULL columns, for schema evolution."""
    return summarize(read.records, ColumnMap(list(columns)))


def _batch_files(
    directory: str,
    shard_range: ShardRange,
    plan: BatchPlan,
    columns: Sequence[TableColumn],
    held_back_reason: str | None = None,
) -> BatchFiles:
    """The staging files of a range: Parquet rows for the columns, or JSON lines for a pipe's SELECT."""
    column_map = None if plan.pipe_definition is not None else ColumnMap(list(columns), held_back(held_back_reason))
    return BatchFiles(Path(directory), f"{shard_range.shard_id}-{plan.batch_id}", plan.stream_name, column_map)


def _put(files: BatchFiles, stage_dir: str, plan: BatchPlan, credentials: JobCredentials) -> None:
    """PUT the range's files that got rows to the batch's stage directory."""
    if not files.rows and not files.dead_letters:
        return
    with credentials.snowflake_connection() as conn:
        sink = SnowflakeSink(conn, plan.destination)
        if files.rows:
            sink.put_file(files.rows_path, f"{stage_dir}/{ROWS_DIR}")
        if files.dead_letters:
            sink.put_file(files.failures_path, f"{stage_dir}/{FAILURES_DIR}")


def _shard_result(read: RangeRead, shard_range: ShardRange, files: BatchFiles) -> ShardResult:
    return ShardResult(
        shard_id=shard_range.shard_id,
        start=shard_range.start,
        end=read.last if read.last and read.records_read else None,
        records_read=read.records_read,
        rows_staged=files.rows,
        dead_letters_staged=files.dead_letters,
        bytes_read=read.bytes_read,
        shard_end=read.shard_end,
        get_records_calls=read.get_records_calls,
        subscriptions=read.subscriptions,
        millis_behind_latest=read.millis_behind_latest,
    )


def stage_range(
    read: RangeRead,
    shard_range: ShardRange,
    plan: BatchPlan,
    columns: Sequence[TableColumn],
    stage_dir: str,
    credentials: JobCredentials,
    held_back_reason: str | None = None,
) -> ShardResult:
    """Spark task: build a range's Parquet (JSON lines for a pipe) from records read before, and stage it.

    The records are built chunk by chunk (:class:`~.transform.BatchFiles`), as :func:`process_range`
    builds them while it reads.

    :param held_back_reason: set when schema evolution's cap left keys without a column: records
        with a value for such a key are then dead letters, kept whole (see :class:`~.schema.HeldBack`).
    """
    with tempfile.TemporaryDirectory(prefix="kinesis-batch-") as tmp:
        with _batch_files(tmp, shard_range, plan, columns, held_back_reason) as files:
            for chunk in chunks_of(read.records, CHUNK_BYTES):
                files.add(chunk)
        _put(files, stage_dir, plan, credentials)
    return _shard_result(read, shard_range, files)


def process_range(
    shard_range: ShardRange,
    plan: BatchPlan,
    columns: Sequence[TableColumn],
    stage_dir: str,
    credentials: JobCredentials,
) -> ShardResult:
    """Spark task: read one shard range, build Parquet, stage it. Returns what it read and staged.

    Records are built and written chunk by chunk as pages arrive (the next page is fetched
    meanwhile), so the task holds about one chunk of records and its rows, not the range.
    """
    with tempfile.TemporaryDirectory(prefix="kinesis-batch-") as tmp:
        with _batch_files(tmp, shard_range, plan, columns) as files:
            read = read_range(shard_range, plan, credentials, on_chunk=files.add)
        _put(files, stage_dir, plan, credentials)
    return _shard_result(read, shard_range, files)


def evolution_policy(plan: BatchPlan, sink: SnowflakeSink) -> EvolutionPolicy:
    """Whether this batch may alter its table. The table is not asked when its type settles it."""
    never = plan.destination_type.upper() in NEVER_EVOLVED
    properties = None if never else sink.table_properties()
    return resolve_policy(
        destination_type=plan.destination_type,
        configured=plan.schema_evolution,
        on_unknown_key=plan.on_unknown_key,
        table_evolution=properties.schema_evolution if properties else None,
        table_iceberg=properties.iceberg if properties else None,
    )


def evolve_schema(
    sink: SnowflakeSink, columns: list[TableColumn], summaries: list[KeySummary], policy: EvolutionPolicy
) -> tuple[list[TableColumn], dict[str, Any]]:
    """Driver: make the table fit the summarised records, before anything is staged.

    Returns the columns the table has afterwards (a racing batch may have added a column first,
    perhaps with another type: values then fit that type or become dead letters) and a report for
    the batch result; its ``records_held_back``, when present, is the ``held_back_reason`` to stage
    the records with (the cap on new columns left keys without one). Raises
    :class:`~.evolution.UnknownKeyError` when values would not load and ``on_unknown_key`` is FAIL;
    nothing is altered then.
    """
    changes = plan_changes(merge(summaries), columns, evolve=policy.evolve, why_not=policy.reason)
    check_unknown_keys(changes, policy, sink.table)
    report = changes.report()
    if changes.add or changes.drop_not_null:
        columns = sink.evolve([(c.name, c.type.sql) for c in changes.add], changes.drop_not_null)
        by_name = {c.name.casefold(): c for c in columns}
        for entry, new in zip(report["columns_added"], changes.add, strict=True):
            actual = by_name.get(new.name.casefold())
            if actual is not None and not takes_like(actual, new.type):
                entry["type_in_table"] = actual.data_type
    return columns, report


def commit(
    plan: BatchPlan,
    stage_dir: str,
    shard_results: Sequence[ShardResult],
    credentials: JobCredentials,
    columns: Sequence[TableColumn] = (),
    schema: dict[str, Any] | None = None,
    attempt_id: str | None = None,
) -> BatchResult:
    """Driver: load everything staged and move the ledger in one transaction, and record the outcome.

    The batch's :class:`BatchResult` is recorded in the batch outcomes table under the batch id and
    ``attempt_id``: in the load transaction when something was committed, on its own otherwise.

    :param columns: the destination columns the rows were staged for.
    :param schema: the schema evolution report, carried into the result.
    :param attempt_id: the submission's attempt id (``--attempt``); the stage directory, itself
        unique per run, when None.
    """
    ends = {r.shard_id: r.end for r in shard_results if r.end is not None}
    starts = {r.shard_id: r.start for r in shard_results}
    rows = sum(r.rows_staged for r in shard_results)
    failures = sum(r.dead_letters_staged for r in shard_results)
    key = OutcomeKey(plan.application_name, plan.generation_id, plan.batch_id, attempt_id or stage_dir)

    def outcome(loaded: CommitResult, committed: bool = True) -> BatchResult:
        return BatchResult(
            batch_id=plan.batch_id,
            stage_dir=stage_dir,
            committed=committed,
            rows_loaded=loaded.rows_loaded,
            dead_letters_loaded=loaded.failures_loaded,
            shards=tuple(shard_results),
            finished_at=datetime.now(UTC),
            schema=schema or {},
        )

    recorded: list[BatchResult] = []

    def record(loaded: CommitResult) -> tuple[OutcomeKey, BatchResult]:
        recorded.append(outcome(loaded))
        return key, recorded[-1]

    with credentials.snowflake_connection() as conn:
        sink = SnowflakeSink(conn, plan.destination, pipe_definition=plan.pipe_definition)
        if not ends:
            result = outcome(CommitResult(rows_loaded=0, failures_loaded=0), committed=False)
            sink.record_outcome_alone(key, result)
            return result
        sink.commit_batch(
            application_name=plan.application_name,
            generation_id=plan.generation_id,
            batch_id=plan.batch_id,
            stage_dir=stage_dir,
            starts=starts,
            ends=ends,
            rows=rows,
            failures=failures,
            columns=list(columns),
            outcome=record,
        )
        # Staged files are only needed until the commit; a leftover is harmless (each attempt
        # has its own directory), so failing to remove it must not fail a committed batch.
        try:
            sink.remove_staged(stage_dir)
        except Exception as err:  # noqa: BLE001
            say(logging.WARNING, f"staged files under {stage_dir} were not removed: {err}")
    return recorded[-1]


def run(plan: BatchPlan, credentials: JobCredentials, attempt_id: str | None = None) -> BatchResult:
    """Driver: read, stage and commit the batch of ``plan``; its outcome is recorded in Snowflake.

    :param attempt_id: the submission's attempt id, which the outcome is recorded under.
    """
    sc = spark_context(f"kinesis-to-snowflake:{plan.application_name}:{plan.batch_id}")
    try:
        return load(sc, plan, credentials, attempt_id)
    finally:
        sc.stop()


def spark_context(name: str) -> Any:
    """The driver's SparkContext. The job only uses RDDs: a bare SparkContext starts seconds faster
    than a SparkSession."""
    from pyspark import SparkConf, SparkContext

    return SparkContext.getOrCreate(SparkConf().setAppName(name))


def run_continuous(run_spec: ContinuousRun, credentials: JobCredentials, attempt_id: str) -> list[BatchResult]:
    """Driver, continuous mode: micro-batches back to back in one SparkContext
    (:func:`~.continuous.run_continuously`), each recorded in Snowflake under its batch id and ``attempt_id``."""
    from airflow_kinesis_snowflake.core.continuous import KinesisStream, run_continuously

    # The protocol's steps are logged as a scheduled run's task log shows them, each at its level
    # (:mod:`~.job_log`); through the redacted stdout of :func:`main`.
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JobLogFormatter())
    package_log = logging.getLogger("airflow_kinesis_snowflake")
    package_log.addHandler(handler)
    package_log.setLevel(logging.INFO)
    sc = spark_context(f"kinesis-to-snowflake:{run_spec.settings.application_name}:continuous")
    try:

        def submit(plan: BatchPlan) -> BatchResult:
            result = load(sc, plan, credentials, attempt_id)
            report(result)
            return result

        outcomes = run_continuously(
            run_spec,
            dynamodb=credentials.dynamodb_client(run_spec.region),
            stream=KinesisStream(credentials.kinesis_client(run_spec.region), run_spec.region),
            connect_snowflake=credentials.connect_snowflake,
            submit=submit,
        )
    finally:
        sc.stop()
        package_log.removeHandler(handler)
    return [batch.result for outcome in outcomes for batch in outcome.batches if batch.result is not None]


def load(sc: Any, plan: BatchPlan, credentials: JobCredentials, attempt_id: str | None = None) -> BatchResult:
    """Driver: read, stage and commit the batch of ``plan`` with the live SparkContext ``sc``."""
    from pyspark import StorageLevel

    with credentials.snowflake_connection() as conn:
        sink = SnowflakeSink(conn, plan.destination)
        sink.ensure_support_objects()
        # Described when the batch was planned; a plan written by hand may leave them out.
        columns = list(plan.table_columns) or sink.describe_columns()
        policy = evolution_policy(plan, sink)
    # A fresh directory per attempt: a retried batch never mixes with a failed attempt's files.
    stage_dir = f"{plan.application_name}/{plan.batch_id}/{uuid.uuid4().hex[:12]}"
    # Tasks get the plan and their range as objects (pickled with the task), not as JSON.
    ranges = list(plan.ranges)
    started = time.monotonic()
    schema: dict[str, Any] = {"evolution": policy.evolve, "why": policy.reason}
    shard_results: list[ShardResult] = []
    known = columns
    if ranges and not policy.examines_keys:
        shard_results = (
            sc.parallelize(ranges, max(1, len(ranges)))
            .map(lambda r: process_range(r, plan, known, stage_dir, credentials))
            .collect()
        )
    elif ranges:
        # Two passes over records read once: their keys decide the schema changes, which are
        # made before anything is staged; then they are staged with the columns that resulted.
        # Spilled to disk rather than dropped, so that Kinesis is not read a second time.
        reads = (
            sc.parallelize(ranges, max(1, len(ranges)))
            .map(lambda r: (r, read_range(r, plan, credentials)))
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        try:
            summaries = reads.map(lambda pair: summarize_range(pair[1], known)).collect()
            with credentials.snowflake_connection() as conn:
                evolved, changes = evolve_schema(SnowflakeSink(conn, plan.destination), known, summaries, policy)
            schema.update(changes)
            columns = evolved
            held_back_reason = changes.get("records_held_back")
            shard_results = reads.map(
                lambda pair: stage_range(pair[1], pair[0], plan, evolved, stage_dir, credentials, held_back_reason)
            ).collect()
        finally:
            reads.unpersist()
    records = sum(r.records_read for r in shard_results)
    print(f"phase read+stage took {time.monotonic() - started:.3f} s: {records} records", flush=True)
    started = time.monotonic()
    result = commit(plan, stage_dir, shard_results, credentials, columns, schema, attempt_id)
    print(f"commit took {time.monotonic() - started:.3f} s: {result.rows_loaded} rows", flush=True)
    return result


def job_arguments(description: str, plan_help: str, continuous_help: str) -> argparse.ArgumentParser:
    """The arguments of a source's Spark job, the same for every source: one batch's encoded plan or a
    continuous run, the submission's attempt id, and where the Snowflake connection is read from."""
    parser = argparse.ArgumentParser(description=description)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument(PLAN_ARG, help=plan_help)
    what.add_argument(CONTINUOUS_ARG, help=continuous_help)
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


def main(argv: list[str] | None = None) -> int:
    parser = job_arguments(
        "Load one Kinesis micro-batch into Snowflake, or micro-batches back to back",
        plan_help="the BatchPlan, as planning.encode_plan encodes it",
        continuous_help="continuous mode: the ContinuousRun, as continuous.encode_run encodes it",
    )
    args = parser.parse_args(argv)
    if args.continuous:
        from airflow_kinesis_snowflake.core.continuous import decode_run

        run_spec = decode_run(args.continuous)
        credentials = JobCredentials.for_job(args.snowflake_connection_ref, run_spec.region)
    else:
        plan = decode_plan(args.plan)
        credentials = JobCredentials.for_job(args.snowflake_connection_ref, plan.region)
    with redacted_output(credentials.secret_values()):
        try:
            if args.continuous:
                # Each micro-batch is reported as it commits.
                run_continuous(run_spec, credentials, args.attempt)
                return 0
            result = run(plan, credentials, args.attempt)
        except UnknownKeyError as err:
            # A setting, not a fault: one line saying what to do, and no rows loaded.
            say(logging.ERROR, str(err))
            return 2
        except Exception:  # noqa: BLE001 - printed, then the job fails with status 1
            # Printed here rather than by the interpreter, so that it goes through the redaction, at ERROR.
            say_exception()
            return 1
        report(result)
    return 0


def report(result: BatchResult) -> None:
    """Print what a batch loaded and how its schema evolved (:func:`report_lines`)."""
    for line in report_lines(result):
        print(line)


def report_lines(result: BatchResult) -> list[str]:
    """What a batch loaded and how its schema evolved, one line each."""
    lines = [
        f"batch {result.batch_id}: {result.rows_loaded} rows loaded, "
        f"{result.dead_letters_loaded} dead letters, {len(result.shards)} shards"
    ]
    schema = result.schema
    added = ", ".join(
        f"{json.dumps(c['column'])} {c['type']}"
        + (f" (the table has {c['type_in_table']})" if "type_in_table" in c else "")
        for c in schema.get("columns_added", [])
    )
    if added:
        lines.append(f"schema evolution: added {added}")
    if schema.get("not_null_dropped"):
        lines.append(f"schema evolution: dropped NOT NULL of {', '.join(schema['not_null_dropped'])}")
    if schema.get("keys_skipped_total"):
        skipped = "; ".join(f"{k['key']}: {k['reason']}" for k in schema["keys_skipped"])
        lines.append(f"keys without a column, not loaded ({schema['keys_skipped_total']}): {skipped}")
    if schema.get("records_held_back"):
        lines.append(f"records kept whole in the parse-failure table: {schema['records_held_back']}")
    return lines
