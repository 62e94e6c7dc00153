"""DynamoDB attribute values (the wire format) as exact Python values, JSON text and Snowflake types.

Decoding is boto3's :class:`~boto3.dynamodb.types.TypeDeserializer` (numbers as :class:`Decimal`,
never a float); what this module adds is the Snowflake side. The mapping (``docs/dynamodb.md``):

======  ===============================  ==========================================================
type    Snowflake                        how
======  ===============================  ==========================================================
S       ``VARCHAR``
N       ``NUMBER(38, s)``                where the number fits (:func:`fits_number`); otherwise the
                                         lossless form, its exact decimal text (:func:`number_text`)
B       ``BINARY``                       base64 text inside a VARIANT
BOOL    ``BOOLEAN``
NULL    SQL ``NULL``                     JSON ``null`` inside a VARIANT
M, L    ``VARIANT``                      JSON, numbers exact (below)
SS      ``ARRAY`` of strings             sorted by code point
NS      ``ARRAY`` of numbers             sorted by value, each exact
BS      ``ARRAY`` of base64 strings      sorted by the bytes
======  ===============================  ==========================================================

**Numbers.** DynamoDB numbers have up to 38 significant digits and exponents from -130 to +125.
Snowflake's ``NUMBER`` holds 38 digits with a scale of at most 37, and its JSON parser reads a
number of up to 38 digits exactly, as fixed-point. So a number that fits ``NUMBER(38, s)`` is
written as a JSON number in positional notation; one that does not (``1E+125``, ``1E-130``, or
38 digits with a scale above 37) is written as a JSON string holding its exact decimal text in
scientific notation (``"1E+125"``). No number ever passes through a float. A number's text is
canonical: trailing zeros dropped (``1.500`` is ``1.5``, as DynamoDB stores it) and ``-0`` is
``0``, so the same number always gives the same text.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from decimal import Context, Decimal
from typing import Any

from boto3.dynamodb.types import Binary, TypeDeserializer

from airflow_kinesis_snowflake.core.sources.dynamodb.model import AttributeValue

#: The largest precision and scale of Snowflake's NUMBER.
MAX_PRECISION = 38
MAX_SCALE = 37
TYPES = ("S", "N", "B", "BOOL", "NULL", "M", "L", "SS", "NS", "BS")
#: The Snowflake type of each DynamoDB type, for a value in its own column (docs/dynamodb.md).
SNOWFLAKE_TYPES: Mapping[str, str] = {
    "S": "VARCHAR",
    "N": "NUMBER(38, s)",
    "B": "BINARY",
    "BOOL": "BOOLEAN",
    "NULL": "NULL",
    "M": "VARIANT",
    "L": "VARIANT",
    "SS": "ARRAY",
    "NS": "ARRAY",
    "BS": "ARRAY",
}
# Wide enough to normalise any DynamoDB number without rounding (38 digits, exponents -130..125).
_EXACT = Context(prec=MAX_PRECISION + 2, Emin=-999, Emax=999)
_DESERIALIZER = TypeDeserializer()


def type_of(value: AttributeValue) -> str:
    """The DynamoDB type of an attribute value (``S``, ``N``, ...); :class:`ValueError` if it has none."""
    if len(value) != 1 or (kind := next(iter(value))) not in TYPES:
        raise ValueError(f"not a DynamoDB attribute value: {value!r}")
    return kind


def python_value(value: AttributeValue) -> Any:
    """The exact Python value: str, :class:`Decimal`, bytes, bool, None, dict, list, or a set."""
    decoded = _DESERIALIZER.deserialize(value)
    return _plain(decoded)


def _plain(value: Any) -> Any:
    if isinstance(value, Binary):
        return bytes(value.value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, set):
        return {_plain(v) for v in value}
    return value


def canonical(number: Decimal) -> Decimal:
    """The number without trailing zeros, and 0 for -0: equal numbers give equal values."""
    if not number.is_finite():
        raise ValueError(f"{number} is not a DynamoDB number")
    if number.is_zero():
        return Decimal(0)
    return number.normalize(_EXACT)


def scale_of(number: Decimal) -> int:
    """The digits after the point of the canonical number (0 for a whole number)."""
    return max(0, -int(canonical(number).as_tuple().exponent))


def fits_number(number: Decimal) -> bool:
    """Whether Snowflake's ``NUMBER(38, s)`` holds the number exactly, for some scale ``s`` <= 37."""
    exact = canonical(number)
    if exact.is_zero():
        return True
    digits, exponent = len(exact.as_tuple().digits), int(exact.as_tuple().exponent)
    scale = max(0, -exponent)
    whole_digits = max(0, digits + exponent)
    return scale <= MAX_SCALE and whole_digits + scale <= MAX_PRECISION


