"""Wait for records a connector has not loaded yet."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.providers.common.compat.sdk import conf
from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from airflow_kinesis_snowflake.compat import AirflowSensorTimeout, AirflowSkipException
from airflow_kinesis_snowflake.core.freshness import Freshness
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook
from airflow_kinesis_snowflake.triggers.kinesis import KinesisNewRecordsTrigger


class KinesisNewRecordsSensor(BaseSensorOperator):
    """Wait until any shard of a connector has records beyond its checkpoint.

    Each check is one ``GetShardIterator`` and one ``GetRecords`` (``Limit=1``) per unfinished shard
    lease, stopping at the first shard with a record; the lease table is read, never written,
    through the active application name as a batch resolves it. A lease table that does not exist
    yet counts as new records (the first ingest run creates it), and so does anything only a batch
    can sort out (:mod:`airflow_kinesis_snowflake.core.freshness`).

    With ``deferrable`` the first check runs in the worker and the waiting in the triggerer
    (:class:`~airflow_kinesis_snowflake.triggers.kinesis.KinesisNewRecordsTrigger`). With
    ``soft_fail`` a wait that ends with nothing new ends skipped, and so do the tasks after it.

    The result (XCom) is the check's answer: ``new``, ``reason``, ``application_name``, ``shard_id``.

    :param stream_name: the Kinesis data stream.
    :param application_name: the connector's configured application name.
    :param only_before_run_start: count only records that arrived at or before the DAG run started,
        as an ingest batch does (its cut-off is the run's start); when none did, waiting cannot
        change that, so the sensor ends at once (skipped with ``soft_fail``).
    :param aws_conn_id: the AWS connection for Kinesis and DynamoDB.
    :param region_name: AWS region; defaults to the connection's.
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    """

    template_fields: Sequence[str] = ("stream_name", "application_name", "aws_conn_id", "region_name")
    ui_color = "#c7e9ff"

    def __init__(
        self,
        *,
        stream_name: str,
        application_name: str,
        only_before_run_start: bool = False,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stream_name = stream_name
        self.application_name = application_name
        self.only_before_run_start = only_before_run_start
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.deferrable = deferrable

    def _cutoff(self, context: Context) -> datetime | None:
        if not self.only_before_run_start:
            return None
        started = getattr(context.get("dag_run"), "start_date", None)
        if not isinstance(started, datetime):
            return datetime.now(UTC)
        return started if started.tzinfo else started.replace(tzinfo=UTC)

    def check(self, context: Context) -> Freshness:
        """One check, in this process."""
        kinesis = KinesisStreamHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        dynamodb = LeaseTableHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).conn
        return kinesis.check_new_records(
            self.stream_name, self.application_name, dynamodb=dynamodb, arrived_before=self._cutoff(context)
        )

    def poke(self, context: Context) -> PokeReturnValue:
        answer = self.check(context)
        self.log.info("%s: %s", "New records" if answer.new else "Nothing new", answer.describe())
        if not answer.new and self.only_before_run_start:
            # Records that arrive from now on arrived after the run's start: no wait can change the answer.
            message = (
                f"no record of {self.stream_name} beyond the checkpoints of {answer.application_name} arrived "
                "before this run started; the next run loads what arrives from now on"
            )
            raise AirflowSkipException(message) if self.soft_fail else AirflowSensorTimeout(message)
        return PokeReturnValue(answer.new, answer.to_dict())

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value
        self.defer(
            trigger=KinesisNewRecordsTrigger(
                stream_name=self.stream_name,
                application_name=self.application_name,
                aws_conn_id=self.aws_conn_id,
                region_name=self.region_name,
                poke_interval=self.poke_interval,
                timeout=self.timeout,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") == "success":
            self.log.info("New records in shard %s of %s", event.get("shard_id"), event.get("application_name"))
            return event
        message = (
            f"no record of {self.stream_name} beyond the checkpoints of {event.get('application_name')} "
            f"within {self.timeout:.0f}s"
        )
        if self.soft_fail:
            raise AirflowSkipException(message)
        raise AirflowSensorTimeout(message)
