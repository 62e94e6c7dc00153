"""Schema evolution's pure parts: type inference, column names, summaries, the changes and their SQL."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_kinesis_snowflake.core.load.evolution import (
    MAX_IDENTIFIER_LENGTH,
    JsonType,
    KeyStats,
    KeySummary,
    UnknownKeyError,
    UnknownKeys,
    check_unknown_keys,
    column_name,
    held_back,
    is_timestamp,
    json_type,
    merge,
    plan_changes,
    resolve_policy,
    shown,
    summarize,
    widen,
)
from airflow_kinesis_snowflake.core.load.schema import ColumnMap, KeysDifferingByCaseError, TableColumn
from airflow_kinesis_snowflake.core.load.snowflake_sink import (
    add_column_sql,
    drop_not_null_sql,
    table_properties_from_show,
)
from airflow_kinesis_snowflake.core.load.transform import build_batch, build_batch_reference
from airflow_kinesis_snowflake.core.model import Destination
from airflow_kinesis_snowflake.core.planning import BatchPlan
from airflow_kinesis_snowflake.core.sources.records import KinesisRecord

T = JsonType
ARRIVAL = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
COLUMNS = [
    TableColumn("ID", "NUMBER", nullable=False, numeric_precision=38),
    TableColumn("NAME", "TEXT", nullable=False),
    TableColumn("NOTE", "TEXT"),
    TableColumn("KINESISMETADATA", "VARIANT"),
]


def record(payload: Any, seq: int = 1) -> KinesisRecord:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return KinesisRecord("shardId-000000000000", str(seq), 0, "pk", ARRIVAL, data)


def records(*payloads: Any) -> list[KinesisRecord]:
    return [record(p, i) for i, p in enumerate(payloads, 1)]


def summary_of(*payloads: Any, columns: list[TableColumn] = COLUMNS) -> KeySummary:
    return summarize(records(*payloads), ColumnMap(columns))


def types(summary: KeySummary) -> dict[str, JsonType | None]:
    return {s.key: s.type for s in summary.keys.values()}


# -- one value's type -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (0, T.INTEGER),
        (-(2**63), T.INTEGER),
        (2**63 - 1, T.INTEGER),
        (2**63, T.INTEGER),  # beyond 64 bits: NUMBER(38,0) holds 38 digits
        (10**38 - 1, T.INTEGER),
        (-(10**38) + 1, T.INTEGER),
        (10**38, T.FLOAT),  # beyond 38 digits, as Snowflake reads such a number in JSON
        (1.5, T.FLOAT),
        (float("nan"), T.FLOAT),
        (True, T.BOOLEAN),  # a bool is an int in Python; not here
        (False, T.BOOLEAN),
        ("", T.VARCHAR),
        ("red", T.VARCHAR),
        ("2026-01-31T12:00:00Z", T.TIMESTAMP),
        ({"a": 1}, T.VARIANT),
        ({}, T.VARIANT),
        ([1, "x"], T.VARIANT),
        ([], T.VARIANT),
    ],
)
def test_json_type(value: Any, expected: JsonType | None) -> None:
    assert json_type(value) is expected


@pytest.mark.parametrize(
    "text",
    [
        "2026-01-31T12:00:00Z",
        "2026-01-31T12:00",
        "2026-01-31 12:00:00",
        "2026-01-31T12:00:00.123456789+05:30",
        "2026-01-31T12:00:00-0800",
    ],
)
def test_date_times_are_timestamps(text: str) -> None:
    assert is_timestamp(text)


@pytest.mark.parametrize(
    "text",
    [
        "2026-01-31",  # a date alone
        "12:00:00",  # a time alone
        "20260131",  # an order number as much as a basic-format date
        "20260131T120000Z",
        "2026-W05-6T12:00",
        "2026-13-01T00:00:00",  # no 13th month
        "2026-01-31T24:00:00",
        "2026-01-31T12:00:00 UTC",
        "\uff12\uff10\uff12\uff16-01-31T12:00:00",  # full-width digits
        " 2026-01-31T12:00:00",
        "2026-01-31T12:00:00\n",
    ],
)
def test_other_strings_are_not_timestamps(text: str) -> None:
    assert not is_timestamp(text)
    assert json_type(text) is T.VARCHAR


# -- the lattice ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "wider"),
    [
        (T.INTEGER, T.FLOAT, T.FLOAT),
        (T.INTEGER, T.BOOLEAN, T.VARCHAR),
        (T.FLOAT, T.BOOLEAN, T.VARCHAR),
        (T.INTEGER, T.VARCHAR, T.VARCHAR),
        (T.BOOLEAN, T.VARCHAR, T.VARCHAR),
        (T.TIMESTAMP, T.VARCHAR, T.VARCHAR),
        (T.TIMESTAMP, T.INTEGER, T.VARCHAR),
        (T.VARCHAR, T.VARIANT, T.VARIANT),
        (T.INTEGER, T.VARIANT, T.VARIANT),
        (T.TIMESTAMP, T.TIMESTAMP, T.TIMESTAMP),
        (None, T.BOOLEAN, T.BOOLEAN),
        (None, None, None),
    ],
)
def test_widen(a: JsonType | None, b: JsonType | None, wider: JsonType | None) -> None:
    assert widen(a, b) is wider
    assert widen(b, a) is wider


TYPES = st.sampled_from([None, *JsonType])


@given(TYPES, TYPES, TYPES)
def test_widen_is_a_join(a: JsonType | None, b: JsonType | None, c: JsonType | None) -> None:
    # Associative and commutative, so the order Spark returns the summaries in cannot matter.
    assert widen(widen(a, b), c) is widen(a, widen(b, c))
    assert widen(a, b) is widen(b, a)
    assert widen(a, a) is a
    joined = widen(a, b)
    assert widen(joined, a) is joined
    assert widen(joined, b) is joined


# -- column names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("color", "COLOR"),
        ("orderId", "ORDERID"),
        ("_x$1", "_X$1"),
        ("order id", "ORDER ID"),
        ('we"ird', 'WE"IRD'),
        ("a.b", "A.B"),
        ("select", "SELECT"),  # a reserved word: safe, as it is always quoted
        ("1st", "1ST"),
        ("café", "CAFÉ"),
        ("Straße", "STRASSE"),
        ("\u0131d", "\u0131d"),  # dotless i: "ID" would not match the key back
        ("x" * MAX_IDENTIFIER_LENGTH, "X" * MAX_IDENTIFIER_LENGTH),
        ("ß" * 200, "ß" * 200),  # upper-cased it would be 400 characters
    ],
)
def test_column_name(key: str, name: str) -> None:
    assert column_name(key) == name


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", "empty"),
        ("x" * 256, "256 characters"),
        ("k" * 300, "300 characters"),
        ("a\x00b", "control characters"),
        ("a\nb", "control characters"),
        ("\ud800", "lone surrogate"),
        ("KinesisMetadata", "Kinesis metadata"),
    ],
)
def test_keys_no_column_can_be_named_after(key: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        column_name(key)


@given(st.text(max_size=300))
def test_a_new_column_matches_its_key_case_insensitively(key: str) -> None:
    try:
        name = column_name(key)
    except ValueError:
        return
    assert 0 < len(name) <= MAX_IDENTIFIER_LENGTH
    mapping = ColumnMap([TableColumn(name, "VARCHAR")])
    assert mapping.map_record({key: "v"}) == {name: "v"}
    both = {key.upper(): "v", key: "w"}
    if len(both) == 2 and key.upper().casefold() == key.casefold():
        with pytest.raises(KeysDifferingByCaseError):  # two spellings of one column: a dead letter
            mapping.map_record(both)
    else:
        assert mapping.map_record(both) == {name: "w"}


def test_shown_escapes_and_shortens() -> None:
    assert shown('a"b') == '"a\\"b"'
    assert shown("a\nb") == '"a\\nb"'
    long = shown("k" * 300)
    assert long.endswith("(300 characters)")
    assert len(long) < 100


# -- summaries --------------------------------------------------------------------------------------


def test_unknown_keys_with_the_type_of_their_values() -> None:
    summary = summary_of(
        {"id": 1, "name": "a", "qty": 1, "price": 2, "flag": True, "at": "2026-01-31T12:00:00Z", "tags": [1]},
        {"ID": 2, "NAME": "b", "qty": 3, "price": 2.5, "flag": False, "at": "2026-02-01T00:00:00+01:00"},
        {"id": 3, "name": "c", "mixed": 1, "attrs": {"a": 1}, "at": None},
        {"id": 4, "name": "d", "mixed": "x", "nothing": None},
    )

    assert types(summary) == {
        "qty": T.INTEGER,
        "price": T.FLOAT,
        "flag": T.BOOLEAN,
        "at": T.TIMESTAMP,  # the null says nothing
        "tags": T.VARIANT,
        "mixed": T.VARCHAR,
        "attrs": T.VARIANT,
        "nothing": None,
    }
    assert summary.missing == set()


def test_a_timestamp_among_other_strings_is_text() -> None:
    summary = summary_of({"id": 1, "name": "a", "at": "2026-01-31T12:00:00Z"}, {"id": 2, "name": "b", "at": "later"})

    assert types(summary) == {"at": T.VARCHAR}


def test_keys_differing_by_case_are_one_key_named_by_its_first_spelling_and_typed_by_every_one() -> None:
    summary = summary_of(
        {"id": 1, "name": "a", "Color": 1, "COLOR": "red"},  # a dead letter once COLOR exists
        {"id": 2, "name": "b", "color": 2},
    )

    assert list(summary.keys) == ["color"]
    assert summary.keys["color"] == KeyStats("Color", T.VARCHAR)


def test_records_whose_keys_differ_only_by_case_on_a_known_column_are_not_examined() -> None:
    """Such a record is a dead letter: it neither adds columns nor drops NOT NULL."""
    summary = summary_of({"id": None, "ID": 5, "name": "a", "new": 1}, {"id": 1, "name": None, "NAME": "b"})

    assert summary == KeySummary()


def test_a_new_key_spelt_two_ways_in_one_record_gets_a_column_and_the_record_is_a_dead_letter() -> None:
    """Not a column from one spelling and the other's value dropped: the record is kept whole with both keys."""
    batch_records = records({"id": 1, "name": "a", "foo": 1, "FOO": 2}, {"id": 2, "name": "b", "Foo": 3})

    changes = plan_changes(summarize(batch_records, ColumnMap(COLUMNS)), COLUMNS, evolve=True)

    assert [(c.name, c.type, c.key) for c in changes.add] == [("FOO", T.INTEGER, "foo")]
    evolved = ColumnMap([*COLUMNS, TableColumn("FOO", "NUMBER", numeric_precision=38)])
    batch = build_batch(batch_records, "s", evolved)
    reference = build_batch_reference(batch_records, "s", evolved)
    assert batch.rows.column("FOO").to_pylist() == [3]
    assert batch.rows.equals(reference.rows)
    assert [(d.record, d.error, d.column) for d in batch.dead_letters] == [
        (batch_records[0], 'keys "foo" and "FOO" both map to column FOO; rename one in the producer', "FOO")
    ]
    assert [d.error for d in reference.dead_letters] == [d.error for d in batch.dead_letters]


