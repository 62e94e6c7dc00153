"""The DynamoDB source's provisioning tasks against the moto and fakesnow servers, as the provision DAG runs them."""

from __future__ import annotations

import pytest

from airflow_kinesis_snowflake.config import parse_dynamodb_connector_config
from airflow_kinesis_snowflake.core.load.dynamodb_rows import ITEM_COLUMN, METADATA_COLUMN, VERSION_COLUMN
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.operators.dynamodb_discovery import DiscoverDynamoDBTablesOperator
from airflow_kinesis_snowflake.operators.dynamodb_provision import (
    CreateDynamoDBLeaseTableOperator,
    ProvisionDynamoDBTableOperator,
)
from tests.conftest import query, unique
from tests.emulators import Emulators
from tests.integration.core.sources.dynamodb.test_discovery import create

pytestmark = pytest.mark.integration


def test_provisioning_creates_the_lease_table_and_each_listed_table_destination(
    aws_connections: Emulators, capfd: pytest.CaptureFixture[str]
) -> None:
    dynamodb = aws_connections.boto3_client("dynamodb")
    prefix = unique("ddbprov")
    orders, missing = f"{prefix}-orders", f"{prefix}-missing"
    create(dynamodb, orders, sort_key=True)
    with aws_connections.snowflake_connect() as conn:
        conn.cursor().execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
        conn.cursor().execute("CREATE SCHEMA IF NOT EXISTS ANALYTICS.RAW")
    config = parse_dynamodb_connector_config(
        {
            "connector_id": "prov",
            "source": {
                "type": "dynamodb",
                "region": "us-east-1",
                "application_name": f"{prefix}-app",
                "tables": [orders, missing],
                "layout": "packed",
                "deletes": "soft",
            },
            "destination": {"database": "ANALYTICS", "schema": "RAW"},
        }
    )
    lease = CreateDynamoDBLeaseTableOperator(task_id="create_lease_table", application_name=f"{prefix}-app")
    assert lease.execute(context={}) is True
    assert lease.execute(context={}) is False  # idempotent
    assert LeaseTable(dynamodb, f"{prefix}-app").exists()

    discover = DiscoverDynamoDBTablesOperator(task_id="discover_tables", tables=config.source.tables)
    targets = discover.execute(context={})
    assert [t["table"] for t in targets] == [orders]
    logged = "".join(capfd.readouterr())
    assert f"Not synced: {missing}: " in logged and "check the name and the connector's region" in logged

    (target,) = targets
    provision = ProvisionDynamoDBTableOperator(
        task_id="provision_table", target=target, sync_options=config.sync_options()
    )
    destination = provision.execute(context={})
    assert provision.execute(context={}) == destination  # idempotent
    columns = query(
        aws_connections,
        "SELECT COLUMN_NAME FROM ANALYTICS.INFORMATION_SCHEMA.COLUMNS WHERE TABLE_SCHEMA = 'RAW' AND TABLE_NAME = "
        f"'{target['destination_table']}' ORDER BY ORDINAL_POSITION",
    )
    assert [c[0] for c in columns] == [
        "PK",
        "SK",
        VERSION_COLUMN,
        "DYNAMODB_DELETED",
        "DYNAMODB_DELETED_AT",
        METADATA_COLUMN,
        ITEM_COLUMN,
    ]
    # The support objects of soft deletes (no tombstones: a marked row is one): the snapshot ledger and
    # the sync generations, there to read.
    sink_target = provision.table_sync().target
    for table in (sink_target.snapshot_ledger, sink_target.generations):
        assert len(query(aws_connections, f"SELECT COUNT(*) FROM {table}")) == 1
