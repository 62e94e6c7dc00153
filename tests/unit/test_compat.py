"""The names that moved between Airflow 3 minor versions come from where the installed Airflow has them, so
the package imports and runs on every Airflow 3 version it supports (3.0.6 and later)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import airflow_kinesis_snowflake
from airflow_kinesis_snowflake import compat
from airflow_kinesis_snowflake.compat import AirflowTimetableInvalid, CronTriggerTimetable, airflow_at_least

# The Spark job's modules run on the cluster, without Airflow; the control plane test imports them.
WITHOUT_AIRFLOW = ("airflow_kinesis_snowflake.spark_jobs",)


def package_modules() -> list[str]:
    found = pkgutil.walk_packages(airflow_kinesis_snowflake.__path__, prefix="airflow_kinesis_snowflake.")
    return sorted(m.name for m in found if not m.name.startswith(WITHOUT_AIRFLOW))


@pytest.mark.parametrize("module", package_modules())
def test_every_module_of_the_package_imports_on_this_airflow(module: str) -> None:
    importlib.import_module(module)


@pytest.mark.parametrize("name", compat.__all__)
def test_every_name_of_compat_is_there(name: str) -> None:
    assert getattr(compat, name) is not None


@pytest.mark.parametrize(
    ("version", "expected"),
    [("3.0.6", (3, 0, 6)), ("3.1.0+composer", (3, 1, 0)), ("3.2.0rc1", (3, 2, 0)), ("3.10.2", (3, 10, 2))],
)
def test_an_airflow_version_is_its_release_numbers(version: str, expected: tuple[int, int, int]) -> None:
    assert compat._release(version) == expected


def test_a_version_that_is_not_one_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="not an Airflow version: '3'"):
        compat._release("3")


def test_the_installed_airflow_is_at_least_itself_and_older_versions_not_newer_ones() -> None:
    major, minor, patch = compat.AIRFLOW_VERSION
    assert airflow_at_least(f"{major}.{minor}.{patch}") and airflow_at_least("3.0.0")
    assert not airflow_at_least(f"{major}.{minor + 1}.0") and not airflow_at_least(f"{major}.{minor}.{patch + 1}")


def test_the_cron_timetable_of_this_airflow_rejects_a_bad_expression_with_its_error() -> None:
    CronTriggerTimetable("*/5 * * * *", timezone="UTC").validate()
    with pytest.raises(AirflowTimetableInvalid):
        CronTriggerTimetable("61 * * * *", timezone="UTC").validate()


def test_a_name_no_module_has_is_an_import_error_naming_the_modules() -> None:
    with pytest.raises(ImportError, match=r"none of airflow\.sdk, airflow\.exceptions has NoSuchName"):
        compat._first("NoSuchName", "airflow.sdk", "airflow.exceptions")