def test_known_columns_are_matched_case_insensitively_and_metadata_is_never_a_column() -> None:
    summary = summary_of({"Id": 1, "nAmE": "a", "note": "x", "kinesisMetadata": {"forged": True}})

    assert types(summary) == {"kinesisMetadata": T.VARIANT}


def test_not_null_columns_a_record_leaves_empty() -> None:
    assert summary_of({"id": 1, "name": "a"}, {"ID": 2, "Name": "b"}).missing == set()
    assert summary_of({"id": 1, "name": "a"}, {"id": 2}).missing == {"NAME"}
    assert summary_of({"id": None, "name": "a"}).missing == {"ID"}
    # Two spellings of ID: a dead letter, which leaves nothing empty.
    assert summary_of({"id": None, "ID": 5, "name": "a"}).missing == set()
    assert summary_of({"note": "x"}).missing == {"ID", "NAME"}


def test_records_that_become_dead_letters_are_not_examined() -> None:
    summary = summarize(
        [
            record(b"not json"),
            record(b"\xff\xfe"),
            record([{"x": 1}]),
            record("just a string"),
            replace(record({"bad": 1}), error="corrupt KPL aggregate"),
        ],
        ColumnMap(COLUMNS),
    )

    assert summary == KeySummary()


def test_payloads_are_read_as_build_batch_reads_them() -> None:
    # orjson refuses NaN, which json.loads (the per-record path) takes; nesting beyond what either
    # parses makes a dead letter, which is not examined.
    nan = record(b'{"id": 1, "name": "a", "ratio": NaN}')
    deep = record(b'{"id": 1, "name": "a", "deep": ' + b"[" * 5000 + b"]" * 5000 + b"}", 2)

    summary = summarize([nan, deep], ColumnMap(COLUMNS))

    assert types(summary) == {"ratio": T.FLOAT}
    assert [d.record for d in build_batch([nan, deep], "s", ColumnMap(COLUMNS)).dead_letters] == [deep]


