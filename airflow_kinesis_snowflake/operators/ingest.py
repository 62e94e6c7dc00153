"""Run one micro-batch: plan from the lease table, load with Spark, then checkpoint."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
import zipfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow.sdk import Asset, AssetAlias, BaseOperator, Context
from airflow.sdk.exceptions import AirflowException, AirflowSkipException

import airflow_kinesis_snowflake
from airflow_kinesis_snowflake.core import job as spark_job
from airflow_kinesis_snowflake.core.load.evolution import UnknownKeys
from airflow_kinesis_snowflake.core.load.pipe import validate_pipe_definition
from airflow_kinesis_snowflake.core.load.snowflake_sink import SnowflakeSink
from airflow_kinesis_snowflake.core.model import (
    Checkpoint,
    ConsumerType,
    Destination,
    DestinationType,
    GenerationReason,
    InitialPosition,
    StartPosition,
)
from airflow_kinesis_snowflake.core.planning import BatchPlan, eligible_leases, plan_ranges
from airflow_kinesis_snowflake.core.state.errors import IdentityError, LeaseLostError, MaintenanceError
from airflow_kinesis_snowflake.core.state.generations import (
    Adoption,
    GenerationChoice,
    choose_generation,
    plan_adoption,
)
from airflow_kinesis_snowflake.core.state.holding import hold_leases
from airflow_kinesis_snowflake.core.state.leases import Lease, LeaseTable, earliest_start
from airflow_kinesis_snowflake.core.state.marks import (
    Resolution,
    clear_superseded,
    mark_superseded,
    resolve_application,
    set_generation,
)
from airflow_kinesis_snowflake.core.state.metadata import TableIdentity, check_identity, read_marks
from airflow_kinesis_snowflake.core.state.renewal import LeaseKeeper
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.hooks.spark import KinesisJobSubmitHook
from airflow_kinesis_snowflake.metrics import BatchFigures, emit_batch_metrics

DEFAULT_APPLICATION = spark_job.__file__


def table_asset(account: str, destination: Destination, region: str | None = None) -> Asset:
    """The destination table's Asset, ``snowflake://<account identifier>/<db>/<schema>/<table>``.

    The account identifier is normalised as the Snowflake provider's OpenLineage names it (lower
    case, a legacy locator as ``locator.region.cloud``), so the Asset and the lineage's output
    dataset name one table the same way.
    """
    from airflow.providers.snowflake.assets.snowflake import create_asset

    from airflow_kinesis_snowflake.lineage import snowflake_namespace

    return create_asset(
        account=snowflake_namespace(account, region).removeprefix("snowflake://"),
        database=destination.database,
        schema=destination.schema,
        table=destination.table,
    )


def _package_core(directory: Path) -> Path:
    """Zip ``airflow_kinesis_snowflake/core`` for ``--py-files``: executors need nothing else."""
    package = Path(airflow_kinesis_snowflake.__file__).parent
    archive = directory / "kinesis_snowflake_core.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(package / "__init__.py", "airflow_kinesis_snowflake/__init__.py")
        for path in sorted((package / "core").rglob("*.py")):
            zf.write(path, f"airflow_kinesis_snowflake/{path.relative_to(package).as_posix()}")
    return archive


class SparkKinesisIngestOperator(BaseOperator):
    """Load the next micro-batch of a Kinesis stream into a Snowflake table, exactly once.

    Plans one shard range per lease it takes (from the checkpoint, or the initial position on the
    application's first start, up to ``max_records_per_shard`` records that arrived before the run
    started), submits the Spark job through
    :class:`~airflow.providers.apache.spark.hooks.spark_submit.SparkSubmitHook`, and after the job
    committed rows and ledger in one Snowflake transaction, moves the DynamoDB checkpoints with
    conditional writes. Credentials never reach a spark-submit argument, a Spark setting or a log:
    in client deploy mode they are given to the spark-submit process as its environment; with the
    Spark connection's ``driver_identity`` extra the job uses its own AWS identity and reads the
    Snowflake connection from AWS Secrets Manager; cluster deploy mode is refused
    (:class:`~airflow_kinesis_snowflake.hooks.spark.KinesisJobSubmitHook`, ``docs/connections.md``).

    The application name and lease-table generation come from Snowflake's generations table
    (``KINESIS_INGEST_GENERATIONS``, next to the ledger); the DynamoDB lease table is a cache of it
    and of the ledger. A lease table that was lost (deleted by hand or by clean-up, or recreated
    empty) is rebuilt at the recorded generation, and its shards resume from the ledger's marks,
    with a warning: nothing is loaded twice. Only the reset DAG starts a connector over.

    :param stream_name: the Kinesis data stream.
    :param application_name: names the lease table; ingestions sharing it share progress. After a
        reset to a new name, the one it was superseded by is used (``docs/operations.md``). One
        application name serves one destination: a connector whose destination differs from the
        one the lease table records is refused.
    :param database: destination database.
    :param schema: destination schema.
    :param table: destination table; it must have a ``KINESISMETADATA`` OBJECT column.
    :param initial_position: TRIM_HORIZON, LATEST or AT_TIMESTAMP, used only while a shard has no
        checkpoint.
    :param initial_timestamp: ISO 8601 start time for AT_TIMESTAMP.
    :param consumer_type: SHARED_THROUGHPUT reads with GetRecords; ENHANCED_FAN_OUT subscribes to
        each shard (SubscribeToShard) through the stream consumer named after the application
        name, which the provisioning DAG registers.
    :param max_records_per_call: ``Limit`` of each GetRecords call (1..10000).
    :param max_records_per_shard: cap on records read from one shard in one batch.
    :param max_shards_per_batch: cap on shards one batch takes (None: all eligible).
    :param lease_duration_seconds: failover time: a lease not renewed for this long (its worker
        stopped) may be taken by another worker. Held leases are renewed every third of it.
    :param aws_conn_id: AWS connection for Kinesis and DynamoDB.
    :param region_name: AWS region; defaults to the connection's.
    :param snowflake_conn_id: Snowflake connection.
    :param spark_conn_id: Spark connection (its host is the master, e.g. ``local[2]``); its extras
        ``driver_identity`` and ``snowflake_connection_ref`` choose how the job gets its credentials;
        cluster deploy mode is refused before any lease is taken.
    :param spark_conf: extra ``--conf`` settings for spark-submit (never credentials: they are
        visible on the command line).
    :param application: the PySpark job file; defaults to the packaged job.
    :param destination_type: TABLE, ICEBERG, INTERACTIVE or PIPE; Iceberg and interactive tables
        are never altered.
    :param pipe_definition: PIPE: the pipe's ``COPY INTO <database>.<schema>.<table> FROM (SELECT
        ... FROM ...)``. Each batch runs it over its own staged records (JSON lines, ``$1`` is the
        record with its ``KINESISMETADATA``) in the transaction that moves the ledger.
    :param schema_evolution: add columns for new keys and drop NOT NULL where records lack a value;
        None follows the table's ``ENABLE_SCHEMA_EVOLUTION``.
    :param on_unknown_key: IGNORE or FAIL: what a key with no column that gets none does.
    :param connector_id: the connector, recorded in the lease table and named in refusals; the
        DAG id by default.
    """

    template_fields: Sequence[str] = (
        "stream_name",
        "application_name",
        "database",
        "schema",
        "table",
        "initial_timestamp",
        "aws_conn_id",
        "region_name",
        "snowflake_conn_id",
        "spark_conn_id",
        "spark_conf",
    )
    ui_color = "#8fd3ff"

    def __init__(
        self,
        *,
        stream_name: str,
        application_name: str,
        database: str,
        schema: str,
        table: str,
        initial_position: str = InitialPosition.TRIM_HORIZON.value,
        initial_timestamp: str | None = None,
        consumer_type: str = ConsumerType.SHARED_THROUGHPUT,
        max_records_per_call: int = 10000,
        max_records_per_shard: int = 100_000,
        max_shards_per_batch: int | None = None,
        lease_duration_seconds: int = 300,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        snowflake_conn_id: str = "snowflake_default",
        spark_conn_id: str = "spark_default",
        spark_conf: dict[str, Any] | None = None,
        application: str | None = None,
        destination_type: str = DestinationType.TABLE,
        pipe_definition: str | None = None,
        schema_evolution: bool | None = None,
        on_unknown_key: str = UnknownKeys.IGNORE.value,
        connector_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.connector_id = connector_id
        self.stream_name = stream_name
        self.application_name = application_name
        self.database = database
        self.schema = schema
        self.table = table
        self.initial_position = initial_position
        self.initial_timestamp = initial_timestamp
        if consumer_type not in tuple(ConsumerType):
            raise ValueError(f"consumer_type {consumer_type!r} is not one of {', '.join(ConsumerType)}")
        self.consumer_type = consumer_type
        self.max_records_per_call = max_records_per_call
        self.max_records_per_shard = max_records_per_shard
        self.max_shards_per_batch = max_shards_per_batch
        self.lease_duration_seconds = lease_duration_seconds
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.snowflake_conn_id = snowflake_conn_id
        self.spark_conn_id = spark_conn_id
        self.spark_conf = spark_conf
        self.application = application
        self.destination_type = destination_type
        self.pipe_definition = pipe_definition
        self.schema_evolution = schema_evolution
        self.on_unknown_key = UnknownKeys(on_unknown_key)
        self._spark_hook: KinesisJobSubmitHook | None = None
        self._last_summary: dict[str, Any] | None = None

    # -- planning -------------------------------------------------------------------------------

    def _start_position(self, now: datetime) -> StartPosition:
        ts = datetime.fromisoformat(self.initial_timestamp.replace("Z", "+00:00")) if self.initial_timestamp else None
        return StartPosition.resolve(InitialPosition(self.initial_position), ts, now)

    @staticmethod
    def _cutoff(context: Context, now: datetime) -> datetime:
        # The run's start is shared by every try of this task, so a retry plans the same batch.
        dag_run = context.get("dag_run")
        start = getattr(dag_run, "start_date", None) if dag_run is not None else None
        if isinstance(start, datetime):
            return min(start if start.tzinfo else start.replace(tzinfo=UTC), now)
        return now

    def _take_leases(self, table: LeaseTable, leases: dict[str, Lease], owner: str) -> list[Lease]:
        held: list[Lease] = []
        for lease in eligible_leases(leases, time.time()):
            if self.max_shards_per_batch is not None and len(held) >= self.max_shards_per_batch:
                break
            taken = table.take(lease, owner, self.lease_duration_seconds)
            if taken is not None:
                held.append(taken)
        return held

    # -- execution ------------------------------------------------------------------------------

    def _resolve_application(self, client: Any) -> Resolution | MaintenanceError:
        """Skip while a reset works on the connector; read with the name a reset switched to.

        ``application_name`` (the connector file's) is where resolution starts; see
        :func:`~airflow_kinesis_snowflake.core.state.marks.resolve_application`. A broken chain
        (a table it points to is gone) is returned: Snowflake's record may repair it.
        """
        try:
            resolution = resolve_application(client, self.application_name)
        except MaintenanceError as err:
            return err
        if resolution.reset is not None:
            mark = resolution.reset.to_dict()
            self.log.info(
                "Skipped: a %s reset of %s is in progress (%s, until %s); the next run reads once it ends",
                mark["mode"],
                resolution.reset_table,
                mark["owner"],
                mark["expires_at"],
            )
            raise AirflowSkipException(f"reset of {resolution.reset_table} in progress")
        if resolution.superseded:
            self.log.info(
                "Application %s was superseded by %s (a reset); reading with %s",
                self.application_name,
                resolution.active,
                resolution.active,
            )
        return resolution

    def _pipe_definition(self, destination: Destination) -> str | None:
        """The validated pipe statement of a PIPE destination; None for the others."""
        is_pipe = self.destination_type.upper() == DestinationType.PIPE
        if is_pipe != (self.pipe_definition is not None):
            raise AirflowException(
                "pipe_definition is required with destination_type PIPE"
                if is_pipe
                else f"pipe_definition is only used with destination_type PIPE (not {self.destination_type})"
            )
        if self.pipe_definition is None:
            return None
        try:
            return validate_pipe_definition(self.pipe_definition, destination)
        except ValueError as err:
            raise AirflowException(f"pipe_definition {err}") from None

    def _consumer_arn(self, kinesis: KinesisStreamHook, application_name: str) -> str | None:
        """The ARN of the fan-out consumer the batch reads through; None for shared throughput.

        The consumer is named after the application name in use, so after a reset to a new name
        it is the new name's consumer, which the reset registered.
        """
        if self.consumer_type != ConsumerType.ENHANCED_FAN_OUT:
            return None
        consumer = kinesis.describe_consumer(self.stream_name, application_name)
        status = consumer["ConsumerStatus"] if consumer is not None else "not registered"
        if consumer is None or status != "ACTIVE":
            raise AirflowException(
                f"enhanced fan-out consumer {application_name!r} of stream {self.stream_name!r} is {status}, "
                "not ACTIVE; run the connector's provisioning DAG (its register_fan_out_consumer task) first"
            )
        arn: str = consumer["ConsumerARN"]
        return arn

    def execute(self, context: Context) -> dict[str, Any]:
        destination = Destination(self.database.upper(), self.schema.upper(), self.table.upper())
        pipe_definition = self._pipe_definition(destination)
        # A Spark connection the job cannot run with (cluster deploy mode) fails before any lease is taken.
        spark = KinesisJobSubmitHook(conn_id=self.spark_conn_id, conf=self.spark_conf)
        spark.check_credential_delivery()
        self._spark_hook = spark
        configured = self.application_name
        client = LeaseTableHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name, table_name=configured).conn
        resolution = self._resolve_application(client)
        kinesis = KinesisStreamHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        stream_arn, stream_created = kinesis.stream_identity(self.stream_name)
        identity = TableIdentity(
            connector_id=self.connector_id or self.dag_id,
            destination=f"{destination.database}.{destination.schema}.{destination.table}",
            stream_arn=stream_arn,
            stream_created_at=stream_created,
        )
        active = resolution.active if isinstance(resolution, Resolution) else None
        found = read_marks(client, active) if active else None
        if active is not None:
            # Refused before anything is recorded or read: another connector's table is not ours to adopt.
            self._check_identity(LeaseTable(client, active), identity)
        consumer_arn = self._consumer_arn(kinesis, active or configured)
        now = datetime.now(UTC)
        snowflake = KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id)
        conn = snowflake.get_conn()
        try:
            sink = SnowflakeSink(conn, destination)
            sink.ensure_support_objects()
            sink.describe_columns()  # fail early, before taking leases, if the table is missing
            recorded = sink.latest_generation(configured)
            start = self._start_position(now)
            if found is not None and active is not None:
                # The table's own first start: a first recorded run, or a stopped reset withdrawn.
                start = earliest_start(LeaseTable(client, active).leases().values()) or start
            recorded_table = (
                found
                if recorded is None or recorded.application_name == active
                else read_marks(client, recorded.application_name)
            )
            try:
                choice = choose_generation(
                    configured=configured,
                    active=active,
                    table_generation=found.generation_id if found else None,
                    recorded=recorded,
                    ledger_generations=sink.ledger_generations(active or configured) if recorded is None else (),
                    recorded_table_generation=recorded_table.generation_id if recorded_table else None,
                    connector_id=identity.connector_id,
                    destination=identity.destination,
                    start=start,
                    stream_arn=stream_arn,
                    stream_created_at=stream_created,
                )
            except (MaintenanceError, IdentityError) as err:
                cause = f" ({resolution})" if isinstance(resolution, MaintenanceError) else ""
                raise AirflowException(f"{err}{cause}") from err
            adoption, caught_up = None, {}
            if choice.adopted:
                target = read_marks(client, choice.application_name)
                chain = resolution.chain if isinstance(resolution, Resolution) else (configured,)
                adoption = plan_adoption(
                    choice,
                    configured=configured,
                    table=target,
                    has_leases=target is not None and bool(LeaseTable(client, choice.application_name).leases()),
                    chain=chain,
                    existing=[n for n in dict.fromkeys((*chain, configured)) if read_marks(client, n) is not None],
                )
                if adoption.catch_up is not None:
                    caught_up = sink.read_ledger(choice.application_name, adoption.catch_up)
            if choice.record is not None:
                sink.record_generation(choice.record)
            ledger = sink.read_ledger(choice.application_name, choice.generation_id)
        finally:
            conn.close()
        if choice.record is not None and choice.record.reason is GenerationReason.RESET_WITHDRAWN:
            self.log.warning("%s", choice.why)
        if adoption is not None:
            self._adopt(client, adoption, choice, identity, ledger, caught_up)
        self.application_name = choice.application_name
        table = LeaseTable(client, choice.application_name)
        self._check_identity(table, identity)
        table.record_identity(identity)
        table.record_ingest()

        if choice.application_name != (active or configured):
            consumer_arn = self._consumer_arn(kinesis, choice.application_name)
        cutoff = self._cutoff(context, now)
        shards = kinesis.list_shards(self.stream_name)
        leases = table.sync_shards(shards, choice.start or start)
        removed = table.remove_finished_parents(leases)
        if removed:
            # Their children started: nothing of them is read again, and the table stays small.
            self.log.info("Removed the leases of finished parent shards %s", ", ".join(removed))
            leases = {k: v for k, v in leases.items() if k not in removed}

        ti = context["ti"]
        owner = f"{ti.dag_id}/{ti.run_id}/{ti.try_number}/{uuid.uuid4().hex[:8]}"
        held = self._take_leases(table, leases, owner)
        if not held:
            self.log.info("No shard to read: every shard is finished, held by another worker, or waits for its parents")
            return {"rows_loaded": 0, "dead_letters": 0, "shards": {}}
        keeper = LeaseKeeper(table, owner, self.lease_duration_seconds)
        # The freshest copy of each lease we hold: releasing needs its current counter.
        fresh = {lease.shard_id: lease for lease in held}
        try:
            held = [self._fast_forward(table, lease, ledger.get(lease.shard_id)) for lease in held]
            fresh = {lease.shard_id: lease for lease in held}
            ends = {s.shard_id: s.ending_sequence_number for s in shards}
            plan = BatchPlan(
                application_name=self.application_name,
                generation_id=choice.generation_id,
                stream_name=self.stream_name,
                region=kinesis.region_name or "us-east-1",
                destination=destination,
                cutoff=cutoff,
                max_records_per_call=self.max_records_per_call,
                ranges=plan_ranges(
                    held, max_records_per_shard=self.max_records_per_shard, ending_sequence_numbers=ends
                ),
                destination_type=self.destination_type,
                schema_evolution=self.schema_evolution,
                on_unknown_key=self.on_unknown_key,
                pipe_definition=pipe_definition,
                consumer_type=self.consumer_type,
                consumer_arn=consumer_arn,
            )
            self.log.info(
                "Batch %s: %d shard ranges (%s), cut-off %s, read %s",
                plan.batch_id,
                len(plan.ranges),
                ", ".join(r.shard_id for r in plan.ranges),
                cutoff.isoformat(),
                f"through fan-out consumer {consumer_arn}" if consumer_arn else "with GetRecords",
            )
            try:
                # Renew the leases while Spark runs, so a long batch keeps its shards.
                with keeper.keep(held):
                    result = self._run_spark(plan, spark, kinesis, snowflake)
            finally:
                fresh = {lease.shard_id: lease for lease in keeper.leases if lease.shard_id not in keeper.lost}
            if keeper.lost:
                self.log.warning(
                    "Leases lost during the batch (rows are in Snowflake; the ledger moves the next owner on): %s",
                    sorted(keeper.lost),
                )
            summary = self._commit_checkpoints(table, fresh, result)
            self._last_summary = summary
            try:
                self._report(context, result, summary, destination, snowflake)
            except Exception:  # the batch is committed: reporting it must not fail the task
                self.log.warning("Could not report batch %s", summary["batch_id"], exc_info=True)
        finally:
            for lease in fresh.values():
                self._release(table, lease)
            try:
                table.stop_heartbeat(owner)
            except Exception:  # noqa: BLE001 - a stale heartbeat item is harmless
                self.log.warning("Could not remove the heartbeat of %s", owner)
        return summary

    def _check_identity(self, table: LeaseTable, identity: TableIdentity) -> None:
        """Refuse a table whose progress belongs to another destination or an earlier stream."""
        metadata = table.metadata()
        if metadata is None:
            return
        try:
            check_identity(table.table_name, metadata.identity, identity)
        except IdentityError as err:
            raise AirflowException(str(err)) from err

    def _adopt(
        self,
        client: Any,
        adoption: Adoption,
        choice: GenerationChoice,
        identity: TableIdentity,
        ledger: dict[str, Checkpoint],
        caught_up: dict[str, Checkpoint],
    ) -> None:
        """Make DynamoDB hold the generation Snowflake records: the lease table, its generation, the pointers."""
        name = choice.application_name
        table = LeaseTable(client, name)
        if adoption.create and table.create(
            stream_name=self.stream_name, application_name=name, identity=identity, generation_id=choice.generation_id
        ):
            self.log.warning("Lease table %s did not exist: created it again", name)
        if adoption.catch_up is not None:
            self._catch_up(table, adoption.catch_up, caught_up)
        if adoption.set_generation:
            try:
                set_generation(client, name, choice.generation_id, expected=adoption.current_generation)
            except MaintenanceError as err:
                raise AirflowException(f"{err}; the next run decides again") from err
        if adoption.clear_superseded:
            clear_superseded(client, name)
        for other in adoption.point:
            mark_superseded(client, other, by=name)
        self.log.warning(
            "Lease table lost or recreated: %s. Adopted generation %s of application %s from Snowflake; shards %s "
            "resume from the ledger's marks (nothing is loaded twice), shards without a mark start at %s. Only the "
            "reset DAG starts a connector over.",
            choice.why,
            choice.generation_id,
            name,
            ", ".join(f"{shard} at {mark.sequence_number}" for shard, mark in sorted(ledger.items())) or "(none)",
            (choice.start or self._start_position(datetime.now(UTC))).to_dict(),
        )

    def _catch_up(self, table: LeaseTable, generation: str, marks: dict[str, Checkpoint]) -> None:
        """Hold every shard lease of ``table`` and move it to ``generation``'s ledger marks, loading nothing."""
        owner = f"adopt/{self.dag_id}/{uuid.uuid4().hex[:8]}"
        held = hold_leases(
            table,
            owner,
            hold_seconds=self.lease_duration_seconds,
            timeout_seconds=self.lease_duration_seconds * 2,
        )
        try:
            for shard_id, lease in list(held.items()):
                held[shard_id] = self._fast_forward(table, lease, marks.get(shard_id))
        finally:
            for lease in held.values():
                self._release(table, lease)
        self.log.warning(
            "The shard leases of %s belonged to generation %s: moved to its ledger marks before the switch",
            table.table_name,
            generation,
        )

    def _report(
        self,
        context: Context,
        result: dict[str, Any],
        summary: dict[str, Any],
        destination: Destination,
        snowflake: KinesisSnowflakeHook,
    ) -> None:
        """Metrics of the batch, and an event of the table's Asset when rows landed in it."""
        table = f"{destination.database}.{destination.schema}.{destination.table}"
        emit_batch_metrics(
            BatchFigures.from_result(result),
            application_name=self.application_name,
            stream_name=self.stream_name,
            table=table,
        )
        account, region = snowflake.account_and_region()
        aliases = [outlet for outlet in self.outlets if isinstance(outlet, AssetAlias)]
        if not aliases or not summary["rows_loaded"]:
            return
        if not account:
            self.log.warning("The Snowflake connection names no account: no Asset event for %s", table)
            return
        asset = table_asset(account, destination, region)
        extra = {
            "batch_id": summary["batch_id"],
            "rows_loaded": summary["rows_loaded"],
            "dead_letters": summary["dead_letters"],
            "stream_name": self.stream_name,
            "application_name": self.application_name,
        }
        for alias in aliases:
            context["outlet_events"][alias].add(asset, extra=extra)
        self.log.info("Asset event for %s: %s", asset.uri, extra)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        from airflow_kinesis_snowflake.lineage import ingest_lineage

        return ingest_lineage(self, task_instance)

    def _fast_forward(self, table: LeaseTable, lease: Lease, mark: Checkpoint | None) -> Lease:
        """A batch whose Snowflake commit landed but whose checkpoint did not: catch up, load nothing."""
        if mark is not None and (lease.checkpoint is None or mark > lease.checkpoint):
            self.log.warning(
                "Shard %s: ledger is ahead of the checkpoint (%s > %s); moving the checkpoint without reloading",
                lease.shard_id,
                mark.to_dict(),
                lease.checkpoint.to_dict() if lease.checkpoint else None,
            )
            return table.checkpoint(lease, mark)
        return lease

    def _run_spark(
        self,
        plan: BatchPlan,
        spark: KinesisJobSubmitHook,
        kinesis: KinesisStreamHook,
        snowflake: KinesisSnowflakeHook,
    ) -> dict[str, Any]:
        workdir = Path(tempfile.mkdtemp(prefix=f"kinesis-{plan.batch_id}-"))
        try:
            plan_path = workdir / "plan.json"
            result_path = workdir / "result.json"
            plan_path.write_text(plan.to_json())
            spark.submit_job(
                self.application or DEFAULT_APPLICATION,
                application_args=["--plan", str(plan_path), "--result", str(result_path)],
                kinesis=kinesis,
                snowflake=snowflake,
                name=f"kinesis-to-snowflake-{self.application_name}",
                py_files=str(_package_core(workdir)),
            )
            if not result_path.exists():
                raise AirflowException(f"Spark job for batch {plan.batch_id} finished without writing {result_path}")
            result: dict[str, Any] = json.loads(result_path.read_text())
            return result
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _commit_checkpoints(
        self, table: LeaseTable, by_shard: dict[str, Lease], result: dict[str, Any]
    ) -> dict[str, Any]:
        """Move each shard's checkpoint to what the job committed; ``by_shard`` is updated in place."""
        shards: dict[str, Any] = {}
        for shard in result["shards"]:
            lease = by_shard.get(shard["shard_id"])
            if lease is None:  # lost during the batch: its new owner fast-forwards from the ledger
                continue
            end = Checkpoint.from_dict(shard["end"]) if shard["end"] else None
            if end is not None or shard["shard_end"]:
                try:
                    lease = table.checkpoint(lease, end, shard_end=shard["shard_end"])
                    by_shard[lease.shard_id] = lease
                except LeaseLostError as err:
                    # Rows are safe in Snowflake; the ledger fast-forwards whoever holds it now.
                    self.log.warning("%s", err)
                    del by_shard[lease.shard_id]
            position = end or lease.checkpoint
            shards[shard["shard_id"]] = {
                "records": shard["records"],
                "dead_letters": shard["dead_letters"],
                "checkpoint": position.to_dict() if position else None,
                "shard_end": shard["shard_end"],
            }
            self.log.info(
                "Shard %s: %d records, checkpoint %s%s",
                shard["shard_id"],
                shard["records"],
                shards[shard["shard_id"]]["checkpoint"],
                " (SHARD_END)" if shard["shard_end"] else "",
            )
        self.log.info(
            "Batch %s: %d rows loaded, %d dead letters",
            result["batch_id"],
            result["rows_loaded"],
            result["dead_letters"],
        )
        return {
            "batch_id": result["batch_id"],
            "rows_loaded": result["rows_loaded"],
            "dead_letters": result["dead_letters"],
            "shards": shards,
        }

    def _release(self, table: LeaseTable, lease: Lease) -> None:
        try:
            table.release(lease)
        except Exception:  # releasing is best effort: the lease expires anyway
            self.log.warning("Could not release the lease on %s", lease.shard_id, exc_info=True)

    def on_kill(self) -> None:
        if self._spark_hook is not None:
            self._spark_hook.on_kill()
