"""DAG factory: one connector YAML file becomes its DAGs.

Give each connector file a small DAG file of its own, and the directory one for clean-up::

    # dags/kinesis_snowflake_orders.py (python -m airflow_kinesis_snowflake dag-file dags/connectors/orders.yaml)
    globals().update(build_connector_file_dags(Path(__file__).parent / "connectors" / "orders.yaml"))

    # dags/kinesis_snowflake_connectors.py
    globals().update(build_cleanup_dags(Path(__file__).parent / "connectors"))

Airflow records import errors per Python file, and a file with an import error has all its DAGs
marked stale: with a DAG file per connector, a mistake in one connector file is an import error
of that connector's DAG file, naming the connector file, the field and the allowed values, and every
other connector's DAGs keep loading and running. The clean-up DAG is only built when every
connector file of its directory is valid, since it must know every application name in use, and
has its DAG file, since a connector file without one would have no DAGs and no import error.
``build_connector_dags`` builds everything from one Python file instead: no DAG file to write per
connector, but one invalid connector file is an import error of that file, and no connector's DAGs
load. The two ways never share a DAG folder: each refuses when it finds the other there.

A DynamoDB connector file (``source.type: dynamodb``) gets ``dynamodb_snowflake_<id>_provision``
(manual: lease table, then each discovered table's Snowflake objects) and
``dynamodb_snowflake_<id>_sync`` (scheduled: discover the tables, then one mapped task per table), and
``dynamodb_snowflake_<id>_reset`` (manual, dry run by default: a new snapshot of chosen tables).

Each Kinesis connector gets ``kinesis_snowflake_<id>_provision`` (manual: check IAM, lease table, fan-out
consumer, Snowflake objects, verify), ``kinesis_snowflake_<id>_ingest`` (scheduled
micro-batches), ``kinesis_snowflake_<id>_reset`` and ``kinesis_snowflake_<id>_restore`` (manual,
with a trigger form; dry run unless told otherwise). Each directory of connector files also gets
one ``kinesis_snowflake_cleanup`` (daily report of orphaned lease tables, migration copies and
fan-out consumers of its Kinesis connectors; deletes only when triggered to).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, AssetAlias, AssetWatcher, Param

from airflow_kinesis_snowflake import docs_url
from airflow_kinesis_snowflake.compat import TriggerRule
from airflow_kinesis_snowflake.config import (
    APPLICATION_NAME_PATTERN,
    ON_NEW_RECORDS,
    AnyConnectorConfig,
    ConnectorConfig,
    ConnectorConfigError,
    ConsumerType,
    DynamoDBConnectorConfig,
    connector_files,
    duplicate_connector_id_error,
    duplicate_connector_ids,
    dynamodb_connectors,
    kinesis_connectors,
    load_any_connector_config,
    load_any_connector_configs,
)
from airflow_kinesis_snowflake.core.admin.cleanup import DEFAULT_RETENTION_SECONDS
from airflow_kinesis_snowflake.core.admin.cleanup_run import CONFIRMATION
from airflow_kinesis_snowflake.core.admin.iam import IamCheckMode
from airflow_kinesis_snowflake.core.model import InitialPosition
from airflow_kinesis_snowflake.core.state.marks import ResetMode
from airflow_kinesis_snowflake.operators.cleanup import CleanupOrphanedTablesOperator
from airflow_kinesis_snowflake.operators.dynamodb import TABLE_MAP_INDEX, SyncDynamoDBTableOperator
from airflow_kinesis_snowflake.operators.dynamodb_cleanup import CleanupDynamoDBGenerationsOperator
from airflow_kinesis_snowflake.operators.dynamodb_discovery import DiscoverDynamoDBTablesOperator
from airflow_kinesis_snowflake.operators.dynamodb_provision import (
    CreateDynamoDBLeaseTableOperator,
    ProvisionDynamoDBTableOperator,
)
from airflow_kinesis_snowflake.operators.dynamodb_reset import ResetDynamoDBTablesOperator
from airflow_kinesis_snowflake.operators.fan_out import RegisterStreamConsumerOperator
from airflow_kinesis_snowflake.operators.iam import CheckDynamoDBIamPermissionsOperator, CheckIamPermissionsOperator
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from airflow_kinesis_snowflake.operators.lease_table import CreateLeaseTableOperator
from airflow_kinesis_snowflake.operators.migration import MigrateLegacyCheckpointsOperator
from airflow_kinesis_snowflake.operators.reset import ResetConnectorStateOperator
from airflow_kinesis_snowflake.operators.restore import RestoreCheckpointsOperator
from airflow_kinesis_snowflake.operators.snowflake import ProvisionSnowflakeObjectsOperator
from airflow_kinesis_snowflake.operators.snowflake_verify import VerifySnowflakeObjectsOperator
from airflow_kinesis_snowflake.registry import source_of
from airflow_kinesis_snowflake.sensors.kinesis import KinesisNewRecordsSensor
from airflow_kinesis_snowflake.triggers.kinesis import KinesisNewRecordsTrigger

START_DATE = datetime(2026, 1, 1, tzinfo=UTC)
CLEANUP_DAG_ID = "kinesis_snowflake_cleanup"


def dag_id_prefix(config: AnyConnectorConfig) -> str:
    """How every DAG id of a connector begins: ``<source.type>_snowflake_<connector_id>``
    (``kinesis_snowflake_orders``, ``dynamodb_snowflake_customers``)."""
    return f"{config.source_type}_snowflake_{config.connector_id}"


def ingest_dag_id(config: ConnectorConfig) -> str:
    return f"{dag_id_prefix(config)}_ingest"


def provision_dag_id(config: AnyConnectorConfig) -> str:
    return f"{dag_id_prefix(config)}_provision"


def reset_dag_id(config: ConnectorConfig) -> str:
    return f"{dag_id_prefix(config)}_reset"


def restore_dag_id(config: ConnectorConfig) -> str:
    return f"{dag_id_prefix(config)}_restore"


def _dag_args(config: AnyConnectorConfig) -> dict[str, Any]:
    # A hung task (a Spark job that never ends) fails after its execution timeout; its leases expire
    # and a retry, or the next run, takes over from the ledger. A run ends once every try had its time.
    return {
        "start_date": START_DATE,
        "catchup": False,
        "tags": ["kinesis", "snowflake", config.connector_id],
        "dagrun_timeout": config.batch.dag_run_timeout,
        "default_args": {
            "retries": config.batch.retries,
            "retry_delay": timedelta(seconds=config.batch.retry_delay_seconds),
            "execution_timeout": config.batch.execution_timeout,
        },
    }


def table_asset_alias(connector_id: str) -> str:
    """Name of the AssetAlias the ingest task (a DynamoDB connector's sync task) adds its tables' Asset events to."""
    return f"kinesis_snowflake_{connector_id}_table"


def new_records_asset_name(connector_id: str) -> str:
    """Name of the Asset whose watcher starts the ingest DAG when records arrive (``schedule: on_new_records``)."""
    return f"kinesis_snowflake_{connector_id}_new_records"


def _ingest_schedule(config: ConnectorConfig) -> Any:
    """The ingest DAG's schedule: the connector's, or an Asset watched by the provider's new-records trigger."""
    if config.batch.schedule != ON_NEW_RECORDS:
        return config.batch.schedule
    name = new_records_asset_name(config.connector_id)
    trigger = KinesisNewRecordsTrigger(
        stream_name=config.source.stream_name,
        application_name=config.source.application_name,
        aws_conn_id=config.connections.aws,
        region_name=config.source.region,
        poke_interval=config.batch.new_records_poll_seconds,
    )
    return [Asset(name=name, watchers=[AssetWatcher(name=name, trigger=trigger)])]


def _create_lease_table(config: ConnectorConfig) -> CreateLeaseTableOperator:
    return CreateLeaseTableOperator(
        task_id="create_lease_table",
        application_name=config.source.application_name,
        stream_name=config.source.stream_name,
        connector_id=config.connector_id,
        destination=".".join((config.destination.database, config.destination.schema_, config.destination.table)),
        aws_conn_id=config.connections.aws,
        region_name=config.source.region,
    )


def _provision_steps(steps: Sequence[Any]) -> None:
    """Chain a provision DAG's steps, each after the one before, every one after the first running
    unless a step before it failed (``NONE_FAILED``), for every source.

    A skipped IAM check (it could not run, and the connector's ``source.iam_check`` is ``best_effort``)
    is no failure: provisioning goes on. Under Airflow's default rule (``ALL_SUCCESS``) the skip
    would spread to every later step, and the run would succeed with nothing provisioned. A step
    that fails (a check in ``required`` mode, too) still stops every later one.
    """
    for upstream, downstream in itertools.pairwise(steps):
        downstream.trigger_rule = TriggerRule.NONE_FAILED
        upstream >> downstream


def build_provision_dag(config: ConnectorConfig) -> DAG:
    """[check_iam] >> [migrate] >> create_lease_table >> [register consumer] >> provision >> verify.

    Manually triggered; every step is idempotent, so running it again changes nothing. The IAM
    check runs in the connector's ``source.iam_check`` mode, and not at all when it is ``off``.
    """
    src, conns = config.source, config.connections
    with DAG(
        dag_id=provision_dag_id(config),
        description=f"Provision Kinesis stream {src.stream_name} -> Snowflake {config.table_fqn}",
        schedule=None,
        doc_md=_PROVISION_DOC,
        max_active_runs=1,
        **_dag_args(config),
    ) as dag:
        steps: list[Any] = []
        if src.iam_check is not IamCheckMode.OFF:
            steps.append(
                CheckIamPermissionsOperator(
                    task_id="check_iam_permissions",
                    stream_name=src.stream_name,
                    application_name=src.application_name,
                    consumer_type=src.consumer_type.value,
                    region_name=src.region,
                    aws_conn_id=conns.aws,
                    include_migration_table=src.migrate_legacy_checkpoints,
                    check_mode=src.iam_check.value,
                )
            )
        if src.migrate_legacy_checkpoints:
            steps.append(
                MigrateLegacyCheckpointsOperator(
                    task_id="migrate_legacy_checkpoints",
                    application_name=src.application_name,
                    stream_name=src.stream_name,
                    aws_conn_id=conns.aws,
                    region_name=src.region,
                    initial_timestamp=src.initial_timestamp,
                )
            )
        steps.append(_create_lease_table(config))
        if src.consumer_type is ConsumerType.ENHANCED_FAN_OUT:
            steps.append(
                RegisterStreamConsumerOperator(
                    task_id="register_fan_out_consumer",
                    stream_name=src.stream_name,
                    consumer_name=src.application_name,
                    aws_conn_id=conns.aws,
                    region_name=src.region,
                )
            )
        steps.append(ProvisionSnowflakeObjectsOperator.from_connector_config(config, task_id="provision_snowflake"))
        steps.append(VerifySnowflakeObjectsOperator.from_connector_config(config, task_id="verify_snowflake"))
        _provision_steps(steps)
    return dag


def build_ingest_dag(config: ConnectorConfig) -> DAG:
    """[wait_for_records] >> create_lease_table >> ingest, on the connector's schedule, one run at a time.

    With ``batch.wait_for_records`` a run whose shards hold nothing beyond their checkpoints that
    arrived before it started ends skipped, and starts no Spark. With ``schedule: on_new_records``
    the DAG is scheduled by an Asset whose watcher runs the provider's new-records trigger.
    """
    src, dst, conns, spark = config.source, config.destination, config.connections, config.spark
    with DAG(
        dag_id=ingest_dag_id(config),
        description=f"Kinesis stream {src.stream_name} -> Snowflake {config.table_fqn}",
        schedule=_ingest_schedule(config),
        doc_md=_INGEST_DOC,
        max_active_runs=1,
        **_dag_args(config),
    ) as dag:
        ingest = SparkKinesisIngestOperator(
            task_id="ingest",
            stream_name=src.stream_name,
            application_name=src.application_name,
            database=dst.database,
            schema=dst.schema_,
            table=dst.table,
            initial_position=src.initial_position.value,
            initial_timestamp=src.initial_timestamp.isoformat() if src.initial_timestamp else None,
            consumer_type=src.consumer_type.value,
            max_records_per_call=src.max_records_per_call,
            max_records_per_shard=config.batch.max_records_per_shard,
            max_bytes_per_shard=config.batch.max_bytes_per_shard,
            max_shards_per_batch=config.batch.max_shards_per_batch,
            lease_duration_seconds=config.batch.lease_duration_seconds,
            mode=config.batch.mode,
            max_runtime_minutes=config.batch.max_runtime_minutes,
            idle_seconds=config.batch.idle_seconds,
            destination_type=dst.type.value,
            pipe_definition=dst.pipe_definition,
            schema_evolution=dst.ingest_schema_evolution,
            on_unknown_key=dst.on_unknown_key.value,
            connector_id=config.connector_id,
            aws_conn_id=conns.aws,
            region_name=src.region,
            snowflake_conn_id=conns.snowflake,
            spark_conn_id=conns.spark,
            spark_conf=spark.spark_conf() or None,
            spark_submit=spark.submit_arguments(),
            spark_platform=spark.platform_arguments(),
            deferrable=spark.deferrable,
            cloudwatch_namespace=config.metrics.cloudwatch_namespace,
            cloudwatch_dimensions=list(config.metrics.dimensions),
            # The table's Asset (snowflake://<account>/<db>/<schema>/<table>) gets an event per batch
            # that loaded rows; the account is known once the Snowflake connection is read.
            outlets=[AssetAlias(name=table_asset_alias(config.connector_id))],
        )
        steps: list[Any] = [_create_lease_table(config), ingest]
        wait = config.batch.wait_for_records
        # Off by default for fan-out (no GetRecords otherwise) and continuous runs (which wait themselves).
        by_default = src.consumer_type is ConsumerType.SHARED_THROUGHPUT and config.batch.mode == "scheduled"
        if wait if wait is not None else by_default:
            steps.insert(
                0,
                KinesisNewRecordsSensor(
                    task_id="wait_for_records",
                    stream_name=src.stream_name,
                    application_name=src.application_name,
                    only_before_run_start=True,  # the batch's cut-off: one check, no wait
                    aws_conn_id=conns.aws,
                    region_name=src.region,
                    soft_fail=True,
                    timeout=0,
                    deferrable=False,
                ),
            )
        for upstream, downstream in itertools.pairwise(steps):
            upstream >> downstream
    return dag


#: A maintenance task (reset, restore, clean-up) fails after this long; its run after a little more.
MAINTENANCE_TIMEOUT = timedelta(hours=2)


def _maintenance_args(tags: Sequence[str]) -> dict[str, Any]:
    # A destructive step that failed halfway is for a person to look at, not to retry blindly.
    return {
        "start_date": START_DATE,
        "catchup": False,
        "tags": ["kinesis", "snowflake", "maintenance", *tags],
        "dagrun_timeout": MAINTENANCE_TIMEOUT + timedelta(minutes=30),
        "default_args": {"retries": 0, "execution_timeout": MAINTENANCE_TIMEOUT},
        "max_active_runs": 1,
    }


def _dry_run_param() -> Param:
    return Param(
        True,
        type="boolean",
        title="Dry run",
        description="Only report what would change. Untick, and fill in Confirm, to act.",
    )


def _lease_wait_param(config: ConnectorConfig) -> Param:
    default = config.batch.lease_duration_seconds + 60
    return Param(
        default,
        type="integer",
        minimum=0,
        maximum=max(86_400, default),
        title="Wait for running batches (seconds)",
        description="How long to wait for running ingest batches to release their leases before giving up. "
        "The default is the connector's lease duration plus a minute, so a batch that died has expired by then.",
    )


def build_reset_dag(config: ConnectorConfig, *, backup_dir: str | None = None) -> DAG:
    """One manually triggered task, ``reset``, with a trigger form (see :class:`ResetConnectorStateOperator`)."""
    src, conns = config.source, config.connections
    params = {
        "mode": Param(
            ResetMode.NEW_APPLICATION_NAME.value,
            type="string",
            enum=[m.value for m in ResetMode],
            values_display={
                ResetMode.NEW_APPLICATION_NAME.value: "New application name (new lease table, old one kept)",
                ResetMode.DELETE_TABLE.value: "Delete the lease table (created again, new generation)",
            },
            title="Reset mode",
            description="new_application_name: a new lease table under a new name; the old table stays, marked as "
            "superseded, and ingestions switch to the new name. delete_table: the active lease table is deleted and "
            "created again, empty.",
        ),
        "new_application_name": Param(
            None,
            type=["null", "string"],
            pattern=APPLICATION_NAME_PATTERN,
            title="New application name",
            description="Mode new_application_name only: a DynamoDB table name never used before, 3-245 letters, "
            "digits, '_', '.' or '-'. It names the new lease table (and fan-out consumer).",
        ),
        "initial_position": Param(
            src.initial_position.value,
            type="string",
            enum=[p.value for p in InitialPosition],
            title="Start position",
            description="Where every shard starts after the reset: TRIM_HORIZON (oldest record kept), LATEST "
            "(records arriving after the reset) or AT_TIMESTAMP (records arriving at or after Start time).",
        ),
        "initial_timestamp": Param(
            src.initial_timestamp.isoformat() if src.initial_timestamp else None,
            type=["null", "string"],
            format="date-time",
            title="Start time",
            description="With AT_TIMESTAMP only: ISO 8601, e.g. 2026-01-31T00:00:00Z.",
        ),
        "dry_run": _dry_run_param(),
        "confirm": Param(
            "",
            type="string",
            title="Confirm",
            description="To act (dry run off), type the connector's current application name; a dry run reports it. "
            f"It is {src.application_name!r} until a reset to a new name.",
        ),
        "lease_wait_timeout_seconds": _lease_wait_param(config),
    }
    with DAG(
        dag_id=reset_dag_id(config),
        description=f"Reset the Kinesis position of connector {config.connector_id} (dry run by default)",
        schedule=None,
        params=params,
        doc_md=_RESET_DOC,
        **_maintenance_args([config.connector_id]),
    ) as dag:
        ResetConnectorStateOperator(
            task_id="reset",
            connector_id=config.connector_id,
            application_name=src.application_name,
            stream_name=src.stream_name,
            destination=_destination_text(config),
            mode="{{ params.mode }}",
            new_application_name="{{ params.new_application_name or '' }}",
            initial_position="{{ params.initial_position }}",
            initial_timestamp="{{ params.initial_timestamp or '' }}",
            preview_only="{{ params.dry_run }}",
            confirm="{{ params.confirm }}",
            consumer_type=src.consumer_type.value,
            lease_wait_timeout_seconds="{{ params.lease_wait_timeout_seconds }}",
            backup_dir=backup_dir,
            database=config.destination.database,
            schema=config.destination.schema_,
            table=config.destination.table,
            snowflake_conn_id=conns.snowflake,
            aws_conn_id=conns.aws,
            region_name=src.region,
        )
    return dag


def build_restore_dag(config: ConnectorConfig, *, backup_dir: str | None = None) -> DAG:
    """One manually triggered task, ``restore``, that undoes a reset (see :class:`RestoreCheckpointsOperator`)."""
    src, conns = config.source, config.connections
    params = {
        "backup": Param(
            type="string",
            minLength=1,
            title="Backup",
            description="Path or URL of the checkpoint backup: the backup_location in the result (XCom) and log "
            "of the reset, restore or clean-up run that wrote it.",
        ),
        "dry_run": _dry_run_param(),
        "confirm": Param(
            "",
            type="string",
            title="Confirm",
            description="To act (dry run off), type the connector's current application name; a dry run reports it.",
        ),
        "lease_wait_timeout_seconds": _lease_wait_param(config),
    }
    with DAG(
        dag_id=restore_dag_id(config),
        description=f"Restore the checkpoints of connector {config.connector_id} from a backup (dry run by default)",
        schedule=None,
        params=params,
        doc_md=_RESTORE_DOC,
        **_maintenance_args([config.connector_id]),
    ) as dag:
        RestoreCheckpointsOperator(
            task_id="restore",
            connector_id=config.connector_id,
            application_name=src.application_name,
            stream_name=src.stream_name,
            destination=_destination_text(config),
            backup="{{ params.backup }}",
            preview_only="{{ params.dry_run }}",
            confirm="{{ params.confirm }}",
            lease_wait_timeout_seconds="{{ params.lease_wait_timeout_seconds }}",
            backup_dir=backup_dir,
            database=config.destination.database,
            schema=config.destination.schema_,
            table=config.destination.table,
            snowflake_conn_id=conns.snowflake,
            aws_conn_id=conns.aws,
            region_name=src.region,
        )
    return dag


def _destination_text(config: ConnectorConfig) -> str:
    """``DATABASE.SCHEMA.TABLE``, as backups and lease-table metadata record the destination."""
    d = config.destination
    return f"{d.database}.{d.schema_}.{d.table}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_") or "default"