def test_a_new_key_whose_first_value_has_25_digits_gets_a_number_column_that_holds_it() -> None:
    # orjson reads an integer beyond 64 bits as a float: the key must not become FLOAT for that.
    big = 1234567890123456789012345
    payloads = [
        b'{"id": 1, "name": "a", "big": 1234567890123456789012345, "huge": 1%s}' % (b"0" * 38),
        b'{"id": 2, "name": "b", "big": 7, "huge": 1}',
    ]
    batch_records = [record(p, i) for i, p in enumerate(payloads)]

    changes = plan_changes(summarize(batch_records, ColumnMap(COLUMNS)), COLUMNS, evolve=True)

    assert [(c.name, c.type) for c in changes.add] == [("BIG", T.INTEGER), ("HUGE", T.FLOAT)]
    evolved = ColumnMap([*COLUMNS, TableColumn("BIG", "NUMBER", numeric_precision=38), TableColumn("HUGE", "FLOAT")])
    batch = build_batch(batch_records, "s", evolved)
    assert batch.dead_letters == []
    assert batch.rows.column("BIG").to_pylist() == [big, 7]


def test_a_flood_of_distinct_keys_is_counted_not_tracked() -> None:
    payloads = [{"id": i, "name": "n", f"key{i}": i} for i in range(10)]

    summary = summarize(records(*payloads), ColumnMap(COLUMNS), max_keys=4)

    assert list(summary.keys) == ["key0", "key1", "key2", "key3"]
    assert summary.untracked == 6


