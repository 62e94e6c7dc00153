"""Each source's support objects: a DynamoDB connector's carry no Kinesis name (statements as text)."""

from __future__ import annotations

import pytest

from airflow_kinesis_snowflake.core.dynamodb_job import generation_id
from airflow_kinesis_snowflake.core.load.dynamodb_ledger_migration import (
    generation_prefix,
    ledger_copy_sql,
    outcomes_copy_sql,
)
from airflow_kinesis_snowflake.core.load.dynamodb_sink import DynamoDBSink, DynamoDBTarget, KeyColumn
from airflow_kinesis_snowflake.core.load.snowflake_sink import (
    DYNAMODB_SUPPORT_NAMES,
    KINESIS_SUPPORT_NAMES,
    SnowflakeSink,
    support_objects_ddl,
)
from airflow_kinesis_snowflake.core.model import Destination

DEST = Destination("ANALYTICS", "RAW", "CUSTOMERS")


def test_a_dynamodb_sink_names_its_ledger_outcomes_and_stage_after_dynamodb() -> None:
    sink = DynamoDBSink(None, DynamoDBTarget(DEST, "customers", (KeyColumn("PK", "VARCHAR"),)))

    assert (sink.ledger, sink.outcomes, sink.stage) == (
        '"ANALYTICS"."RAW"."DYNAMODB_INGEST_LEDGER"',
        '"ANALYTICS"."RAW"."DYNAMODB_INGEST_BATCH_OUTCOMES"',
        '"ANALYTICS"."RAW"."DYNAMODB_INGEST_STAGE"',
    )
    # It records its generations in its own table (dynamodb_sink), not in a lease-table generations table.
    assert sink.target.generations == '"ANALYTICS"."RAW"."DYNAMODB_SYNC_GENERATIONS"'
    assert not hasattr(sink, "generations")
    with pytest.raises(ValueError, match="keeps no lease-table generations table"):
        _ = SnowflakeSink(None, DEST, names=DYNAMODB_SUPPORT_NAMES).generations


def test_the_dynamodb_support_objects_are_created_without_a_kinesis_name() -> None:
    ddl = support_objects_ddl(DEST, DYNAMODB_SUPPORT_NAMES)

    assert [d.kind for d in ddl] == ["ledger", "parse failures", "stage", "batch outcomes"]
    assert not [d.sql for d in ddl if "KINESIS_" in d.sql]
    created = " ".join(d.sql for d in ddl)
    assert all(f'"RAW"."{name}"' in created for name in ("DYNAMODB_INGEST_LEDGER", "DYNAMODB_INGEST_BATCH_OUTCOMES"))
    assert 'CREATE STAGE IF NOT EXISTS "ANALYTICS"."RAW"."DYNAMODB_INGEST_STAGE"' in created


def test_a_kinesis_sink_keeps_its_names() -> None:
    sink = SnowflakeSink(None, DEST)

    assert sink.names == KINESIS_SUPPORT_NAMES
    assert sink.generations == '"ANALYTICS"."RAW"."KINESIS_INGEST_GENERATIONS"'
    assert [d.kind for d in support_objects_ddl(DEST)].count("generations") == 1


def test_the_copy_selects_the_marks_of_one_table_by_the_prefix_of_its_generation_ids() -> None:
    for table in ("orders", "orders.v2", "Orders-2024_x"):
        assert generation_id(table, 12).startswith(generation_prefix(table))
    # A table whose name begins as another's is told apart: the prefix ends with "/g".
    assert not generation_id("orders-eu", 0).startswith(generation_prefix("orders"))
    ledger, outcomes = ledger_copy_sql(DEST), outcomes_copy_sql(DEST)
    assert ledger.startswith('INSERT INTO "ANALYTICS"."RAW"."DYNAMODB_INGEST_LEDGER" ')
    assert 'FROM "ANALYTICS"."RAW"."KINESIS_INGEST_LEDGER" AS o' in ledger
    assert (
        "n.APPLICATION_NAME = o.APPLICATION_NAME AND n.GENERATION_ID = o.GENERATION_ID AND n.SHARD_ID = o.SHARD_ID"
        in (ledger)
    )
    assert outcomes.startswith('INSERT INTO "ANALYTICS"."RAW"."DYNAMODB_INGEST_BATCH_OUTCOMES" ')
    assert "o.RECORDED_AT >= %s" in outcomes
