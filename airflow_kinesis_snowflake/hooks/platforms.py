"""Where the Spark job of a plan runs: the submit step's platforms, chosen by ``spark.platform``.

Every source's work reaches Spark through one step,
:meth:`~airflow_kinesis_snowflake.hooks.spark.SparkJobSubmitHook.submit_work`: the plan is
encoded as an argument, the job runs, and the outcome is read back from Snowflake. Only the middle
differs per platform:

* ``spark_submit``: the hook runs spark-submit on this worker (its master is the Spark connection's);
* ``emr_serverless``: a job run on Amazon EMR Serverless
  (:class:`~airflow_kinesis_snowflake.hooks.emr_serverless.EmrServerlessSubmitter`);
* ``glue``: a run of an AWS Glue job (:class:`~airflow_kinesis_snowflake.hooks.glue.GlueSubmitter`);
* ``databricks``: a one-time run on a Databricks cluster
  (:class:`~airflow_kinesis_snowflake.hooks.databricks.DatabricksSubmitter`), the only module that
  imports the Databricks provider (the ``databricks`` extra).

A managed platform's submitter is a :class:`~airflow_kinesis_snowflake.hooks.spark.PlatformSubmitter`
(the submit step's seam): it refuses what cannot run before
anything is submitted, runs the entry point with the job's arguments and waits for it, and cancels
it when the task is killed. The steps every managed platform takes alike are in
:mod:`~airflow_kinesis_snowflake.hooks.managed`; the files go up through
:mod:`~airflow_kinesis_snowflake.hooks.artifacts`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_kinesis_snowflake.config import (
    DATABRICKS_PLATFORM,
    DEFERRABLE_PLATFORMS,
    EMR_SERVERLESS_PLATFORM,
    GLUE_PLATFORM,
    SPARK_PLATFORMS,
    SPARK_SUBMIT_PLATFORM,
)

if TYPE_CHECKING:
    from airflow_kinesis_snowflake.hooks.spark import PlatformSubmitter, SparkJobSubmitHook


def platform_submitter(
    settings: Mapping[str, Any] | None, *, aws_conn_id: str | None, region_name: str | None
) -> PlatformSubmitter | None:
    """The submitter of ``settings`` (the operators' ``spark_platform``,
    :meth:`~airflow_kinesis_snowflake.config.SparkConfig.platform_arguments`); None for spark-submit.

    :param aws_conn_id: the AWS connection the platform is called with.
    :raises ValueError: an unknown platform.
    """
    platform = (settings or {}).get("platform", SPARK_SUBMIT_PLATFORM)
    if platform == SPARK_SUBMIT_PLATFORM:
        return None
    if platform == EMR_SERVERLESS_PLATFORM:
        from airflow_kinesis_snowflake.hooks.emr_serverless import EmrServerlessSubmitter

        assert settings is not None
        fields = {key: value for key, value in settings.items() if key != "platform"}
        return EmrServerlessSubmitter(aws_conn_id=aws_conn_id, region_name=region_name, **fields)
    if platform == GLUE_PLATFORM:
        from airflow_kinesis_snowflake.hooks.glue import GlueSubmitter

        assert settings is not None
        fields = {key: value for key, value in settings.items() if key != "platform"}
        return GlueSubmitter(aws_conn_id=aws_conn_id, region_name=region_name, **fields)
    if platform == DATABRICKS_PLATFORM:
        from airflow_kinesis_snowflake.hooks.databricks import DatabricksSubmitter

        assert settings is not None
        fields = {key: value for key, value in settings.items() if key != "platform"}
        return DatabricksSubmitter(aws_conn_id=aws_conn_id, region_name=region_name, **fields)
    raise ValueError(f"spark_platform: {platform!r} is not a Spark platform: one of {', '.join(SPARK_PLATFORMS)}")


def job_submit_hook(
    *,
    conn_id: str,
    conf: dict[str, Any] | None,
    spark_submit: Mapping[str, Any],
    spark_platform: Mapping[str, Any] | None,
    aws_conn_id: str | None,
    region_name: str | None,
) -> SparkJobSubmitHook:
    """The job's hook: the Spark connection's extras and the task's Spark settings, on the platform
    ``spark_platform`` names (spark-submit when None)."""
    from airflow_kinesis_snowflake.hooks.spark import SparkJobSubmitHook

    submitter = platform_submitter(spark_platform, aws_conn_id=aws_conn_id, region_name=region_name)
    return SparkJobSubmitHook(submitter=submitter, conn_id=conn_id, conf=conf, **spark_submit)


def deferrable_refusal(
    task_id: str, spark_platform: Mapping[str, Any] | None, spark_conn_id: str | None, *, continuous: bool
) -> str | None:
    """Why a task cannot defer its batches' waits (``deferrable=True``), naming the task and the fields
    to change; None when it can: its job runs on a managed platform that is waited for in the triggerer
    (:data:`~airflow_kinesis_snowflake.config.DEFERRABLE_PLATFORMS`), in scheduled mode.

    :param continuous: the task runs in continuous mode, which reports each micro-batch as it commits.
    """
    platform = (spark_platform or {}).get("platform", SPARK_SUBMIT_PLATFORM)
    if platform in DEFERRABLE_PLATFORMS and spark_conn_id is not None and not continuous:
        return None
    if continuous:
        why = "this task runs in continuous mode, which reports each micro-batch as it commits"
    elif platform == SPARK_SUBMIT_PLATFORM or spark_conn_id is None:
        why = "this task has no spark_platform: spark-submit runs in the task itself"
    else:
        why = f"spark_platform {platform}'s runs are waited for in the task"
    return (
        f"task {task_id!r}: deferrable=True waits in Airflow's triggerer for a job run on a managed "
        f"Spark platform ({', '.join(DEFERRABLE_PLATFORMS)}), in scheduled mode; {why} (spark.deferrable "
        "and spark.platform in the connector file)"
    )