def test_merge_widens_keeps_the_first_spelling_and_unites_the_missing() -> None:
    first = summary_of({"id": 1, "name": "a", "Qty": 1}, {"id": 2})
    second = summary_of({"id": 3, "name": "b", "QTY": 1.5, "new": "x"}, {"name": "c"})

    merged = merge([first, second])

    assert merged.keys == {"qty": KeyStats("Qty", T.FLOAT), "new": KeyStats("new", T.VARCHAR)}
    assert merged.missing == {"ID", "NAME"}


JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.sampled_from(["2026-01-31T12:00:00Z", "2026-02-01 08:30", "2026-01-31"]),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
)
KEYS = st.sampled_from(["id", "ID", "name", "a", "A", "b", "c d", "Straße", "STRASSE", 'q"', "KinesisMetadata"])
PAYLOADS = st.lists(st.dictionaries(KEYS, JSON_VALUES, max_size=6), max_size=12)


@given(PAYLOADS, st.integers(min_value=0, max_value=12))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_summaries_of_parts_merge_to_the_summary_of_the_whole(payloads: list[dict[str, Any]], cut: int) -> None:
    whole = summary_of(*payloads)
    parts = merge([summary_of(*payloads[:cut]), summary_of(*payloads[cut:])])

    assert parts == whole


@given(PAYLOADS)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_value_of_a_new_key_lands_in_the_column_inferred_for_it(payloads: list[dict[str, Any]]) -> None:
    """The inferred type holds every value: evolving turns no record into a dead letter, but for keys
    differing only by case, which the record holds both of.
    """
    columns = [TableColumn("ID", "NUMBER", numeric_precision=38), TableColumn("KINESISMETADATA", "OBJECT")]
    batch_records = records(*payloads)
    changes = plan_changes(summarize(batch_records, ColumnMap(columns)), columns, evolve=True)
    # As describe_columns reads the columns back from Snowflake.
    evolved = ColumnMap(
        columns
        + [
            TableColumn(c.name, c.type.sql.split("(")[0], numeric_precision=38 if c.type is T.INTEGER else None)
            for c in changes.add
        ]
    )
    without_id = [p for p in payloads if all(k.casefold() != "id" for k in p)]
    added = {c.name.casefold() for c in changes.add}
    colliding = [p for p in without_id if _collides(p, added)]
    loaded = [p for p in without_id if not _collides(p, added)]

    batch = build_batch(records(*without_id), "s", evolved)

    assert [json.loads(d.record.data) for d in batch.dead_letters] == colliding
    assert all(" map to column " in d.error for d in batch.dead_letters)
    assert batch.rows.num_rows == len(loaded)
    assert batch.rows.equals(build_batch_reference(records(*without_id), "s", evolved).rows)
    for column in changes.add:
        landed = [v for v in batch.rows.column(column.name).to_pylist() if v is not None]
        expected = [_value(p, column.key) for p in loaded]
        assert len(landed) == sum(v is not None for v in expected)


