"""OpenLineage for the ingest and sync operators: the Kinesis stream (or DynamoDB table) in, the Snowflake table out.

The ingest operator imports this module only when a batch is reported or its lineage asked for,
and it imports OpenLineage only inside its functions: without the ``openlineage`` extra nothing of
OpenLineage is ever loaded. It also names the destination table's Airflow Asset the same way.

Dataset names follow https://openlineage.io/docs/spec/naming:

- the table: ``snowflake://{account identifier}`` and ``{DATABASE}.{SCHEMA}.{TABLE}``, the account
  identifier normalised as the Snowflake provider does it, so the table is the same dataset whichever
  operator reads or writes it;
- the stream: the spec lists no Kinesis convention, so it follows its AWS Glue one (an ARN split
  after the account): ``arn:{partition}:kinesis:{region}:{account id}`` and ``stream/{stream name}``,
  which together are the stream's ARN. A stream name is unique only within an account and region,
  hence both. The account id comes from STS ``GetCallerIdentity`` (allowed to every principal, no
  permission to grant); when it cannot be had the stream is left out and a warning says why;
- a DynamoDB table, the same way: its ARN (which discovery read) split after the account,
  ``arn:{partition}:dynamodb:{region}:{account id}`` and ``table/{table name}``.

A DynamoDB connector's sync task reports each committed batch as the ingest task does
(:func:`report_table_batches`): the same metrics, and an event of the destination table's Asset.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from botocore.config import Config

from airflow_kinesis_snowflake.core.batch import BatchOutcome
from airflow_kinesis_snowflake.core.load.dynamodb_failures import FAILURES_SUFFIX
from airflow_kinesis_snowflake.core.load.snowflake_sink import PARSE_FAILURES_SUFFIX
from airflow_kinesis_snowflake.core.model import BatchResult, Destination

if TYPE_CHECKING:
    from collections.abc import Callable

    from airflow.providers.common.compat.openlineage.facet import InputDataset, OutputDataset
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Asset

    from airflow_kinesis_snowflake.core.dynamodb_job import TableBatchResult
    from airflow_kinesis_snowflake.core.dynamodb_sync import TableBatchFigures, TableSync
    from airflow_kinesis_snowflake.metrics import Publish

log = logging.getLogger(__name__)

# Lineage is gathered after the batch is committed: a slow or unreachable STS must not hold the task up,
# and the OpenLineage listener waits only ``[openlineage] execution_timeout`` (10 s by default).
STS_CONFIG = Config(connect_timeout=2, read_timeout=2, retries={"mode": "standard", "max_attempts": 2})


def kinesis_stream_naming(partition: str, region: str, account_id: str, stream_name: str) -> tuple[str, str]:
    """Namespace and name of a Kinesis data stream: the stream ARN split after the account id."""
    return f"arn:{partition}:kinesis:{region}:{account_id}", f"stream/{stream_name}"


def snowflake_namespace(account: str, region: str | None = None) -> str:
    """``snowflake://{account identifier}`` as the Snowflake provider derives it from a connection.

    The provider reads the identifier from the SQLAlchemy URI's host (``account`` or
    ``account.region``, lower-cased) and normalises legacy locators to ``locator.region.cloud``.
    Built here from the account itself, so that a ``host`` extra (PrivateLink, an emulator) does not
    stand in for the account.
    """
    from airflow.providers.snowflake.utils.openlineage import fix_account_name

    host = f"{account}.{region}" if region else account
    return f"snowflake://{fix_account_name(host.lower())}"


def table_asset(account: str, destination: Destination, region: str | None = None) -> Asset:
    """The destination table's Asset, ``snowflake://<account identifier>/<db>/<schema>/<table>``.

    The account identifier is normalised as the Snowflake provider's OpenLineage names it (lower
    case, a legacy locator as ``locator.region.cloud``), so the Asset and the lineage's output
    dataset name one table the same way.
    """
    from airflow.providers.snowflake.assets.snowflake import create_asset

    return create_asset(
        account=snowflake_namespace(account, region).removeprefix("snowflake://"),
        database=destination.database,
        schema=destination.schema,
        table=destination.table,
    )


def batch_asset_event(
    account: str,
    region: str | None,
    destination: Destination,
    result: BatchResult,
    stream_name: str,
    application_name: str,
) -> tuple[Asset, dict[str, Any]]:
    """The destination table's Asset and the extra of the event a loaded batch adds to it.

    :param application_name: the application name the batch read with.
    """
    extra = {
        "batch_id": result.batch_id,
        "rows_loaded": result.rows_loaded,
        "dead_letters": result.dead_letters_loaded,
        "stream_name": stream_name,
        "application_name": application_name,
    }
    return table_asset(account, destination, region), extra


def add_batch_asset_events(
    outlet_events: Any,
    aliases: list[Any],
    account_and_region: tuple[str | None, str | None],
    destination: Destination,
    outcome: BatchOutcome,
    stream_name: str,
) -> None:
    """Add the event of a batch that loaded rows to the destination table's Asset, through each alias.

    :param outlet_events: the task context's ``outlet_events``.
    :param aliases: the task's ``AssetAlias`` outlets.
    :param account_and_region: the Snowflake connection's account and region; no event without an account.
    """
    assert outcome.result is not None
    table = destination.qualified_name
    account, region = account_and_region
    if not account:
        log.warning("The Snowflake connection names no account: no Asset event for %s", table)
        return
    asset, extra = batch_asset_event(
        account, region, destination, outcome.result, stream_name, outcome.application_name
    )
    for alias in aliases:
        outlet_events[alias].add(asset, extra=extra)
    log.info("Asset event for %s: %s", asset.uri, extra)


def report_run(
    operator: Any,
    context: Any,
    outcome: BatchOutcome,
    destination: Destination,
    snowflake: Any,
    kinesis: Any,
    publish: Publish | None,
    *,
    metrics: bool = True,
) -> dict[str, Any]:
    """What the ingest ``operator`` reports of its run: each committed batch (:func:`report_batch`; several
    when a reshard made the run plan again), then every shard's lag and checkpoint age (logged, measured,
    returned: ``docs/lag.md``). A failure to report a batch is logged: it is committed. The batch loaded
    is kept on the operator for its lineage (:func:`ingest_lineage`).

    :param kinesis: the Kinesis hook the lag is read with.
    :returns: the run's summary (the task's XCom), with its ``lag``.
    """
    from airflow_kinesis_snowflake.status import report_lag

    operator._last_summary = outcome if outcome.result is not None else None  # the batch loaded, for the lineage
    summary = outcome.summary()
    for batch in outcome.batches:
        try:
            report_batch(operator, context, batch, destination, snowflake, publish, metrics=metrics)
        except Exception:  # the batch is committed: reporting it must not fail the task
            operator.log.warning("Could not report batch %s", batch.summary().get("batch_id"), exc_info=True)
    if outcome.result is not None:
        table = destination.qualified_name
        summary["lag"] = report_lag(outcome, kinesis, operator.stream_name, table, operator.log, publish)
    return summary


def report_batch(
    operator: Any,
    context: Any,
    outcome: BatchOutcome,
    destination: Destination,
    snowflake: Any,
    publish: Publish | None = None,
    *,
    metrics: bool = True,
) -> None:
    """What the ingest ``operator`` reports of a committed batch: its metrics (:func:`emit_ingest_metrics`),
    and an event of the table's Asset, through each ``AssetAlias`` outlet of the task, when rows landed in it.

    :param snowflake: the Snowflake hook (its ``account_and_region``), asked only for an event.
    :param publish: where the metrics go besides Airflow's (CloudWatch, ``metrics.cloudwatch``).
    :param metrics: False when they went out as the batch committed (continuous mode).
    """
    from airflow.sdk import AssetAlias

    assert outcome.result is not None
    if metrics:
        emit_ingest_metrics(operator, outcome, destination, publish)
    aliases = [outlet for outlet in operator.outlets if isinstance(outlet, AssetAlias)]
    if aliases and outcome.result.rows_loaded:
        where = snowflake.account_and_region()
        add_batch_asset_events(context["outlet_events"], aliases, where, destination, outcome, operator.stream_name)


def emit_ingest_metrics(
    operator: Any, outcome: BatchOutcome, destination: Destination, publish: Publish | None
) -> None:
    """The metrics of one committed batch of the ingest ``operator`` (``docs/operations.md``, "Metrics")."""
    from airflow_kinesis_snowflake.metrics import BatchFigures, emit_batch_metrics

    assert outcome.result is not None
    emit_batch_metrics(
        BatchFigures.from_result(outcome.result),
        application_name=outcome.application_name,
        source_name=operator.stream_name,
        table=destination.qualified_name,
        publish=publish,
    )


def table_name(database: str, schema: str, table: str) -> str:
    # The operator loads into the upper-cased names (Snowflake's unquoted identifiers).
    return f"{database.upper()}.{schema.upper()}.{table.upper()}"


def _stream_dataset(operator: Any) -> InputDataset | None:
    import botocore.session
    from airflow.providers.common.compat.openlineage.facet import InputDataset

    from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook

    try:
        hook = KinesisStreamHook(aws_conn_id=operator.aws_conn_id, region_name=operator.region_name, config=STS_CONFIG)
        # As boto3 resolves it when neither the operator nor the connection names a region.
        region = hook.region_name or botocore.session.get_session().get_config_variable("region")
        if not region:
            log.warning("No AWS region for stream %s: it is left out of the lineage", operator.stream_name)
            return None
        account_id = hook.account_id
    except Exception as err:  # noqa: BLE001 - lineage must not fail a task whose batch is committed
        log.warning(
            "Could not get the AWS account id of stream %s from STS (%s): it is left out of the lineage",
            operator.stream_name,
            err,
        )
        return None
    try:
        partition = botocore.session.get_session().get_partition_for_region(region)
    except Exception:  # noqa: BLE001 - a region botocore does not know yet (or an emulator's)
        partition = "aws"
    namespace, name = kinesis_stream_naming(partition, region, account_id, operator.stream_name)
    return InputDataset(namespace=namespace, name=name)


def _table_datasets(operator: Any) -> list[OutputDataset]:
    from airflow.providers.common.compat.openlineage.facet import (
        OutputDataset,
        OutputStatisticsOutputDatasetFacet,
    )

    table = table_name(operator.database, operator.schema, operator.table)
    namespace = _snowflake_namespace_of(operator.snowflake_conn_id, table)
    if namespace is None:
        return []

    # The figures of the batch this run loaded; none when it read nothing or failed early.
    outcome = getattr(operator, "_last_summary", None)
    result = outcome.result if isinstance(outcome, BatchOutcome) else None
    rows = result.rows_loaded if result is not None else None
    dead_letters = result.dead_letters_loaded if result is not None else None

    outputs = [
        OutputDataset(
            namespace=namespace,
            name=table,
            outputFacets=(
                {"outputStatistics": OutputStatisticsOutputDatasetFacet(rowCount=int(rows))} if rows is not None else {}
            ),
        )
    ]
    if dead_letters:
        # Records that failed to parse went to the table's parse-failure table.
        outputs.append(
            OutputDataset(
                namespace=namespace,
                name=table + PARSE_FAILURES_SUFFIX,
                outputFacets={"outputStatistics": OutputStatisticsOutputDatasetFacet(rowCount=int(dead_letters))},
            )
        )
    return outputs


def ingest_lineage(operator: Any, task_instance: Any) -> OperatorLineage:
    """Lineage of one run of :class:`~airflow_kinesis_snowflake.operators.ingest.SparkKinesisIngestOperator`.

    :param operator: the operator after ``execute``; read are ``stream_name``, ``region_name``,
        ``aws_conn_id``, ``database``, ``schema``, ``table``, ``snowflake_conn_id`` and the batch
        run's :class:`~airflow_kinesis_snowflake.core.batch.BatchOutcome` ``_last_summary`` (the rows
        and dead letters its batch loaded), if any.
    :param task_instance: unused; part of the OpenLineage method's signature.
    """
    from airflow.providers.openlineage.extractors import OperatorLineage

    stream = _stream_dataset(operator)
    return OperatorLineage(inputs=[stream] if stream is not None else [], outputs=_table_datasets(operator))


# -- DynamoDB connectors ---------------------------------------------------------------------------------------


def dynamodb_table_naming(table_arn: str) -> tuple[str, str]:
    """Namespace and name of a DynamoDB table: its ARN split after the account id."""
    prefix, _, name = table_arn.partition(":table/")
    if not name:
        raise ValueError(f"not a DynamoDB table ARN: {table_arn!r}")
    return prefix, f"table/{name}"


def report_table_batches(
    operator: Any,
    context: Any,
    batches: list[TableBatchFigures],
    *,
    application_name: str,
    source_table: str,
    destination: Destination,
    snowflake: Any,
    publish: Publish | None = None,
    metrics: bool = True,
) -> None:
    """What the sync ``operator`` reports of its committed batches: each one's metrics (the ingest's names),
    and an event of the destination table's Asset, through each ``AssetAlias`` outlet, for a batch that
    applied changes. A failure to report is logged: the batches are committed.

    :param publish: where the metrics go besides Airflow's (CloudWatch, ``metrics.cloudwatch``).
    :param metrics: False when they went out as each batch committed (continuous mode).
    """
    from airflow.sdk import AssetAlias

    table = destination.qualified_name
    aliases = [outlet for outlet in operator.outlets if isinstance(outlet, AssetAlias)]
    where: tuple[str | None, str | None] | None = None
    for batch in batches:
        try:
            if metrics:
                emit_table_metrics(batch, application_name, source_table, destination, publish)
            if not (aliases and batch.merge.changes_loaded):
                continue
            where = where or snowflake.account_and_region()
            account, region = where
            if not account:
                log.warning("The Snowflake connection names no account: no Asset event for %s", table)
                continue
            asset = table_asset(account, destination, region)
            extra = {
                "batch_id": batch.batch_id,
                "rows_loaded": batch.merge.changes_loaded,
                "dead_letters": batch.merge.items_set_aside,
                "table_name": source_table,
                "application_name": application_name,
            }
            for alias in aliases:
                context["outlet_events"][alias].add(asset, extra=extra)
            log.info("Asset event for %s: %s", asset.uri, extra)
        except Exception:
            log.warning("Could not report batch %s", batch.batch_id, exc_info=True)


def report_table_run(
    operator: Any,
    context: Any,
    sync: TableSync,
    snowflake: Any,
    figures: dict[str, Any],
    batches: list[TableBatchFigures],
    publish: Publish | None,
    *,
    continuous: bool = False,
) -> dict[str, Any]:
    """What the sync ``operator`` reports of its run: its figures, logged; each committed batch
    (:func:`report_table_batches`); and the destination and batches its lineage reads, kept on it.

    :param figures: the run's figures (:meth:`~.core.dynamodb_sync.TableOutcome.summary`).
    :param continuous: the batches' metrics went out as each committed (:func:`table_metrics_on_commit`).
    :returns: ``figures`` (the task's XCom).
    """
    from airflow_kinesis_snowflake.core.dynamodb_sync import describe_summary

    operator.log.info("%s", describe_summary(figures))
    operator._destination, operator._batches = sync.target.destination, batches
    report_table_batches(
        operator,
        context,
        batches,
        application_name=sync.application_name,
        source_table=sync.table,
        destination=sync.target.destination,
        snowflake=snowflake,
        publish=publish,
        metrics=not continuous,
    )
    return figures


def table_metrics_on_commit(sync: TableSync, publish: Publish | None) -> Callable[[TableBatchResult], None]:
    """What a continuous sync does as each of its batches commits: emit its metrics
    (:func:`emit_table_metrics`), not when the application ends."""
    from airflow_kinesis_snowflake.core.dynamodb_sync import TableBatchFigures

    def committed(result: TableBatchResult) -> None:
        if (batch := TableBatchFigures.of_result(result)) is not None:
            emit_table_metrics(batch, sync.application_name, sync.table, sync.target.destination, publish)

    return committed


def emit_table_metrics(
    batch: TableBatchFigures,
    application_name: str,
    source_table: str,
    destination: Destination,
    publish: Publish | None,
) -> None:
    """The metrics of one committed batch of a DynamoDB table, under the ingest's names (``docs/operations.md``)."""
    from airflow_kinesis_snowflake.metrics import BatchFigures, emit_batch_metrics

    emit_batch_metrics(
        BatchFigures.from_table_batch(batch),
        application_name=application_name,
        source_name=source_table,
        source_type="dynamodb",
        table=destination.qualified_name,
        publish=publish,
    )


def sync_lineage(operator: Any, task_instance: Any) -> OperatorLineage:
    """Lineage of one run of :class:`~airflow_kinesis_snowflake.operators.dynamodb.SyncDynamoDBTableOperator`:
    the DynamoDB table in, the Snowflake table (and its failures table, when changes were set aside) out.

    :param operator: the operator after ``execute``: its ``target`` (the table's ARN), its destination
        (``_destination``), ``snowflake_conn_id`` and the figures of the batches it committed (``_batches``).
    :param task_instance: unused; part of the OpenLineage method's signature.
    """
    from airflow.providers.common.compat.openlineage.facet import (
        InputDataset,
        OutputDataset,
        OutputStatisticsOutputDatasetFacet,
    )
    from airflow.providers.openlineage.extractors import OperatorLineage

    namespace_of_table, name = dynamodb_table_naming(str(operator.target["arn"]))
    inputs = [InputDataset(namespace=namespace_of_table, name=name)]
    destination: Destination | None = getattr(operator, "_destination", None)
    if destination is None:
        return OperatorLineage(inputs=inputs, outputs=[])
    namespace = _snowflake_namespace_of(operator.snowflake_conn_id, destination.qualified_name)
    if namespace is None:
        return OperatorLineage(inputs=inputs, outputs=[])
    batches = getattr(operator, "_batches", [])
    changes = sum(b.merge.changes_loaded for b in batches)
    set_aside = sum(b.merge.items_set_aside for b in batches)
    outputs = [
        OutputDataset(
            namespace=namespace,
            name=destination.qualified_name,
            outputFacets={"outputStatistics": OutputStatisticsOutputDatasetFacet(rowCount=changes)},
        )
    ]
    if set_aside:
        outputs.append(
            OutputDataset(
                namespace=namespace,
                name=destination.qualified_name + FAILURES_SUFFIX,
                outputFacets={"outputStatistics": OutputStatisticsOutputDatasetFacet(rowCount=set_aside)},
            )
        )
    return OperatorLineage(inputs=inputs, outputs=outputs)


def _snowflake_namespace_of(conn_id: str, what: str) -> str | None:
    """The namespace of the Snowflake connection's account; None, with a warning naming ``what`` is left
    out of the lineage, when the connection cannot be read or names no account."""
    from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook

    try:
        account, region = KinesisSnowflakeHook(snowflake_conn_id=conn_id).account_and_region()
    except Exception as err:  # noqa: BLE001 - lineage must not fail a task whose batches are committed
        log.warning("Could not read Snowflake connection %s (%s): %s is left out of the lineage", conn_id, err, what)
        return None
    if not account:
        log.warning("Snowflake connection %s names no account: %s is left out of the lineage", conn_id, what)
        return None
    return snowflake_namespace(str(account), region)
