"""One application loads a destination: the newest to record a generation for it owns it."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow_kinesis_snowflake.core.load.ownership import Loader, owner_conflict, owner_refusal

EARLY, LATE = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC)


def loader(*names: str, at: datetime) -> Loader:
    return Loader(frozenset(names), at)


def test_a_destination_nobody_else_loaded_is_free() -> None:
    assert owner_conflict("app2", []) is None
    assert owner_conflict("app2", [loader("app2", at=EARLY)]) is None


def test_a_renamed_application_is_refused_while_the_old_one_owns_the_table() -> None:
    old = loader("app1", at=EARLY)
    assert owner_conflict("app2", [old]) == old


def test_the_newest_loader_owns_the_table_and_an_older_one_is_refused() -> None:
    old, new = loader("app1", at=EARLY), loader("app2", at=LATE)
    assert owner_conflict("app2", [old, new]) is None
    assert owner_conflict("app1", [old, new]) == new


def test_any_name_of_a_loader_is_its_own() -> None:
    # A Kinesis connector moved to a new application name by its reset is known by both names.
    reset = loader("app1", "app1-r1", at=LATE)
    assert owner_conflict("app1-r1", [reset]) is None
    assert owner_conflict("app1", [reset]) is None


def test_a_dropped_destination_may_be_started_anew_by_another_name() -> None:
    assert owner_conflict("app2", [loader("app1", at=LATE)], destination_exists=False) is None


def test_the_refusal_names_the_owner_the_harm_and_the_fixes() -> None:
    owner = Loader(frozenset({"app1"}), EARLY, "orders")
    text = owner_refusal("app2", "A.B.C", owner, what_a_second_load_does="would load it twice", fixes="Fix it.")
    assert text.startswith("destination A.B.C is loaded by application 'app1' (connector 'orders')")
    assert "application 'app2' has no progress of its own there" in text
    assert text.endswith("would load it twice. Nothing was read or recorded. Fix it.")