def _collides(payload: dict[str, Any], columns: set[str]) -> bool:
    """Whether two keys of ``payload`` differ only by case and have one of ``columns`` (case-folded)."""
    folds = [k.casefold() for k in payload if k.casefold() in columns]
    return len(folds) != len(set(folds))


def _value(payload: dict[str, Any], key: str) -> Any:
    return next((v for k, v in payload.items() if k.casefold() == key.casefold()), None)


SAMPLES = [0, -7, 2**70, 1.5, -0.0, True, False, "x", "", "2026-01-31T12:00:00Z", {"a": [1]}, [1, "x"], [], None]


@pytest.mark.parametrize("first", SAMPLES, ids=repr)
def test_any_two_kinds_of_value_land_in_the_column_inferred_for_them(first: Any) -> None:
    columns = [TableColumn("KINESISMETADATA", "OBJECT")]
    for second in SAMPLES:
        batch_records = records({"k": first}, {"K": second})
        changes = plan_changes(summarize(batch_records, ColumnMap(columns)), columns, evolve=True)
        evolved = ColumnMap(
            [TableColumn(c.name, c.type.sql.split("(")[0], numeric_precision=38) for c in changes.add] + columns
        )

        batch = build_batch(batch_records, "s", evolved)

        assert batch.dead_letters == [], (first, second, changes.add)
        if first is None and second is None:
            assert changes.add == ()
        else:
            assert [c.name for c in changes.add] == ["K"]
            assert batch.rows.column("K").null_count == (first is None) + (second is None)


# -- the changes ------------------------------------------------------------------------------------


def test_evolving_adds_named_typed_columns_and_drops_not_null() -> None:
    summary = summary_of(
        {"id": 1, "qty": 1, "Color": "red", "order id": 7, "select": True, "note": "known"},
        {"id": 2, "name": "b", "COLOR": "blue", "only_nulls": None, "k" * 300: 1, "kinesismetadata": {}},
    )

    changes = plan_changes(summary, COLUMNS, evolve=True)

    assert [(c.name, c.type, c.key) for c in changes.add] == [
        ("QTY", T.INTEGER, "qty"),
        ("COLOR", T.VARCHAR, "Color"),
        ("ORDER ID", T.INTEGER, "order id"),
        ("SELECT", T.BOOLEAN, "select"),
    ]
    assert changes.drop_not_null == ("NAME",)
    assert [(s.key[:10], s.type) for s in changes.skipped] == [
        ("only_nulls", None),
        ("k" * 10, T.INTEGER),
        ("kinesismet", T.VARIANT),
    ]
    assert "only null values" in changes.skipped[0].reason
    assert "300 characters" in changes.skipped[1].reason
    assert [s.key for s in changes.lost] == ["k" * 300, "kinesismetadata"]


def test_without_evolution_nothing_changes_and_every_unknown_key_is_skipped() -> None:
    summary = summary_of({"id": 1, "qty": 1}, {"id": 2, "name": "b", "nothing": None})

    changes = plan_changes(summary, COLUMNS, evolve=False, why_not="an Iceberg table is never altered")

    assert changes.add == ()
    assert changes.drop_not_null == ()
    assert [(s.key, s.reason) for s in changes.skipped] == [
        ("qty", "an Iceberg table is never altered"),
        ("nothing", "an Iceberg table is never altered"),
    ]
    assert [s.key for s in changes.lost] == ["qty"]


def test_a_column_added_meanwhile_in_any_case_is_not_added_again() -> None:
    summary = summary_of({"id": 1, "name": "a", "color": "red"})

    changes = plan_changes(summary, [*COLUMNS, TableColumn("Color", "TEXT")], evolve=True)

    assert changes.add == ()
    assert changes.skipped == ()


def test_new_columns_per_batch_are_capped() -> None:
    summary = summary_of({"id": 1, "name": "n", **{f"k{i}": i for i in range(5)}})

    changes = plan_changes(summary, COLUMNS, evolve=True, max_new_columns=3)

    assert [c.name for c in changes.add] == ["K0", "K1", "K2"]
    assert [s.key for s in changes.skipped] == ["k3", "k4"]
    assert "more than 3 new columns" in changes.skipped[0].reason