def build_cleanup_dag(
    configs: Sequence[AnyConnectorConfig],
    *,
    dag_id: str = CLEANUP_DAG_ID,
    schedule: str | None = "@daily",
    backup_dir: str | None = None,
) -> DAG:
    """One clean-up task per AWS connection and region the Kinesis connectors use, and one per
    DynamoDB connector (its superseded generations' leases), on ``schedule``.

    Scheduled runs use the defaults of the form: a dry run that lists the candidates. Trigger it
    with ``dry_run`` off and ``confirm`` ``DELETE`` to delete them.
    """
    groups: dict[tuple[str, str], list[ConnectorConfig]] = {}
    for config in kinesis_connectors(configs):
        groups.setdefault((config.connections.aws, config.source.region), []).append(config)
    params = {
        "dry_run": _dry_run_param(),
        "confirm": Param(
            "",
            type="string",
            title="Confirm",
            description=f"To delete (dry run off), type {CONFIRMATION}.",
        ),
        "retention_days": Param(
            DEFAULT_RETENTION_SECONDS / 86400,
            type="number",
            minimum=0,
            title="Retention (days)",
            description="A lease table no connector uses is kept this long after its last checkpoint, heartbeat or "
            "supersession.",
        ),
        "application_name_patterns": Param(
            ["*"],
            type="array",
            items={"type": "string", "minLength": 1},
            minItems=1,
            title="Application names",
            description="Glob patterns of the application names clean-up may consider (e.g. orders-*); narrow them "
            "when other deployments share the AWS account and region.",
        ),
    }
    with DAG(
        dag_id=dag_id,
        description="Orphaned lease tables, migration copies and fan-out consumers of Kinesis connectors, and "
        "superseded generations' leases of DynamoDB connectors",
        schedule=schedule,
        params=params,
        doc_md=_CLEANUP_DOC,
        **_maintenance_args([]),
    ) as dag:
        for (aws_conn_id, region), members in sorted(groups.items()):
            CleanupOrphanedTablesOperator(
                task_id=f"cleanup_{_slug(aws_conn_id)}_{_slug(region)}",
                connectors=[
                    {
                        "connector_id": c.connector_id,
                        "application_name": c.source.application_name,
                        "stream_name": c.source.stream_name,
                        "consumer_type": c.source.consumer_type.value,
                    }
                    for c in members
                ],
                retention_days="{{ params.retention_days }}",
                application_name_patterns="{{ params.application_name_patterns | tojson }}",
                preview_only="{{ params.dry_run }}",
                confirm="{{ params.confirm }}",
                backup_dir=backup_dir,
                aws_conn_id=aws_conn_id,
                region_name=region,
                # The ledgers clean-up reads to tell a table in use are reached through this connection.
                snowflake_conn_id=min(c.connections.snowflake for c in members),
            )
        for ddb in sorted(dynamodb_connectors(configs), key=lambda c: c.connector_id):
            CleanupDynamoDBGenerationsOperator(
                task_id=f"cleanup_{_slug(ddb.connector_id)}_generations",
                connector_id=ddb.connector_id,
                application_name=ddb.source.application_name,
                database=ddb.destination.database,
                schema=ddb.destination.schema_,
                application_name_patterns="{{ params.application_name_patterns | tojson }}",
                preview_only="{{ params.dry_run }}",
                confirm="{{ params.confirm }}",
                backup_dir=backup_dir,
                aws_conn_id=ddb.connections.aws,
                region_name=ddb.source.region,
                snowflake_conn_id=ddb.connections.snowflake,
            )
    return dag


