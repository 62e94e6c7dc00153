"""DynamoDB attribute values as exact Python values, exact JSON text and Snowflake types."""

import json
from decimal import Decimal

import pytest

from airflow_kinesis_snowflake.core.sources.dynamodb.types import (
    fits_number,
    item_to_json,
    number_text,
    python_value,
    text_of,
    to_json,
    type_of,
)

THIRTY_EIGHT = "12345678901234567890123456789012345678"


@pytest.mark.parametrize(
    ("wire", "text", "fits", "json_text"),
    [
        (THIRTY_EIGHT, THIRTY_EIGHT, True, THIRTY_EIGHT),
        ("-" + THIRTY_EIGHT, "-" + THIRTY_EIGHT, True, "-" + THIRTY_EIGHT),
        ("1.2345678901234567890123456789012345678", "1.2345678901234567890123456789012345678", True, None),
        ("1E+37", "1" + "0" * 37, True, "1" + "0" * 37),
        ("1E+38", "1E+38", False, '"1E+38"'),
        ("1E+125", "1E+125", False, '"1E+125"'),
        ("-9.9999999999999999999999999999999999999E+125", "-9.9999999999999999999999999999999999999E+125", False, None),
        ("1E-37", "0." + "0" * 36 + "1", True, "0." + "0" * 36 + "1"),
        ("1E-130", "1E-130", False, '"1E-130"'),
        ("-0", "0", True, "0"),
        ("1.500", "1.5", True, "1.5"),
        ("100", "100", True, "100"),
    ],
)
def test_a_number_is_exact_positional_where_number_38_s_fits_and_its_exact_text_where_not(wire, text, fits, json_text):
    number = python_value({"N": wire})
    assert isinstance(number, Decimal) and number == Decimal(wire)
    assert number_text(number) == text
    assert fits_number(number) is fits
    assert text_of({"N": wire}) == text
    assert to_json({"N": wire}) == (json_text or (text if fits else json.dumps(text)))
    # Read back, the JSON gives the very number: a Decimal from the number, or from the string.
    assert Decimal(str(json.loads(to_json({"N": wire}), parse_float=Decimal, parse_int=Decimal))) == Decimal(wire)


def test_scalars_decode_to_exact_python_values_and_their_column_text():
    assert python_value({"S": "héllo"}) == "héllo" and text_of({"S": "héllo"}) == "héllo"
    assert python_value({"B": b"\x00\xff"}) == b"\x00\xff" and text_of({"B": b"\x00\xff"}) == "AP8="
    assert python_value({"BOOL": True}) is True and text_of({"BOOL": False}) == "false"
    assert python_value({"NULL": True}) is None and text_of({"NULL": True}) is None
    assert to_json({"NULL": True}) == "null" and to_json({"BOOL": True}) == "true"
    assert to_json({"S": 'a"b'}) == '"a\\"b"' and to_json({"B": b"\x00\xff"}) == '"AP8="'


def test_maps_and_lists_become_json_with_every_number_exact_and_keys_sorted():
    value = {
        "M": {
            "z": {"L": [{"N": THIRTY_EIGHT}, {"N": "0.10"}, {"N": "1E+125"}, {"NULL": True}, {"B": b"\x01"}]},
            "a": {"M": {"deep": {"N": "-1E-130"}, "flag": {"BOOL": False}}},
        }
    }
    assert to_json(value) == (
        '{"a":{"deep":"-1E-130","flag":false},"z":[' + THIRTY_EIGHT + ',0.1,"1E+125",null,"AQ=="]}'
    )
    decoded = python_value(value)
    assert decoded["z"][0] == int(THIRTY_EIGHT) and decoded["z"][1] == Decimal("0.10")
    assert decoded["z"][4] == b"\x01" and decoded["a"]["deep"] == Decimal("-1E-130")
    # The same item with its attributes in another order gives the same text.
    assert item_to_json({"b": {"S": "x"}, "a": {"N": "1"}}) == item_to_json({"a": {"N": "1"}, "b": {"S": "x"}})


def test_sets_become_sorted_arrays_so_the_same_set_always_gives_the_same_value():
    assert to_json({"SS": ["pear", "apple", "Zed"]}) == '["Zed","apple","pear"]'
    assert to_json({"NS": ["10", "9", "1E+125", "-0.5", THIRTY_EIGHT]}) == (f'[-0.5,9,10,{THIRTY_EIGHT},"1E+125"]')
    assert to_json({"NS": ["2", "1"]}) == to_json({"NS": ["1", "2"]})
    assert to_json({"BS": [b"\x02", b"\x01\xff"]}) == '["Af8=","Ag=="]'
    # A JSON wire document holds binary as base64; it decodes to the same value.
    assert to_json({"BS": ["Ag==", "Af8="]}) == to_json({"BS": [b"\x02", b"\x01\xff"]})
    assert python_value({"NS": ["1.0", "2"]}) == {Decimal(1), Decimal(2)}
    assert python_value({"BS": [b"a"]}) == {b"a"}


@pytest.mark.parametrize("value", [{}, {"X": 1}, {"S": "a", "N": "1"}])
def test_a_value_that_is_no_attribute_value_is_refused(value):
    with pytest.raises(ValueError, match="not a DynamoDB attribute value"):
        type_of(value)