def test_records_with_a_value_for_a_key_over_the_cap_are_kept_whole_with_the_keys_and_the_cap() -> None:
    payloads = [
        {"id": 1, "name": "a", "k0": 0, "k1": 1},  # every key gets a column
        {"id": 2, "name": "b", "k0": 0, "k1": 1, "k2": 2, "k3": 3},  # k2 and k3 do not
        {"id": 3, "name": "c", "K3": "x", "k3": "second spelling"},  # every spelling counts
        {"id": 4, "name": "d", "k2": None, "k3": None},  # nothing to lose
        {"id": 5, "name": "e", "": 1, "kinesisMetadata": 2},  # keys no column can be named after
    ]
    batch_records = records(*payloads)
    changes = plan_changes(summarize(batch_records, ColumnMap(COLUMNS)), COLUMNS, evolve=True, max_new_columns=2)

    assert [c.name for c in changes.add] == ["K0", "K1"]
    assert [(s.key, s.held_back) for s in changes.skipped] == [
        ("k2", True),
        ("k3", True),
        ("", False),
        ("kinesisMetadata", False),
    ]
    assert changes.held_back is not None and "at most 2 columns to a table per batch" in changes.held_back
    assert changes.report()["records_held_back"] == changes.held_back
    assert [s.key for s in changes.lost] == ["", "kinesisMetadata"]  # the held-back keys lose nothing

    evolved = [*COLUMNS, TableColumn("K0", "NUMBER", numeric_precision=38), TableColumn("K1", "NUMBER")]
    columns = ColumnMap(evolved, held_back(changes.held_back))
    batch = build_batch(batch_records, "s", columns)

    assert batch.rows.column("ID").to_pylist() == [1, 4, 5]
    assert batch.rows.equals(build_batch_reference(batch_records, "s", columns).rows)
    assert [(d.record, d.column) for d in batch.dead_letters] == [(batch_records[1], None), (batch_records[2], None)]
    assert [d.error for d in batch.dead_letters] == [
        f'no column for keys "k2", "k3": {changes.held_back}. '
        "The record is kept whole here rather than loaded without these values",
        f'no column for keys "K3", "k3": {changes.held_back}. '
        "The record is kept whole here rather than loaded without these values",
    ]
    assert [d.error for d in build_batch_reference(batch_records, "s", columns).dead_letters] == [
        d.error for d in batch.dead_letters
    ]


def test_keys_beyond_those_tracked_are_held_back_too() -> None:
    changes = plan_changes(KeySummary(untracked=3), COLUMNS, evolve=True)

    assert changes.held_back is not None
    columns = ColumnMap(COLUMNS, held_back(changes.held_back))
    batch = build_batch(records({"id": 1, "name": "a", "never_tracked": 1}), "s", columns)
    assert batch.rows.num_rows == 0
    assert batch.dead_letters[0].error.startswith('no column for key "never_tracked": schema evolution adds at most')


def test_nothing_is_held_back_below_the_cap_or_without_evolution() -> None:
    summary = summary_of({"id": 1, "name": "n", **{f"k{i}": i for i in range(5)}})

    assert plan_changes(summary, COLUMNS, evolve=True, max_new_columns=5).held_back is None
    assert plan_changes(summary, COLUMNS, evolve=False).held_back is None
    assert held_back(None) is None


def test_failing_on_unknown_keys_does_not_fail_for_keys_held_back_by_the_cap() -> None:
    # Nothing of theirs is lost, and failing would stop every later batch at the same keys.
    policy = _policy("TABLE", UnknownKeys.FAIL)
    capped = plan_changes(summary_of({"id": 1, "name": "a", "k0": 0, "k1": 1}), COLUMNS, evolve=True, max_new_columns=1)
    check_unknown_keys(capped, policy, "t")
    check_unknown_keys(plan_changes(KeySummary(untracked=3), COLUMNS, evolve=True), policy, "t")


def test_report_is_plain_json() -> None:
    summary = summary_of({"id": 1, "qty": 1, 'we"ird': "x", "k" * 300: 1})

    report = plan_changes(summary, COLUMNS, evolve=True).report()

    assert json.loads(json.dumps(report)) == report
    assert report["columns_added"] == [
        {"column": "QTY", "type": "NUMBER(38,0)", "key": '"qty"'},
        {"column": 'WE"IRD', "type": "VARCHAR", "key": '"we\\"ird"'},
    ]
    assert report["not_null_dropped"] == ["NAME"]
    assert report["keys_skipped_total"] == 1
    assert report["keys_skipped"][0]["key"].endswith("(300 characters)")