def sync_dag_id(config: DynamoDBConnectorConfig) -> str:
    return f"{dag_id_prefix(config)}_sync"


def _dynamodb_dag_args(config: DynamoDBConnectorConfig) -> dict[str, Any]:
    return {**_dag_args(config), "tags": ["dynamodb", "snowflake", config.connector_id]}


def _dynamodb_source(config: DynamoDBConnectorConfig) -> str:
    src = config.source
    if src.tables is not None:
        return f"DynamoDB tables {', '.join(src.tables)}"
    environment = f", {src.environment_tag_key}={src.environment_tag_value}" if src.environment_tag_key else ""
    return f"DynamoDB tables tagged {src.ingestion_tag_key}{environment}"


def _discover_tables(config: DynamoDBConnectorConfig) -> DiscoverDynamoDBTablesOperator:
    src = config.source
    return DiscoverDynamoDBTablesOperator(
        task_id="discover_tables",
        tables=src.tables,
        ingestion_tag_key=src.ingestion_tag_key,
        environment_tag_key=src.environment_tag_key,
        environment_tag_value=src.environment_tag_value,
        destination_table_template=src.destination_table_template,
        aws_conn_id=config.connections.aws,
        region_name=src.region,
    )


def build_dynamodb_sync_dag(config: DynamoDBConnectorConfig) -> DAG:
    """discover_tables >> sync_table (mapped: one task instance per table), on the connector's schedule.

    Each run discovers the tables first, so a table tagged (or given a stream) since the last run
    is synced from this run on; each table's task is labelled with the table's name.
    """
    dst, conns = config.destination, config.connections
    with DAG(
        dag_id=sync_dag_id(config),
        description=f"{_dynamodb_source(config)} -> Snowflake {dst.database}.{dst.schema_}",
        schedule=config.batch.schedule,
        max_active_runs=1,
        doc_md=_SYNC_DOC,
        **_dynamodb_dag_args(config),
    ) as dag:
        discover = _discover_tables(config)
        SyncDynamoDBTableOperator.partial(
            task_id="sync_table",
            sync_options=config.sync_options(),
            aws_conn_id=conns.aws,
            region_name=config.source.region,
            snowflake_conn_id=conns.snowflake,
            spark_conn_id=conns.spark if config.source.engine == "spark" else None,
            spark_conf=config.spark.spark_conf() or None,
            spark_submit=config.spark.submit_arguments(),
            spark_platform=config.spark.platform_arguments(),
            deferrable=config.spark.deferrable,
            max_runtime_minutes=config.batch.max_runtime_minutes,
            idle_seconds=config.batch.idle_seconds,
            cloudwatch_namespace=config.metrics.cloudwatch_namespace,
            cloudwatch_dimensions=list(config.metrics.dimensions),
            map_index_template=TABLE_MAP_INDEX,
            # Each table's Asset gets an event per batch that applied changes, as the ingest task's does.
            outlets=[AssetAlias(name=table_asset_alias(config.connector_id))],
        ).expand(target=discover.output)
    return dag


