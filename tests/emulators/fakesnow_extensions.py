"""Close gaps between fakesnow and Snowflake, inside the fakesnow server process.

* COPY INTO with a transformation (``FROM (SELECT $1:key ... FROM @stage)``) over JSON files:
  Snowflake reads each line as one VARIANT ``$1`` and evaluates the paths against it; fakesnow
  0.12 only maps ``$1:key`` to a column of that name, which JSON files don't have.
"""

from __future__ import annotations

from typing import Any

from fakesnow import copy_into
from sqlglot import exp

_DOLLAR_ONE = exp.Parameter(this=exp.Literal(this="1", is_string=False))
_original_inserts = copy_into._inserts


def _json_transform_inserts(expr: exp.Copy, params: Any, urls: list[str], parquet_info: Any = None) -> list[Any]:
    from_ = expr.args["files"][0]
    if not (isinstance(from_, exp.Subquery) and isinstance(params.file_format, copy_into.ReadJSON)):
        return _original_inserts(expr, params, urls, parquet_info)
    select = from_.this.copy()
    # Each line is one JSON value: $1 is the whole of it, as a VARIANT.
    variant = exp.Cast(this=exp.column("json"), to=exp.DataType.build("JSON"))
    for parameter in list(select.find_all(exp.Parameter)):
        if parameter == _DOLLAR_ONE:
            parameter.replace(variant.copy())
    return [
        exp.Insert(
            this=expr.this,
            expression=exp.Select(expressions=select.expressions).from_(
                exp.Table(this=params.file_format.read_expression(url))
            ),
            by_name=False,
        )
        for url in urls
    ]


def install() -> None:
    copy_into._inserts = _json_transform_inserts