# -- whether to evolve, and failing on unknown keys -------------------------------------------------


@pytest.mark.parametrize(
    ("destination_type", "configured", "table_evolution", "table_iceberg", "evolve", "reason"),
    [
        ("TABLE", None, True, False, True, "the table has ENABLE_SCHEMA_EVOLUTION = TRUE"),
        ("TABLE", None, False, False, False, "the table has ENABLE_SCHEMA_EVOLUTION = FALSE"),
        ("TABLE", None, None, None, False, "could not be read"),
        ("TABLE", True, False, False, True, "destination.schema_evolution is on"),
        ("TABLE", False, True, False, False, "destination.schema_evolution is off"),
        ("PIPE", True, None, None, False, "the pipe's SELECT decides which keys are loaded"),
        ("PIPE", None, True, None, False, "the pipe's SELECT decides which keys are loaded"),
        ("ICEBERG", True, True, None, False, "an Iceberg table is never altered"),
        ("TABLE", True, True, True, False, "an Iceberg table is never altered"),  # the table says so
        ("INTERACTIVE", True, True, False, False, "an interactive table is never altered"),
    ],
)
def test_resolve_policy(
    destination_type: str,
    configured: bool | None,
    table_evolution: bool | None,
    table_iceberg: bool | None,
    evolve: bool,
    reason: str,
) -> None:
    policy = resolve_policy(
        destination_type=destination_type,
        configured=configured,
        on_unknown_key=UnknownKeys.IGNORE,
        table_evolution=table_evolution,
        table_iceberg=table_iceberg,
    )

    assert policy.evolve is evolve
    assert reason in policy.reason
    assert policy.examines_keys is evolve


def _policy(kind: str, on_unknown_key: UnknownKeys) -> Any:
    return resolve_policy(destination_type=kind, configured=True, on_unknown_key=on_unknown_key, table_evolution=None)


def test_an_iceberg_table_set_to_fail_fails_on_a_new_key_naming_it() -> None:
    policy = _policy("ICEBERG", UnknownKeys.FAIL)
    assert policy.examines_keys
    changes = plan_changes(
        summary_of({"id": 1, "name": "a", "color": "red", "size": None}), COLUMNS, evolve=False, why_not=policy.reason
    )

    with pytest.raises(UnknownKeyError) as raised:
        check_unknown_keys(changes, policy, '"DB"."S"."T"')

    message = str(raised.value)
    assert '"color" (an Iceberg table is never altered)' in message
    assert '"size"' not in message  # only nulls: nothing would be lost
    assert '"DB"."S"."T"' in message
    assert "on_unknown_key" in message


def test_ignoring_unknown_keys_never_fails() -> None:
    policy = _policy("ICEBERG", UnknownKeys.IGNORE)
    changes = plan_changes(summary_of({"id": 1, "color": "red"}), COLUMNS, evolve=False, why_not=policy.reason)

    check_unknown_keys(changes, policy, "t")
    assert not policy.examines_keys


def test_failing_covers_keys_evolution_cannot_place_and_untracked_keys() -> None:
    policy = _policy("TABLE", UnknownKeys.FAIL)
    nulls_only = plan_changes(summary_of({"id": 1, "name": "a", "later": None}), COLUMNS, evolve=True)
    check_unknown_keys(nulls_only, policy, "t")  # nothing to lose

    hostile = plan_changes(summary_of({"id": 1, "name": "a", "": 1, "ok": 2}), COLUMNS, evolve=True)
    with pytest.raises(UnknownKeyError, match=r'"" \(an empty key'):
        check_unknown_keys(hostile, policy, "t")

    # (with evolution on, keys beyond those tracked are held back instead: see above)
    flood = plan_changes(KeySummary(untracked=3), COLUMNS, evolve=False)
    with pytest.raises(UnknownKeyError, match="and 3 more"):
        check_unknown_keys(flood, policy, "t")


# -- the SQL ------------------------------------------------------------------------------------------