def build_dynamodb_provision_dag(config: DynamoDBConnectorConfig) -> DAG:
    """[check_iam_permissions] >> create_lease_table >> discover_tables >> provision_table (mapped: one per
    table); manual, idempotent. The IAM check runs in ``source.iam_check`` mode, not at all when ``off``."""
    dst, conns, src = config.destination, config.connections, config.source
    with DAG(
        dag_id=provision_dag_id(config),
        description=f"Provision {_dynamodb_source(config)} -> Snowflake {dst.database}.{dst.schema_}",
        schedule=None,
        max_active_runs=1,
        doc_md=_PROVISION_DYNAMODB_DOC,
        **_dynamodb_dag_args(config),
    ) as dag:
        steps: list[Any] = []
        if src.iam_check is not IamCheckMode.OFF:
            steps.append(
                CheckDynamoDBIamPermissionsOperator(
                    task_id="check_iam_permissions",
                    tables=src.tables,
                    application_name=src.application_name,
                    region_name=src.region,
                    aws_conn_id=conns.aws,
                    check_mode=src.iam_check.value,
                )
            )
        steps.append(
            CreateDynamoDBLeaseTableOperator(
                task_id="create_lease_table",
                application_name=config.source.application_name,
                aws_conn_id=conns.aws,
                region_name=config.source.region,
            )
        )
        discover = _discover_tables(config)
        steps.append(discover)
        steps.append(
            ProvisionDynamoDBTableOperator.partial(
                task_id="provision_table",
                sync_options=config.sync_options(),
                snowflake_conn_id=conns.snowflake,
                map_index_template=TABLE_MAP_INDEX,
            ).expand(target=discover.output)
        )
        _provision_steps(steps)
    return dag


