"""Airflow names that moved between Airflow 3 minor versions, imported from where the installed Airflow has them.

The package imports, and its unit tests pass, on Airflow 3.0.6 and later (the oldest Airflow 3 a
managed scheduler offers); the lowest version it supports is the floor in ``pyproject.toml``, which the
lower-bounds check proves (``docs/install.md``). Names that Airflow's task SDK gained after 3.0
(its exceptions, ``BaseHook``, ``redact``, ``TriggerRule``, ``Stats``) come through the common.compat
provider, which tries the newest location first and falls back to the older one; the few it does not
carry are looked up here the same way.
Every module of the package imports these names from here, never from their moving homes.
"""

from __future__ import annotations

import importlib
import re
from typing import TYPE_CHECKING, Any

import airflow
from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    BaseHook,
    ParamValidationError,
    Stats,
    TaskDeferred,
    TriggerRule,
    conf,
    redact,
)

if TYPE_CHECKING:
    from airflow.sdk import CronTriggerTimetable
    from airflow.sdk.exceptions import AirflowTimetableInvalid

__all__ = [
    "AIRFLOW_VERSION",
    "AirflowException",
    "AirflowFailException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "AirflowTimetableInvalid",
    "BaseHook",
    "CronTriggerTimetable",
    "ParamValidationError",
    "Stats",
    "TaskDeferred",
    "TriggerRule",
    "airflow_at_least",
    "conf",
    "redact",
]


def _release(version: str) -> tuple[int, int, int]:
    """The ``(major, minor, patch)`` of an Airflow version (``3.1.0+composer`` and ``3.2.0rc1`` included)."""
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if found is None:
        raise ValueError(f"not an Airflow version: {version!r} (expected major.minor.patch, e.g. 3.1.0)")
    major, minor, patch = (int(part) for part in found.groups())
    return major, minor, patch


#: The installed Airflow's ``(major, minor, patch)``.
AIRFLOW_VERSION = _release(airflow.__version__)


def airflow_at_least(version: str) -> bool:
    """Whether the installed Airflow is ``version`` or later.

    :param version: an Airflow version, e.g. ``"3.1.0"``.
    """
    return AIRFLOW_VERSION >= _release(version)


def _first(name: str, *modules: str) -> Any:
    """``name`` from the first of ``modules`` that has it (newest location first).

    :param name: the attribute to import.
    :param modules: the modules that held it, newest first.
    """
    for module in modules:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"none of {', '.join(modules)} has {name} (Airflow {airflow.__version__})")


if not TYPE_CHECKING:
    # Airflow 3.2 moved timetables and their error into the task SDK; before it they are core's.
    CronTriggerTimetable = _first("CronTriggerTimetable", "airflow.sdk", "airflow.timetables.trigger")
    AirflowTimetableInvalid = _first("AirflowTimetableInvalid", "airflow.sdk.exceptions", "airflow.exceptions")