def number_text(number: Decimal) -> str:
    """The exact, canonical text: positional where NUMBER(38, s) fits, scientific (``1E+125``) otherwise."""
    exact = canonical(number)
    return format(exact, "f") if fits_number(exact) else str(exact)


def decimal_of(text: str) -> Decimal:
    """A DynamoDB number's wire text as the exact :class:`Decimal`."""
    number: Decimal = _DESERIALIZER.deserialize({"N": text})
    return number


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _bytes(value: Any) -> bytes:
    # boto3 sends bytes; a JSON wire document (e.g. the stream record as Spark read it) has base64.
    return base64.b64decode(value, validate=True) if isinstance(value, str) else bytes(value)


def _json_number(number: Decimal) -> str:
    # Positional text Snowflake parses exactly; otherwise the lossless form, a JSON string.
    text = number_text(number)
    return text if fits_number(number) else json.dumps(text)


def _json_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def to_json(value: AttributeValue) -> str:
    """One attribute value as JSON text for a Snowflake VARIANT, with every number exact.

    Maps have their keys sorted and sets their elements sorted, so the same value always gives the
    same text. Binary values are base64 strings; NULL is ``null``.
    """
    kind = type_of(value)
    inner = value[kind]
    if kind == "S":
        return _json_string(inner)
    if kind == "N":
        return _json_number(decimal_of(inner))
    if kind == "B":
        return _json_string(_base64(_bytes(inner)))
    if kind == "BOOL":
        return "true" if inner else "false"
    if kind == "NULL":
        return "null"
    if kind == "M":
        return item_to_json(inner)
    if kind == "L":
        return "[" + ",".join(to_json(v) for v in inner) + "]"
    if kind == "SS":
        return "[" + ",".join(_json_string(s) for s in sorted(set(inner))) + "]"
    if kind == "NS":
        numbers = sorted({canonical(decimal_of(n)) for n in inner})
        return "[" + ",".join(_json_number(n) for n in numbers) + "]"
    blobs = sorted({_bytes(b) for b in inner})  # BS
    return "[" + ",".join(_json_string(_base64(b)) for b in blobs) + "]"


def item_to_json(item: Mapping[str, AttributeValue]) -> str:
    """An item (or a map's content) as a JSON object text, keys sorted, numbers exact."""
    return "{" + ",".join(f"{_json_string(k)}:{to_json(item[k])}" for k in sorted(item)) + "}"


def text_of(value: AttributeValue) -> str | None:
    """The value as VARCHAR text: S as it is, N its exact text, BOOL ``true``/``false``, B base64,
    NULL None, anything else its JSON text (:func:`to_json`)."""
    kind = type_of(value)
    inner = value[kind]
    if kind == "S":
        return str(inner)
    if kind == "N":
        return number_text(decimal_of(inner))
    if kind == "B":
        return _base64(_bytes(inner))
    if kind == "BOOL":
        return "true" if inner else "false"
    if kind == "NULL":
        return None
    return to_json(value)


def binary_of(value: AttributeValue) -> bytes:
    """A B value's bytes (from bytes, or from the base64 text of a JSON wire document)."""
    return _bytes(value["B"])