def dynamodb_reset_dag_id(config: DynamoDBConnectorConfig) -> str:
    return f"{dag_id_prefix(config)}_reset"


def build_dynamodb_reset_dag(config: DynamoDBConnectorConfig) -> DAG:
    """discover_tables >> reset_tables, manually triggered, dry run by default
    (see :class:`ResetDynamoDBTablesOperator`)."""
    dst, src = config.destination, config.source
    params = {
        "tables": Param(
            [],
            type="array",
            items={"type": "string"},
            title="Tables",
            description="The DynamoDB tables to reset, among those the connector syncs now; empty: every one.",
        ),
        "dry_run": _dry_run_param(),
        "confirm": Param(
            "",
            type="string",
            title="Confirm",
            description=f"To act (dry run off), type the connector's application name, {src.application_name!r}.",
        ),
    }
    with DAG(
        dag_id=dynamodb_reset_dag_id(config),
        description=f"Re-snapshot {_dynamodb_source(config)} -> {dst.database}.{dst.schema_} (dry run first)",
        schedule=None,
        params=params,
        doc_md=_RESET_DYNAMODB_DOC,
        **{
            **_maintenance_args([config.connector_id]),
            "tags": ["dynamodb", "snowflake", "maintenance", config.connector_id],
        },
    ) as dag:
        discover = _discover_tables(config)
        ResetDynamoDBTablesOperator(
            task_id="reset_tables",
            targets=discover.output,
            sync_options=config.sync_options(),
            tables="{{ params.tables | tojson }}",
            preview_only="{{ params.dry_run }}",
            confirm="{{ params.confirm }}",
            snowflake_conn_id=config.connections.snowflake,
        )
    return dag