def test_ddl_quotes_every_name() -> None:
    table = '"DB"."S"."T"'
    assert add_column_sql(table, "QTY", "NUMBER(38,0)") == (
        'ALTER TABLE "DB"."S"."T" ADD COLUMN IF NOT EXISTS "QTY" NUMBER(38,0)'
    )
    assert add_column_sql(table, 'X" VARCHAR); DROP TABLE T; --', "VARCHAR") == (
        'ALTER TABLE "DB"."S"."T" ADD COLUMN IF NOT EXISTS "X"" VARCHAR); DROP TABLE T; --" VARCHAR'
    )
    assert drop_not_null_sql(table, "order id") == 'ALTER TABLE "DB"."S"."T" ALTER COLUMN "order id" DROP NOT NULL'


@pytest.mark.parametrize("column_type", ["VARCHAR; DROP TABLE T", "NUMBER(38,0) NOT NULL", "varchar", "", "A(1,2,3)"])
def test_ddl_takes_only_plain_column_types(column_type: str) -> None:
    with pytest.raises(ValueError, match="not a column type"):
        add_column_sql('"T"', "X", column_type)


@given(st.text(min_size=1, max_size=300))
def test_any_key_reaches_sql_only_as_one_quoted_identifier(key: str) -> None:
    try:
        name = column_name(key)
    except ValueError:
        return
    for kind in JsonType:
        sql = add_column_sql('"T"', name, kind.sql)
        prefix, suffix = 'ALTER TABLE "T" ADD COLUMN IF NOT EXISTS "', f'" {kind.sql}'
        assert sql.startswith(prefix) and sql.endswith(suffix)
        quoted = sql[len(prefix) : -len(suffix)]
        # Inside the quotes every quote is doubled, so the identifier cannot end early.
        assert quoted.replace('""', "").count('"') == 0
        assert quoted.replace('""', '"') == name


SHOW_NAMES = ["created_on", "name", "kind", "database_name", "schema_name", "enable_schema_evolution", "is_iceberg"]


def test_table_properties_from_show_tables() -> None:
    rows = [
        (None, "ORDERS_X", "TABLE", "DB", "S", "N", "N"),  # LIKE 'ORDERS_' also matches these
        (None, "ORDERSX", "TABLE", "DB", "S", "N", "N"),
        (None, "ORDERS", "TABLE", "DB", "S", "Y", "N"),
    ]

    assert table_properties_from_show(SHOW_NAMES, rows, "ORDERS").schema_evolution is True
    assert table_properties_from_show(SHOW_NAMES, rows, "ORDERS").iceberg is False
    assert table_properties_from_show(SHOW_NAMES, rows, "ORDERSX").schema_evolution is False
    iceberg = [(None, "ORDERS", "TABLE", "DB", "S", "N", "Y")]
    assert table_properties_from_show([n.upper() for n in SHOW_NAMES], iceberg, "ORDERS").iceberg is True


def test_table_properties_unknown_where_show_tables_does_not_say() -> None:
    assert table_properties_from_show(SHOW_NAMES, [], "ORDERS").schema_evolution is None
    terse = table_properties_from_show(SHOW_NAMES[:5], [(None, "ORDERS", "TABLE", "DB", "S")], "ORDERS")
    assert terse.schema_evolution is None
    assert terse.iceberg is None


# -- the plan carries the settings ----------------------------------------------------------------


def _plan(**settings: Any) -> BatchPlan:
    return BatchPlan(
        application_name="app",
        generation_id="g",
        stream_name="s",
        region="us-east-1",
        destination=Destination("DB", "S", "T"),
        cutoff=datetime(2026, 1, 31, tzinfo=UTC),
        max_records_per_call=100,
        **settings,
    )


def test_plan_json_carries_the_evolution_settings_without_changing_the_batch_id() -> None:
    plan = _plan(destination_type="ICEBERG", schema_evolution=False, on_unknown_key=UnknownKeys.FAIL)

    restored = BatchPlan.from_json(plan.to_json())

    assert restored == plan
    assert restored.on_unknown_key is UnknownKeys.FAIL
    assert plan.batch_id == _plan().batch_id


def test_a_plan_written_before_the_settings_existed_reads_with_the_defaults() -> None:
    data = json.loads(_plan().to_json())
    for name in ("destination_type", "schema_evolution", "on_unknown_key"):
        del data[name]

    restored = BatchPlan.from_json(json.dumps(data))

    assert (restored.destination_type, restored.schema_evolution, restored.on_unknown_key) == (
        "TABLE",
        None,
        UnknownKeys.IGNORE,
    )
