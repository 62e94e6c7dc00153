"""Parameters as templates render them, the maintenance owner, and renamed arguments."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest

from airflow_kinesis_snowflake.core.admin.cleanup_run import parse_cleanup_request
from airflow_kinesis_snowflake.core.admin.params import ParameterError, as_bool, as_number, renamed
from airflow_kinesis_snowflake.core.admin.window import AdminError, maintenance_owner


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), ("True", True), (" false ", False), ("1", True), ("NO", False), ("yes", True)],
)
def test_flags_as_rendered(value: bool | str, expected: bool) -> None:
    assert as_bool(value, "preview_only") is expected


def test_a_flag_that_is_neither_is_named() -> None:
    with pytest.raises(ParameterError, match=r"^preview_only must be true or false, not 'maybe'$"):
        as_bool("maybe", "preview_only")
    assert issubclass(ParameterError, AdminError) and issubclass(ParameterError, ValueError)


def test_numbers_as_rendered() -> None:
    assert as_number("600", "timeout") == 600.0
    assert as_number(2.5, "timeout", minimum=1) == 2.5
    with pytest.raises(ParameterError, match=r"^timeout must be at least 1, not 0$"):
        as_number(0, "timeout", minimum=1)
    with pytest.raises(ParameterError, match=r"^timeout must be a number, not None$"):
        as_number(None, "timeout")  # type: ignore[arg-type]


def test_the_owner_names_the_task_try_or_manual() -> None:
    ti = SimpleNamespace(dag_id="kinesis_snowflake_orders_reset", run_id="manual__1", try_number=2)

    owner = maintenance_owner("reset", ti)
    assert owner.startswith("reset/kinesis_snowflake_orders_reset/manual__1/2/") and len(owner.rsplit("/")[-1]) == 8
    assert maintenance_owner("cleanup").startswith("cleanup/manual/")
    assert maintenance_owner("cleanup") != maintenance_owner("cleanup")


def test_a_renamed_argument_takes_the_new_name_and_warns_for_the_old() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert renamed(None, None, new_name="preview_only", old_name="dry_run", default=False) is False
        assert renamed(True, None, new_name="preview_only", old_name="dry_run", default=False) is True
    with pytest.warns(DeprecationWarning, match="^dry_run is deprecated; use preview_only$"):
        assert renamed(None, True, new_name="preview_only", old_name="dry_run", default=False) is True
    with pytest.raises(ValueError, match="set only preview_only: dry_run is its deprecated name"):
        renamed(True, False, new_name="preview_only", old_name="dry_run", default=False)


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        ('["orders-*", " clicks "]', ("orders-*", "clicks")),
        ("orders-*, clicks", ("orders-*", "clicks")),
        (["*"], ("*",)),
    ],
)
def test_clean_up_patterns_as_rendered(patterns: str | list[str], expected: tuple[str, ...]) -> None:
    request = parse_cleanup_request(
        retention_days="1.5", application_name_patterns=patterns, preview_only="False", confirm="DELETE"
    )

    assert request.patterns == expected
    assert (request.retention_seconds, request.preview_only, request.confirm) == (1.5 * 86400, False, "DELETE")


@pytest.mark.parametrize(
    ("patterns", "message"),
    [(" , ", "^application_name_patterns is empty"), ("[orders", "^application_name_patterns is not a list")],
)
def test_bad_clean_up_patterns_are_named(patterns: str, message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        parse_cleanup_request(retention_days=7, application_name_patterns=patterns, preview_only=True, confirm=None)
