"""The COPY statements the sink runs, as text."""

from __future__ import annotations

from airflow_kinesis_snowflake.core.load.schema import TableColumn
from airflow_kinesis_snowflake.core.load.snowflake_sink import SnowflakeSink
from airflow_kinesis_snowflake.core.model import Destination

DEST = Destination("ANALYTICS", "RAW", "ORDERS")
TABLE = '"ANALYTICS"."RAW"."ORDERS"'
LOCATION = '@"ANALYTICS"."RAW"."KINESIS_INGEST_STAGE"/app/b/a/rows/'


def test_typed_columns_are_matched_by_name() -> None:
    sink = SnowflakeSink(None, DEST)
    staged = [TableColumn("ID", "NUMBER(38,0)"), TableColumn("KINESISMETADATA", "OBJECT")]

    assert sink.copy_sql(sink.table, "app/b/a/rows", staged) == (
        f"COPY INTO {TABLE} FROM {LOCATION} FILE_FORMAT = (TYPE = PARQUET) "
        "MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE ON_ERROR = ABORT_STATEMENT"
    )


def test_json_text_of_semi_structured_columns_is_parsed() -> None:
    sink = SnowflakeSink(None, DEST)
    staged = [
        TableColumn("ID", "NUMBER(38,0)"),
        TableColumn("ADDRESS", "VARIANT"),
        TableColumn('odd "key"', "OBJECT"),
        TableColumn("TAGS", "ARRAY"),
        TableColumn("KINESISMETADATA", "OBJECT"),
    ]

    assert sink.copy_sql(sink.table, "app/b/a/rows", staged) == (
        f'COPY INTO {TABLE} ("ID", "ADDRESS", "odd ""key""", "TAGS", "KINESISMETADATA") '
        'FROM (SELECT $1:"ID", PARSE_JSON($1:"ADDRESS"), PARSE_JSON($1:"odd ""key"""), PARSE_JSON($1:"TAGS"), '
        f'$1:"KINESISMETADATA" FROM {LOCATION}) FILE_FORMAT = (TYPE = PARQUET) ON_ERROR = ABORT_STATEMENT'
    )


def test_the_parse_failure_table_is_always_matched_by_name() -> None:
    sink = SnowflakeSink(None, DEST)

    sql = sink.copy_sql(sink.failures_table, "app/b/a/failures", [TableColumn("ADDRESS", "VARIANT")])

    assert sql.startswith('COPY INTO "ANALYTICS"."RAW"."ORDERS_PARSE_FAILURES" FROM @')
    assert "MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE" in sql