def kinesis_connector_dags(config: ConnectorConfig, *, backup_dir: str | None) -> tuple[DAG, ...]:
    """A Kinesis connector's provision, ingest, reset and restore DAGs (its registry part ``dags``)."""
    return (
        build_provision_dag(config),
        build_ingest_dag(config),
        build_reset_dag(config, backup_dir=backup_dir),
        build_restore_dag(config, backup_dir=backup_dir),
    )


def dynamodb_connector_dags(config: DynamoDBConnectorConfig, *, backup_dir: str | None) -> tuple[DAG, ...]:
    """A DynamoDB connector's provision, sync and reset DAGs (its registry part ``dags``)."""
    return (
        build_dynamodb_provision_dag(config),
        build_dynamodb_sync_dag(config),
        build_dynamodb_reset_dag(config),
    )


def _connector_dags(config: AnyConnectorConfig, *, backup_dir: str | None) -> dict[str, DAG]:
    build = source_of(config).part("dags")
    return {dag.dag_id: dag for dag in build(config, backup_dir=backup_dir)}


def build_connector_file_dags(path: str | Path, *, backup_dir: str | None = None) -> dict[str, DAG]:
    """The provision, ingest, reset and restore DAGs of one Kinesis connector file; the provision and
    sync DAGs of a DynamoDB one (``source.type: dynamodb``).

    Call it from a DAG file of that connector alone (``python -m airflow_kinesis_snowflake dag-file``
    writes one), so that a mistake in this connector file is an import error of that DAG file only.

    :param path: the connector YAML file.
    :param backup_dir: where reset and restore write checkpoint backups (see :func:`build_connector_dags`).
    :raises ConnectorConfigError: naming the file, each invalid field and what is allowed; also when
        a connector file of the same directory, earlier in name order, has the same ``connector_id``.
    """
    path = Path(path)
    config = load_any_connector_config(path)
    # Only the files before this one can take its id first; of them, only connector_id is read.
    earlier = [other for other in connector_files(path.parent) if other.name <= path.name]
    first = duplicate_connector_ids(earlier).get(path)
    if first is not None:
        raise duplicate_connector_id_error(path, config.connector_id, first)
    return _connector_dags(config, backup_dir=backup_dir)


def build_cleanup_dags(
    directory: str | Path,
    *,
    backup_dir: str | None = None,
    cleanup_dag_id: str = CLEANUP_DAG_ID,
    dag_folder: str | Path | None = None,
) -> dict[str, DAG]:
    """The clean-up DAG of a directory of connector files (none when it holds no connector file).

    :param directory: the directory of connector files.
    :param backup_dir: where clean-up writes checkpoint backups (see :func:`build_connector_dags`).
    :param cleanup_dag_id: the clean-up DAG's id; give each directory its own.
    :param dag_folder: the folder holding each connector file's DAG file (default: the parent of
        ``directory``, where ``python -m airflow_kinesis_snowflake dag-file`` writes them).
    :raises ConnectorConfigError: when any connector file of the directory is invalid, naming each:
        clean-up must know the application name of every connector, or it would take a lease
        table in use for an orphan; and when a connector file has no DAG file of its own in
        ``dag_folder`` (it would have no provision or ingest DAG), naming each with the command
        that writes it.
    """
    directory = Path(directory)
    folder = Path(dag_folder) if dag_folder is not None else directory.parent
    errors = dag_file_errors(directory, folder)
    try:
        configs = load_any_connector_configs(directory)
    except ConnectorConfigError as err:
        errors.insert(0, str(err))
        configs = []
    if errors:
        raise ConnectorConfigError(
            f"{cleanup_dag_id} is not built until every connector file in {directory} is valid and has its DAG file "
            f"in {folder}: clean-up must know every connector's application name, so as never to delete a lease "
            "table in use, and a connector file without its DAG file has no DAGs.\n" + "\n".join(errors)
        )
    if not configs:
        return {}
    cleanup = build_cleanup_dag(configs, dag_id=cleanup_dag_id, backup_dir=backup_dir)
    return {cleanup.dag_id: cleanup}


