"""Parameters of the maintenance operators as a template renders them, checked before any call.

A Param rendered through a Jinja template arrives as text (``"False"``, ``"600"``); these turn it
back into a value or say which parameter is wrong. Pure functions: the operators translate
:class:`ParameterError` into their framework's error.
"""

from __future__ import annotations

import warnings
from typing import TypeVar

from airflow_kinesis_snowflake.core.admin.window import AdminError

T = TypeVar("T")


class ParameterError(AdminError, ValueError):
    """A parameter has a value that is not allowed; the message names the parameter."""


def as_bool(value: bool | str, name: str) -> bool:
    """A flag given as a bool or as rendered by a template (``True``/``False``, any case)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ParameterError(f"{name} must be true or false, not {value!r}")


def as_number(value: float | int | str, name: str, *, minimum: float = 0) -> float:
    """A number given as a number or as rendered text, at least ``minimum``."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a number, not {value!r}") from None
    if number < minimum:
        raise ParameterError(f"{name} must be at least {minimum:g}, not {value!r}")
    return number


def renamed(
    new: T | None,
    old: T | None,
    *,
    new_name: str,
    old_name: str,
    default: T,
    category: type[DeprecationWarning] = DeprecationWarning,
) -> T:
    """The value of a renamed constructor argument; the old keyword still works, with a warning.

    :param new: the value given under the new name (None: not given).
    :param old: the value given under the deprecated name (None: not given).
    :param default: the value when neither is given.
    :param category: the warning issued for the old name.
    :raises ValueError: when both are given.
    """
    if old is None:
        return default if new is None else new
    if new is not None:
        raise ValueError(f"set only {new_name}: {old_name} is its deprecated name")
    warnings.warn(f"{old_name} is deprecated; use {new_name}", category, stacklevel=3)
    return old
