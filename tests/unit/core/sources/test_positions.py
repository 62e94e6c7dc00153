"""Sequence numbers are compared as integers; checkpoints order by (sequence, sub-sequence)."""

from __future__ import annotations

import random

import pytest

from airflow_kinesis_snowflake.core.model import Checkpoint, parse_sequence_number
from airflow_kinesis_snowflake.core.sources.positions import (
    SEQUENCE_DIGITS,
    SUB_SEQUENCE_DIGITS,
    sharded_sequence_number,
)

# Real AWS sequence numbers are 56-digit decimals.
AWS_SEQ = "49590338271490256608559692538361571095921575989136588898"
AWS_SEQ_NEXT = "49590338271490256608559692540361571095921575989136588898"


def test_sequence_numbers_compare_as_integers() -> None:
    assert "9" > "10"  # string order is wrong for sequence numbers
    assert parse_sequence_number("9") < parse_sequence_number("10")
    assert parse_sequence_number("10") == 10


def test_aws_sequence_numbers_parse_exactly() -> None:
    assert len(AWS_SEQ) == 56
    assert parse_sequence_number(AWS_SEQ) == int(AWS_SEQ)
    assert parse_sequence_number(AWS_SEQ) < parse_sequence_number(AWS_SEQ_NEXT)
    assert parse_sequence_number(AWS_SEQ) + 1 == int(AWS_SEQ) + 1  # no float rounding


def test_parse_sequence_number_accepts_int() -> None:
    assert parse_sequence_number(42) == 42
    assert parse_sequence_number(0) == 0


@pytest.mark.parametrize("value", ["", "-1", "1.5", "1e5", "abc", " 1", "1 ", "0x10", "+1", -1])
def test_parse_sequence_number_rejects_non_decimals(value: str | int) -> None:
    with pytest.raises(ValueError, match="not a Kinesis sequence number"):
        parse_sequence_number(value)


def test_parse_sequence_number_rejects_non_ascii_digits() -> None:
    with pytest.raises(ValueError, match="not a Kinesis sequence number"):
        parse_sequence_number("١٢")


# -- Checkpoint -------------------------------------------------------------------------------


def test_checkpoint_orders_numerically_not_as_strings() -> None:
    assert Checkpoint("9") < Checkpoint("10")
    assert Checkpoint("10") > Checkpoint("9")
    assert Checkpoint("99") < Checkpoint("100")
    assert max(Checkpoint("9"), Checkpoint("10")) == Checkpoint("10")


def test_checkpoint_orders_aws_numbers_against_short_ones() -> None:
    values = [AWS_SEQ_NEXT, "10", AWS_SEQ, "9", "100"]
    ordered = sorted(Checkpoint(v) for v in values)

    assert [c.sequence_number for c in ordered] == ["9", "10", "100", AWS_SEQ, AWS_SEQ_NEXT]


def test_checkpoint_orders_by_sub_sequence_within_a_sequence_number() -> None:
    assert Checkpoint("10", 0) < Checkpoint("10", 1)
    assert Checkpoint("10", 1) < Checkpoint("10", 10)
    # A higher sequence number wins whatever the sub-sequence.
    assert Checkpoint("9", 999) < Checkpoint("10", 0)
    assert Checkpoint(AWS_SEQ, 5) < Checkpoint(AWS_SEQ_NEXT, 0)
    assert Checkpoint("10", 2) >= Checkpoint("10", 2)
    assert Checkpoint("10", 2) <= Checkpoint("10", 2)


def test_checkpoint_equality_and_hash_use_the_numeric_key() -> None:
    assert Checkpoint("7") == Checkpoint("007")
    assert hash(Checkpoint("7")) == hash(Checkpoint("007"))
    assert Checkpoint("7", 1) != Checkpoint("7", 0)
    assert len({Checkpoint("7"), Checkpoint("007"), Checkpoint("7", 1)}) == 2
    assert Checkpoint("7") != "7"


