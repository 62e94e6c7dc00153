"""What every task that runs a source's Spark job shares: its Spark settings, the job's hook on its
platform, where its metrics go besides Airflow's, and ``on_kill``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_kinesis_snowflake.config import SPARK_SUBMIT_ARGUMENTS, check_spark_conf
from airflow_kinesis_snowflake.core.metrics import check_dimensions, check_namespace
from airflow_kinesis_snowflake.hooks.cloudwatch import cloudwatch_publisher
from airflow_kinesis_snowflake.hooks.platforms import job_submit_hook
from airflow_kinesis_snowflake.hooks.spark import KinesisJobSubmitHook
from airflow_kinesis_snowflake.metrics import Publish


class SparkJobMixin:
    """Mixed into an operator, first among its bases; its ``__init__`` calls :meth:`init_spark_job`.

    The operator documents the parameters (``spark_conn_id``, ``spark_conf``, ``spark_submit``,
    ``spark_platform``, ``cloudwatch_namespace``, ``cloudwatch_dimensions``) and has ``task_id``,
    ``aws_conn_id`` and ``region_name``.
    """

    task_id: str
    aws_conn_id: str | None
    region_name: str | None

    def init_spark_job(
        self,
        *,
        spark_conn_id: str | None,
        spark_conf: dict[str, Any] | None,
        spark_submit: dict[str, Any] | None,
        spark_platform: dict[str, Any] | None,
        cloudwatch_namespace: str | None,
        cloudwatch_dimensions: Sequence[str] | None,
    ) -> None:
        """Check and keep the task's Spark and metrics settings (nothing is connected here)."""
        if unknown := sorted(set(spark_submit or ()) - set(SPARK_SUBMIT_ARGUMENTS)):
            raise ValueError(f"spark_submit: {', '.join(unknown)} not among {', '.join(SPARK_SUBMIT_ARGUMENTS)}")
        self.spark_conn_id, self.spark_conf = spark_conn_id, spark_conf
        self.spark_submit = dict(spark_submit or {})
        self.spark_platform = dict(spark_platform) if spark_platform else None
        if cloudwatch_namespace is not None:
            check_namespace(cloudwatch_namespace)
        self.cloudwatch_namespace = cloudwatch_namespace
        self.cloudwatch_dimensions = None if cloudwatch_dimensions is None else check_dimensions(cloudwatch_dimensions)
        self._spark_hook: KinesisJobSubmitHook | None = None

    def build_spark_hook(self) -> KinesisJobSubmitHook:
        """The job's hook of the Spark connection, with this task's Spark settings, on its platform;
        kept for :meth:`on_kill`."""
        assert self.spark_conn_id is not None
        check_spark_conf(self.spark_conf or {}, f"spark_conf of task {self.task_id!r}")  # rendered, so here
        self._spark_hook = job_submit_hook(
            conn_id=self.spark_conn_id,
            conf=self.spark_conf,
            spark_submit=self.spark_submit,
            spark_platform=self.spark_platform,
            aws_conn_id=self.aws_conn_id,
            region_name=self.region_name,
        )
        return self._spark_hook

    def publisher(self) -> Publish | None:
        """Where the metrics go besides Airflow's (CloudWatch, with ``metrics.cloudwatch``)."""
        return cloudwatch_publisher(
            self.cloudwatch_namespace,
            self.cloudwatch_dimensions,
            aws_conn_id=self.aws_conn_id,
            region_name=self.region_name,
        )

    def on_kill(self) -> None:
        """Stop the job: kill spark-submit, or cancel the platform's job run."""
        if self._spark_hook is not None:
            self._spark_hook.on_kill()
