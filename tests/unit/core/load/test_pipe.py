"""Loading a batch through the user's pipe: the statement it runs, and the JSON lines it stages."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from airflow_kinesis_snowflake.core.load.pipe import LOAD_OPTIONS, pipe_batch, pipe_load_sql, validate_pipe_definition
from airflow_kinesis_snowflake.core.model import Destination
from airflow_kinesis_snowflake.core.sources.records import KinesisRecord, kinesis_metadata

LOCATION = '@"ANALYTICS"."RAW"."KINESIS_INGEST_STAGE"/app/batch/attempt/rows/'
STREAM = "orders"
ARRIVAL = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)


def record(data: bytes, i: int = 0, error: str | None = None) -> KinesisRecord:
    return KinesisRecord("shardId-000000000002", str(49590338271490256608559692538361571095921575989136588898 + i),
                         0, f"pk-{i}", ARRIVAL, data, error)  # fmt: skip


@pytest.mark.parametrize(
    ("definition", "expected"),
    [
        (  # the stage's options and the copy options are the connector's; the alias stays
            "COPY INTO ANALYTICS.RAW.ORDERS (ID, NOTE) FROM (SELECT $1:id::NUMBER, UPPER($1:note) "
            "FROM @user_stage/orders/ (FILE_FORMAT => 'my_json', PATTERN => '.*[.]json') t) "
            "FILE_FORMAT = (TYPE = JSON) ON_ERROR = CONTINUE",
            "COPY INTO ANALYTICS.RAW.ORDERS (ID, NOTE) FROM (SELECT $1:id::NUMBER, UPPER($1:note) "
            f"FROM {LOCATION} t) {LOAD_OPTIONS}",
        ),
        (  # a Snowpipe Streaming pipe
            "COPY INTO ANALYTICS.RAW.ORDERS FROM (SELECT $1:id, $1:KINESISMETADATA "
            "FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')));",
            f"COPY INTO ANALYTICS.RAW.ORDERS FROM (SELECT $1:id, $1:KINESISMETADATA FROM {LOCATION}) {LOAD_OPTIONS}",
        ),
        (  # quoted names, keys that are keywords, AS before the alias, lower case
            'copy into "ANALYTICS"."RAW"."ORDERS" from (select $1:"from", COALESCE($1:a, (0)) '
            'from @"my (odd) stage"/x/ as s)',
            f'copy into "ANALYTICS"."RAW"."ORDERS" from (select $1:"from", COALESCE($1:a, (0)) '
            f"from {LOCATION} as s) {LOAD_OPTIONS}",
        ),
        (  # an external location, and FROM inside a comment and a string
            "COPY INTO ANALYTICS.RAW.ORDERS FROM (SELECT $1:x, 'FROM here' -- not FROM this\n"
            "FROM 's3://bucket/FROM (x)/')",
            f"COPY INTO ANALYTICS.RAW.ORDERS FROM (SELECT $1:x, 'FROM here' -- not FROM this\n"
            f"FROM {LOCATION}) {LOAD_OPTIONS}",
        ),
    ],
)
def test_the_pipe_select_is_applied_to_the_batch_location(definition: str, expected: str) -> None:
    validate_pipe_definition(definition, Destination("ANALYTICS", "RAW", "ORDERS"))

    assert pipe_load_sql(definition, LOCATION) == expected


def test_a_line_comment_after_the_source_does_not_swallow_the_parenthesis() -> None:
    definition = "COPY INTO A.B.C (X) FROM (\n  SELECT $1:x FROM @stage t -- the stage\n) FILE_FORMAT = (TYPE = JSON)"

    assert pipe_load_sql(definition, LOCATION) == (
        f"COPY INTO A.B.C (X) FROM (\n  SELECT $1:x FROM {LOCATION} t -- the stage\n) {LOAD_OPTIONS}"
    )


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        ("COPY INTO A.B.C FROM (SELECT $1 FROM @s", "unbalanced parenthesis"),
        ("COPY INTO A.B.C FROM (SELECT PARSE_JSON($1)) FILE_FORMAT = (TYPE = JSON)", "has no FROM in its SELECT"),
        ("COPY INTO A.B.C.X (A) FROM (SELECT $1:a FROM @s)", "must start with COPY INTO A.B.C"),
    ],
)
def test_definitions_a_batch_could_not_run_are_refused_up_front(definition: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_pipe_definition(definition, Destination("A", "B", "C"))


def test_dollars_inside_an_identifier_do_not_open_a_string() -> None:
    definition = "COPY INTO A.B.C FROM (SELECT $1:a AS a$$b FROM @s)"

    assert validate_pipe_definition(definition, Destination("A", "B", "C")) == definition


def test_a_select_without_a_source_is_refused() -> None:
    with pytest.raises(ValueError, match="has no FROM in its SELECT"):
        pipe_load_sql("COPY INTO A.B.C FROM (SELECT 1)", LOCATION)


def test_each_record_is_one_line_with_its_metadata_and_its_own_text() -> None:
    payloads = [
        b'{"id": 1, "Note": "caf\xc3\xa9", "big": 123456789012345678901234567890, "f": 0.10000000000000000000001}',
        b"{}",
        b'{\n  "id": 3,\r\n  "tags": ["a",\n "b"]\n}\n',
    ]
    batch = pipe_batch([record(p, i) for i, p in enumerate(payloads)], STREAM)

    lines = batch.lines.decode("utf-8").split("\n")
    assert (batch.rows, batch.dead_letters, lines[-1]) == (3, [], "")
    assert len(lines) == 4  # one per record, and a final newline
    values = [json.loads(line) for line in lines[:3]]
    for i, value in enumerate(values):
        assert value["KINESISMETADATA"] == kinesis_metadata(STREAM, record(payloads[i], i))
    assert values[0]["Note"] == "café" and values[2] == {"id": 3, "tags": ["a", "b"]} | {
        "KINESISMETADATA": values[2]["KINESISMETADATA"]
    }
    # Numbers keep every digit the producer wrote: the text is not parsed and printed again.
    assert '"big": 123456789012345678901234567890, "f": 0.10000000000000000000001,' in lines[0]
    assert set(values[1]) == {"KINESISMETADATA"}


def test_a_record_of_its_own_kinesismetadata_gets_the_real_one() -> None:
    payload = b'{"KINESISMETADATA": "forged", "x": 1e400, "y": 0.1000000000000000055511151231257827}'
    batch = pipe_batch([record(payload)], STREAM)

    # Loaded with ALLOW_DUPLICATE, the last KINESISMETADATA wins, as in json.loads; the text is kept.
    assert "ALLOW_DUPLICATE = TRUE" in LOAD_OPTIONS
    assert batch.lines.startswith(payload[:-1] + b',"KINESISMETADATA":{')
    value = json.loads(batch.lines)
    assert value["KINESISMETADATA"]["shardId"] == "shardId-000000000002"


def test_what_is_not_a_json_object_is_kept_as_a_dead_letter() -> None:
    good = record(b'{"id": 1}', 0)
    bad = [
        record(b'{"id": ', 1),
        record(b"\xff\xfe{}", 2),
        record(b"[1, 2]", 3),
        record(b"", 4),
        record(b'{"ratio": NaN}', 6),
        record(b'{"big": -Infinity}', 7),
        record(
            b"\xf3\x89\x9a\xe2 aggregate bytes", 5, error="corrupt KPL aggregate: 1 of 3 user records could be read"
        ),
    ]
    batch = pipe_batch([good, *bad], STREAM)

    assert batch.rows == 1 and json.loads(batch.lines)["id"] == 1
    assert [d.record for d in batch.dead_letters] == bad
    reasons = [d.error for d in batch.dead_letters]
    assert reasons[0].startswith("invalid JSON")
    assert reasons[1] == "invalid UTF-8 at byte 0"
    assert reasons[2] == "top level is a JSON array, not an object"
    assert reasons[3].startswith("invalid JSON")
    assert reasons[4] == "invalid JSON: NaN is not a JSON number"
    assert reasons[5] == "invalid JSON: -Infinity is not a JSON number"
    assert reasons[6].startswith("corrupt KPL aggregate")


def test_an_empty_range_stages_nothing() -> None:
    assert pipe_batch([], STREAM).lines == b""