def build_connector_dags(
    directory: str | Path, *, backup_dir: str | None = None, cleanup_dag_id: str = CLEANUP_DAG_ID
) -> dict[str, DAG]:
    """Every DAG of every connector file in ``directory``, and one clean-up DAG for all of them.

    Everything comes from one Python file: when any connector file is invalid, this raises (naming
    each invalid file), Airflow marks every DAG of that Python file stale, and no connector's DAGs
    run until it is fixed. It needs no DAG file per connector, so it suits a folder with few
    connectors edited together; prefer a DAG file per connector (:func:`build_connector_file_dags`)
    and :func:`build_cleanup_dags`, where one bad connector file stops only its own DAGs.

    The two ways never share a DAG folder (the parent of ``directory``): both would define the
    same DAG ids from two files, and Airflow would take them from one file, then the other.

    :param backup_dir: where reset, restore and clean-up write checkpoint backups: a directory path
        or an ``ObjectStoragePath`` URL (default ``$AIRFLOW_HOME/kinesis_snowflake_backups``).
    :param cleanup_dag_id: the clean-up DAG's id; give each directory its own when a DAGs folder
        calls this for several.
    :raises ConnectorConfigError: when a connector file is invalid, or when a Python file of the
        DAG folder builds DAGs of one connector file (:func:`build_connector_file_dags`).
    """
    directory = Path(directory)
    per_connector = dag_files_calling(directory.parent, "build_connector_file_dags")
    if per_connector:
        raise ConnectorConfigError(
            f"build_connector_dags({str(directory)!r}) builds every connector's DAGs, but "
            f"{', '.join(str(p) for p in per_connector)} in the same DAG folder build DAGs of one connector file "
            "each: the same DAG ids would come from two files. Keep one way: replace this call with "
            f"build_cleanup_dags({str(directory)!r}) and write each connector's DAG file with "
            "`python -m airflow_kinesis_snowflake dag-file <connector file>`, or remove those files."
        )
    dags: dict[str, DAG] = {}
    every = load_any_connector_configs(directory)
    for config in every:
        dags.update(_connector_dags(config, backup_dir=backup_dir))
    if every:
        cleanup = build_cleanup_dag(every, dag_id=cleanup_dag_id, backup_dir=backup_dir)
        dags[cleanup.dag_id] = cleanup
    return dags


