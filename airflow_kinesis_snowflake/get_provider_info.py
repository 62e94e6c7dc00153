"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point, with the
connection types of this provider and their forms."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from airflow_kinesis_snowflake import __version__

# Connection types of this provider: the Spark and Snowflake connections with the extras its hooks
# read, as form fields (``conn-fields``, which Airflow's UI shows without importing the hooks). Airflow
# reads conn-fields from 3.2 on; on 3.0 and 3.1 the connection types are listed all the same and their
# extras are typed into the connection's Extra field as JSON, under the same names.
CONN_FIELDS_SINCE = "3.2.0"
SPARK_CONN_TYPE = "kinesis_snowflake_spark"
SNOWFLAKE_CONN_TYPE = "kinesis_snowflake_snowflake"
_TEXT = {"type": ["string", "null"]}
_SECRET = {"type": ["string", "null"], "format": "password"}
_SECONDS = {"type": ["integer", "null"], "minimum": 1}

SPARK_CONNECTION: dict[str, Any] = {
    "connection-type": SPARK_CONN_TYPE,
    "hook-class-name": "airflow_kinesis_snowflake.hooks.spark.SparkJobSubmitHook",
    "hook-name": "Spark (Kinesis to Snowflake job)",
    "ui-field-behaviour": {
        "hidden-fields": ["schema", "login", "password"],
        "relabeling": {"host": "Master"},
        "placeholders": {
            "host": "local[2], yarn, spark://spark-master or k8s://https://k8s.example",
            "port": "7077 (spark://), 443 (k8s://)",
            "snowflake_connection_ref": "kinesis/snowflake-connection",
        },
    },
    "conn-fields": {
        "deploy-mode": {
            "label": "Deploy mode",
            "description": "client (the driver runs on the Airflow worker) or cluster (YARN and Kubernetes only; "
            "needs Driver identity and the Snowflake connection secret)",
            "schema": {"type": ["string", "null"], "enum": ["client", "cluster", None], "default": "client"},
        },
        "queue": {"label": "YARN queue", "schema": _TEXT},
        "namespace": {"label": "Kubernetes namespace", "schema": _TEXT},
        "spark-binary": {"label": "Spark binary", "description": "spark-submit by default", "schema": _TEXT},
        "driver_identity": {
            "label": "Driver identity",
            "description": "The driver and executors use their own AWS identity (instance profile, EMR role, IRSA) "
            "and read the Snowflake connection from the secret below; no credential is sent from Airflow. "
            "Required in cluster deploy mode.",
            "schema": {"type": ["boolean", "null"], "default": False},
        },
        "snowflake_connection_ref": {
            "label": "Snowflake connection secret",
            "description": "With Driver identity: the name or ARN of the AWS Secrets Manager secret holding the "
            "Snowflake connection (a JSON object of connector arguments).",
            "schema": _TEXT,
        },
    },
}

SNOWFLAKE_CONNECTION: dict[str, Any] = {
    "connection-type": SNOWFLAKE_CONN_TYPE,
    "hook-class-name": "airflow_kinesis_snowflake.hooks.snowflake.KinesisSnowflakeHook",
    "hook-name": "Snowflake (Kinesis ingestion)",
    "ui-field-behaviour": {
        # The Snowflake provider reads the endpoint from the extras host and port (fields below).
        "hidden-fields": ["host", "port"],
        "relabeling": {},
        "placeholders": {
            "login": "the SERVICE user, e.g. KINESIS_INGEST",
            "password": "empty with a key pair, or the private key's passphrase",
            "schema": "default schema",
            "account": "myorg-myaccount",
            "host": "only for another endpoint (private link, an emulator)",
            "protocol": "https",
        },
    },
    "conn-fields": {
        "account": {"label": "Account", "schema": _TEXT},
        "warehouse": {"label": "Warehouse", "schema": _TEXT},
        "database": {"label": "Database", "schema": _TEXT},
        "role": {"label": "Role", "schema": _TEXT},
        "private_key_content": {"label": "Private key (Text)", "schema": _SECRET},
        "private_key_file": {"label": "Private key (Path)", "schema": _TEXT},
        "private_key_passphrase": {"label": "Private key passphrase", "schema": _SECRET},
        "host": {"label": "Host", "description": "Only for another endpoint than the account's.", "schema": _TEXT},
        "port": {"label": "Port", "schema": {"type": ["integer", "null"], "minimum": 1, "maximum": 65535}},
        "protocol": {
            "label": "Protocol",
            "description": "https (the default), or http for an endpoint on plain HTTP such as the fakesnow emulator.",
            "schema": {"type": ["string", "null"], "enum": ["https", "http", None], "default": "https"},
        },
        "network_timeout": {"label": "Network timeout (s)", "description": "Default 1800.", "schema": _SECONDS},
        "login_timeout": {"label": "Login timeout (s)", "description": "Default 120.", "schema": _SECONDS},
        "socket_timeout": {"label": "Socket timeout (s)", "description": "Default 60.", "schema": _SECONDS},
    },
}


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
                    "airflow_kinesis_snowflake.hooks.cloudwatch",
                    "airflow_kinesis_snowflake.hooks.platforms",
                    "airflow_kinesis_snowflake.hooks.emr_serverless",
                    "airflow_kinesis_snowflake.hooks.glue",
                    "airflow_kinesis_snowflake.hooks.databricks",
                    "airflow_kinesis_snowflake.hooks.managed",
                    "airflow_kinesis_snowflake.hooks.artifacts",
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
                    "airflow_kinesis_snowflake.operators.spark_job",
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
                    "airflow_kinesis_snowflake.triggers.spark_job",
                ],
            }
        ],
        "plugins": [
            {
                "name": "kinesis_snowflake_lag",
                "plugin-class": "airflow_kinesis_snowflake.plugins.lag_page.KinesisSnowflakeLagPlugin",
            }
        ],
        "connection-types": [copy.deepcopy(SPARK_CONNECTION), copy.deepcopy(SNOWFLAKE_CONNECTION)],
    }


# -- the same forms for the hooks' classmethods --------------------------------------------------------------------
# Airflow 3's UI builds each form from conn-fields and ui-field-behaviour above (no WTForms widgets: those
# were the Flask UI's); the hooks' get_ui_field_behaviour gives the same behaviour from the same data.


def field_behaviour(connection: Mapping[str, Any]) -> dict[str, Any]:
    """The ``ui-field-behaviour`` of a connection type, with the keys the hook method returns."""
    behaviour = connection["ui-field-behaviour"]
    return {
        "hidden_fields": list(behaviour.get("hidden-fields", [])),
        "relabeling": dict(behaviour.get("relabeling", {})),
        "placeholders": dict(behaviour.get("placeholders", {})),
    }
