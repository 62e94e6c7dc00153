"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_kinesis_snowflake import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-kinesis-snowflake",
        "name": "Kinesis to Snowflake",
        "description": "Exactly-once micro-batch ingestion of Amazon Kinesis Data Streams into Snowflake "
        "tables with PySpark, with per-shard leases and checkpoints in DynamoDB; DynamoDB tables synced into "
        "Snowflake tables that converge to their items.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Amazon Kinesis to Snowflake",
                "external-doc-url": "https://docs.aws.amazon.com/streams/latest/dev/introduction.html",
                "tags": ["aws", "service"],
            },
            {
                "integration-name": "Amazon DynamoDB to Snowflake",
                "external-doc-url": "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Streams.html",
                "tags": ["aws", "service"],
            },
        ],
        "hooks": [
            {
                "integration-name": "Amazon Kinesis to Snowflake",
                "python-modules": [
                    "airflow_kinesis_snowflake.hooks.kinesis",
                    "airflow_kinesis_snowflake.hooks.snowflake",
                    "airflow_kinesis_snowflake.hooks.spark",
                ],
            },
            {
                "integration-name": "Amazon DynamoDB to Snowflake",
                "python-modules": ["airflow_kinesis_snowflake.hooks.dynamodb"],
            },
        ],
        "operators": [
            {
                "integration-name": "Amazon Kinesis to Snowflake",
                "python-modules": [
                    "airflow_kinesis_snowflake.operators.lease_table",
                    "airflow_kinesis_snowflake.operators.ingest",
                    "airflow_kinesis_snowflake.operators.iam",
                    "airflow_kinesis_snowflake.operators.fan_out",
                    "airflow_kinesis_snowflake.operators.snowflake",
                    "airflow_kinesis_snowflake.operators.snowflake_verify",
                    "airflow_kinesis_snowflake.operators.migration",
                    "airflow_kinesis_snowflake.operators.reset",
                    "airflow_kinesis_snowflake.operators.restore",
                    "airflow_kinesis_snowflake.operators.cleanup",
                ],
            },
            {
                "integration-name": "Amazon DynamoDB to Snowflake",
                "python-modules": [
                    "airflow_kinesis_snowflake.operators.dynamodb",
                    "airflow_kinesis_snowflake.operators.dynamodb_discovery",
                    "airflow_kinesis_snowflake.operators.dynamodb_provision",
                    "airflow_kinesis_snowflake.operators.dynamodb_reset",
                    "airflow_kinesis_snowflake.operators.dynamodb_cleanup",
                ],
            },
        ],
        "sensors": [
            {
                "integration-name": "Amazon Kinesis to Snowflake",
                "python-modules": ["airflow_kinesis_snowflake.sensors.kinesis"],
            }
        ],
        "triggers": [
            {
                "integration-name": "Amazon Kinesis to Snowflake",
                "python-modules": [
                    "airflow_kinesis_snowflake.triggers.kinesis",
                    "airflow_kinesis_snowflake.triggers.lease_table",
                ],
            }
        ],
        "plugins": [
            {
                "name": "kinesis_snowflake_lag",
                "plugin-class": "airflow_kinesis_snowflake.plugins.lag_page.KinesisSnowflakeLagPlugin",
            }
        ],
        "connection-types": [],
    }