def dag_files_calling(dag_folder: str | Path, function: str) -> list[Path]:
    """The Python files at the top of ``dag_folder`` that call ``function`` (by its name), in name order."""
    found = []
    for path in sorted(Path(dag_folder).glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if re.search(rf"\b{re.escape(function)}\(", text):
            found.append(path)
    return found


def dag_file_command(connector_file: Path, dag_folder: Path) -> str:
    """The command that writes ``connector_file``'s DAG file into ``dag_folder``."""
    command = f"python -m airflow_kinesis_snowflake dag-file {connector_file}"
    if dag_folder.resolve() != connector_file.resolve().parent.parent:
        command += f" --dag-folder {dag_folder}"
    return command


def dag_file_collisions(directory: str | Path) -> dict[Path, Path]:
    """Each connector file whose DAG file name an earlier file (in name order) already takes, and that file.

    ``orders-eu.yaml`` and ``orders_eu.yaml``, or ``x.yaml`` and ``x.yml``, would share one DAG file.
    """
    first: dict[str, Path] = {}
    collisions: dict[Path, Path] = {}
    for path in connector_files(directory):
        name = _dag_file_name(path)
        if name in first:
            collisions[path] = first[name]
        else:
            first[name] = path
    return collisions


def dag_file_errors(directory: str | Path, dag_folder: str | Path) -> list[str]:
    """What keeps a connector file of ``directory`` from having a DAG file of its own in ``dag_folder``.

    A file named like the clean-up DAG file, two files sharing one DAG file name, and a file whose
    DAG file is missing (or is another file's): each with the file and what to do.
    """
    directory, dag_folder = Path(directory), Path(dag_folder)
    collisions = dag_file_collisions(directory)
    errors = []
    for path in connector_files(directory):
        try:
            name = dag_file_name(path, collisions=collisions)
        except ConnectorConfigError as err:
            errors.append(str(err))
            continue
        target = dag_folder / name
        try:
            own = target.is_file() and path.name in target.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            own = False
        if not own:
            errors.append(
                f"{path}: its DAG file {target} is missing, so the connector has no DAGs; write it with "
                f"`{dag_file_command(path, dag_folder)}`"
            )
    return errors


DAG_FILE_TEMPLATE = '''"""DAGs of the Kinesis -> Snowflake connector in {relative}.

One DAG file per connector file: a mistake in {name} is an import error of this file only, and
the other connectors' DAGs keep running. Written by
`python -m airflow_kinesis_snowflake dag-file`; see airflow_kinesis_snowflake.dags.
"""

from pathlib import Path

from airflow_kinesis_snowflake.dags import build_connector_file_dags

globals().update(build_connector_file_dags(Path(__file__).parent{parts}))
'''


CLEANUP_DAG_FILE = "kinesis_snowflake_connectors.py"


def _dag_file_name(connector_file: Path) -> str:
    return f"kinesis_snowflake_{_slug(connector_file.stem)}.py"


def dag_file_name(connector_file: str | Path, *, collisions: dict[Path, Path] | None = None) -> str:
    """The name of a connector file's DAG file: ``kinesis_snowflake_<file stem>.py``.

    :param connector_file: the connector YAML file.
    :param collisions: :func:`dag_file_collisions` of its directory, when already known.
    :raises ConnectorConfigError: when the name is the clean-up DAG file's
        (``kinesis_snowflake_connectors.py``), or when an earlier connector file of the same
        directory has the same DAG file name; the message names both files.
    """
    path = Path(connector_file)
    name = _dag_file_name(path)
    if name == CLEANUP_DAG_FILE:
        raise ConnectorConfigError(
            f"{path}: a connector file cannot be named {path.name}: its DAG file would be {CLEANUP_DAG_FILE}, "
            "the directory's clean-up DAG file; rename the connector file (e.g. to <connector_id>.yaml)"
        )
    if collisions is None:
        collisions = dag_file_collisions(path.parent)
    first = collisions.get(path)
    if first is not None:
        raise ConnectorConfigError(
            f"{path}: its DAG file would be {name}, which is already the DAG file of {first} (file names that "
            "differ only in '-', '_', other punctuation or .yaml/.yml share one); rename one of the two files"
        )
    return name


def render_dag_file(connector_file: str | Path, dag_folder: str | Path) -> str:
    """The source of the DAG file, in ``dag_folder``, that builds the DAGs of ``connector_file``.

    :raises ValueError: if ``connector_file`` is not inside ``dag_folder``.
    """
    connector_file, dag_folder = Path(connector_file).resolve(), Path(dag_folder).resolve()
    relative = connector_file.relative_to(dag_folder)
    parts = "".join(f" / {json.dumps(part)}" for part in relative.parts)
    return DAG_FILE_TEMPLATE.format(relative=relative.as_posix(), name=relative.name, parts=parts)


_PROVISION_DOC = f"""
Creates what the connector needs before its first batch; every step is idempotent, so running it again
changes nothing that is in place. `check_iam_permissions` (unless `source.iam_check` is `off`) asks IAM's
SimulatePrincipalPolicy whether the connection's principal has every permission the connector needs, and
fails naming each missing one and the policy to attach. `migrate_legacy_checkpoints` (with
`source.migrate_legacy_checkpoints`) turns a KCL lease table under the application name into this
provider's. `create_lease_table` creates the DynamoDB lease table named after the application name,
`register_fan_out_consumer` (with `ENHANCED_FAN_OUT`) the stream consumer of the same name.
`provision_snowflake` creates the Snowflake table, the ledger, the parse-failure table and the stage, and
the role, SERVICE user and grants the connector file's `snowflake` section names; `verify_snowflake`
checks them. Trigger it once before unpausing the `_ingest` DAG.
See [Install]({docs_url("install", "4-unpause-provision-ingest")}) and
[the IAM permission check]({docs_url("operations", "the-iam-permission-check")}).
"""

_INGEST_DOC = f"""
Loads the connector's Kinesis stream into its Snowflake table in micro-batches, exactly once, on
`batch.schedule` (`on_new_records`: a run starts when records arrive), one run at a time.
`wait_for_records` (when `batch.wait_for_records` is on, by default for shared-throughput connectors in
scheduled mode) ends a run skipped, without starting Spark, when no shard holds records beyond its
checkpoint that arrived before the run started. `create_lease_table` finds the lease table in place.
`ingest` takes the shard leases, plans one range per shard from its checkpoint up to the run's start, and
runs the Spark job with spark-submit through the Spark connection: the rows, the parse failures and the
ledger commit in one Snowflake transaction, then the checkpoints move, so a retry loads nothing twice.
In continuous mode (`batch.mode: continuous`) one Spark application loads micro-batches back to back for
`batch.max_runtime_minutes`. Run the `_provision` DAG first.
See [the ingest operator]({docs_url("operators", "sparkkinesisingestoperator")}) and
[scheduled and continuous mode]({docs_url("modes")}).
"""

_RESET_DOC = f"""
Resets where this connector reads its Kinesis stream, as Snowflake's Openflow connector does by changing
its application name or deleting its lease table. **A reset can load records twice or skip them**, and
the exactly-once ledger does not prevent it: its marks belong to the old application name and generation.

1. Trigger with *Dry run* ticked: the log shows, per shard, the checkpoint, the new start and about how
   many records would be read again or skipped, and the current application name.
2. Trigger again with *Dry run* off and *Confirm* set to that name. Ingest runs skip while it works;
   every checkpoint is backed up first (the task's result has the backup location).
3. To undo, give that backup location to the connector's `_restore` DAG.

See [Reset]({docs_url("operations", "reset")}).
"""

_RESTORE_DOC = f"""
Puts back every checkpoint of a backup written by a reset, a restore or clean-up, and makes its lease
table the connector's active one again (undo of a reset). Dry run first; then *Confirm* with the current
application name. The current state is backed up before it is replaced. A backup of another connector,
stream or destination is refused before anything is written.
See [Undo: restore a backup]({docs_url("operations", "undo-restore-a-backup")}).
"""

_SYNC_DOC = f"""
Syncs DynamoDB tables into Snowflake, one Snowflake table per DynamoDB table, converging to each table's
current items. Each run first discovers the tables (`discover_tables`: the tables named, or those carrying
the tags; each table that cannot be synced is logged with the reason and the fix), then runs one
`sync_table` task per table, labelled with the table's name: a snapshot when one is due (the first run, or
after a gap in the stream), and the table's stream up to the run's start. Each batch runs on Spark through
the Spark connection (one Spark task per snapshot segment and per stream shard, with the connector file's
`spark` settings), or in the Airflow worker with `source.engine: worker`. Run the `_provision` DAG first.
See [DynamoDB tables: DAGs]({docs_url("dynamodb", "dags")}).
"""

_PROVISION_DYNAMODB_DOC = f"""
Checks first (unless `source.iam_check` is `off`) that the connection's principal has every permission the
connector needs (IAM's SimulatePrincipalPolicy; a missing one fails, naming it and the policy to attach).
Then creates the connector's lease table, then, for each table discovery finds now, its Snowflake table and the
support objects (ledgers, stage, tombstones) in the connector's database and schema, which must exist.
Idempotent: run it again after tagging new tables. See [DynamoDB tables: DAGs]({docs_url("dynamodb", "dags")}).
"""

_RESET_DYNAMODB_DOC = f"""
Resets DynamoDB tables' syncs: each table chosen (*Tables*, empty for every table the connector syncs now)
gets a new sync generation, and its next sync run takes a new snapshot, resumable per segment like the
first. Nothing is truncated or deleted: the rows stay queryable until the new snapshot overwrites them,
and rows not seen by the new snapshot are removed (or marked, with `deletes: soft`) when it completes.
A table not synced yet has nothing to reset. A sync batch in flight during the reset is refused and
decides again in the new generation. Dry run first (it records nothing); then untick *Dry run* and
*Confirm* with the connector's application name. See [DynamoDB tables: Reset]({docs_url("dynamodb", "reset")}).
"""

_CLEANUP_DOC = f"""
Lists lease tables, `<application>_migration` copies and enhanced fan-out consumers that no connector
uses any more, each with the rule that matched. Scheduled runs only report. To delete, trigger with
*Dry run* off and *Confirm* `DELETE`; lease tables are backed up first. Never touched: untagged tables,
tables with a live lease, the active and configured application of any connector, unfinished migrations,
and tables a connector of any DAG folder used within the retention (never shorter than the stream's):
their checkpoints, ingest runs and ledger commits say so. A table whose stream or ledger cannot be read is
kept. For each DynamoDB connector, the leases of generations older than the newest one its generations table
records (after a gap or a reset) are removed, never a lease held now.
See [Clean-up]({docs_url("operations", "clean-up")}).
"""