def test_checkpoint_does_not_order_against_other_types() -> None:
    with pytest.raises(TypeError):
        _ = Checkpoint("1") < "2"


def test_checkpoint_key() -> None:
    assert Checkpoint(AWS_SEQ, 3).key == (int(AWS_SEQ), 3)


@pytest.mark.parametrize(
    ("sequence", "sub", "covered"),
    [
        ("10", 2, True),  # the checkpoint itself
        ("10", 1, True),
        ("10", 3, False),
        ("9", 999, True),  # "9" > "10" as strings, but 9 < 10
        ("11", 0, False),
        ("100", 0, False),
        ("0", 0, True),
    ],
)
def test_covers(sequence: str, sub: int, covered: bool) -> None:
    assert Checkpoint("10", 2).covers(sequence, sub) is covered


def test_covers_rejects_invalid_sequence_numbers() -> None:
    with pytest.raises(ValueError):
        Checkpoint("10").covers("abc", 0)


def test_checkpoint_dict_round_trip() -> None:
    checkpoint = Checkpoint(AWS_SEQ, 4)

    data = checkpoint.to_dict()

    assert data == {"sequence_number": AWS_SEQ, "sub_sequence_number": 4}
    restored = Checkpoint.from_dict(data)
    assert restored == checkpoint
    assert restored.sequence_number == AWS_SEQ
    assert restored.sub_sequence_number == 4


def test_checkpoint_from_dict_defaults_and_coerces() -> None:
    assert Checkpoint.from_dict({"sequence_number": "12"}) == Checkpoint("12", 0)
    restored = Checkpoint.from_dict({"sequence_number": 12, "sub_sequence_number": "3"})
    assert restored.sequence_number == "12"
    assert restored.sub_sequence_number == 3


@pytest.mark.parametrize(("sequence", "sub"), [("abc", 0), ("-1", 0), ("1.0", 0), ("", 0), ("1", -1)])
def test_checkpoint_rejects_invalid_values(sequence: str, sub: int) -> None:
    with pytest.raises(ValueError):
        Checkpoint(sequence, sub)


# -- sharded sequence number -----------------------------------------------------------------


def test_sharded_sequence_number_layout() -> None:
    value = sharded_sequence_number("42", 7)

    assert len(value) == SEQUENCE_DIGITS + SUB_SEQUENCE_DIGITS
    assert value.isdigit()
    assert int(value[:SEQUENCE_DIGITS]) == 42
    assert int(value[SEQUENCE_DIGITS:]) == 7


def test_sharded_sequence_number_sorts_in_record_order() -> None:
    in_record_order = [
        ("0", 0),
        ("9", 0),
        ("9", 2),
        ("9", 10),
        ("10", 0),
        ("10", 1),
        ("100", 0),
        (AWS_SEQ, 0),
        (AWS_SEQ, 1),
        (AWS_SEQ, 11),
        (AWS_SEQ_NEXT, 0),
        ("1" + "0" * 127, 0),  # the widest number that fits
    ]
    shuffled = in_record_order[:]
    random.Random(7).shuffle(shuffled)

    by_string = sorted(shuffled, key=lambda pair: sharded_sequence_number(*pair))

    assert by_string == in_record_order
    assert sorted(shuffled, key=lambda pair: Checkpoint(*pair)) == in_record_order


def test_sharded_sequence_number_is_the_same_for_equal_numbers() -> None:
    assert sharded_sequence_number("007", 1) == sharded_sequence_number("7", 1)


def test_sharded_sequence_number_rejects_invalid_sequence_numbers() -> None:
    with pytest.raises(ValueError):
        sharded_sequence_number("12a", 0)


def test_sharded_sequence_number_rejects_negative_sub_sequence() -> None:
    with pytest.raises(ValueError):
        sharded_sequence_number("5", -1)


def test_sharded_sequence_number_sorts_longest_api_sequence_numbers() -> None:
    widest = "1" + "0" * 128  # 129 digits
    below = "9" * 128

    assert sharded_sequence_number(below, 0) < sharded_sequence_number(widest, 0)
