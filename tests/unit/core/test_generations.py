"""Which generation an ingest run reads with: Snowflake's record over DynamoDB's cache, without I/O."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from airflow_kinesis_snowflake.core.leases import IdentityError, StartPosition
from airflow_kinesis_snowflake.core.maintenance import GenerationChoice, MaintenanceError, choose_generation
from airflow_kinesis_snowflake.core.positions import InitialPosition
from airflow_kinesis_snowflake.core.snowflake_sink import GenerationReason, GenerationRecord

TRIM = StartPosition(InitialPosition.TRIM_HORIZON)
RESET_AT = StartPosition(InitialPosition.AT_TIMESTAMP, datetime(2026, 1, 31, tzinfo=UTC))
CREATED = "2026-01-01T00:00:00+00:00"


def record(
    application: str, generation: str, reason: GenerationReason, start: StartPosition | None = TRIM
) -> GenerationRecord:
    return GenerationRecord("orders-app", application, generation, reason, start, "orders", "arn:s", CREATED)


def choose(**kwargs: object) -> GenerationChoice:
    arguments: dict[str, object] = {
        "configured": "orders-app",
        "active": "orders-app",
        "table_generation": "g1",
        "recorded": None,
        "ledger_generations": (),
        "connector_id": "orders",
        "start": TRIM,
        "stream_arn": "arn:s",
        "stream_created_at": CREATED,
    }
    return choose_generation(**(arguments | kwargs))  # type: ignore[arg-type]


def test_the_first_run_records_what_dynamodb_has() -> None:
    choice = choose()
    assert (choice.application_name, choice.generation_id, choice.adopted) == ("orders-app", "g1", False)
    assert choice.record == record("orders-app", "g1", GenerationReason.FIRST_START)


def test_a_recorded_generation_dynamodb_agrees_with_is_used_as_it_is() -> None:
    choice = choose(recorded=record("orders-app", "g1", GenerationReason.FIRST_START))
    assert (choice.generation_id, choice.adopted, choice.record) == ("g1", False, None)


def test_a_recreated_table_adopts_the_recorded_generation() -> None:
    # The lease table was deleted and the ingest DAG created it again, with a new generation.
    choice = choose(table_generation="g2", recorded=record("orders-app", "g1", GenerationReason.FIRST_START))
    assert (choice.application_name, choice.generation_id, choice.adopted, choice.record) == (
        "orders-app",
        "g1",
        True,
        None,
    )
    assert choice.start == TRIM


def test_a_lost_pointer_follows_the_recorded_new_name() -> None:
    # The configured table carried superseded_by; it was lost and created again without it.
    recorded = record("orders-app-v2", "g2", GenerationReason.RESET_NEW_APPLICATION_NAME, RESET_AT)
    choice = choose(active="orders-app", table_generation="g9", recorded=recorded)
    assert (choice.application_name, choice.generation_id, choice.adopted) == ("orders-app-v2", "g2", True)
    assert choice.start == RESET_AT


def test_a_broken_pointer_is_repaired_from_the_record() -> None:
    recorded = record("orders-app-v2", "g2", GenerationReason.RESET_NEW_APPLICATION_NAME)
    choice = choose(active=None, table_generation=None, recorded=recorded)
    assert (choice.application_name, choice.generation_id, choice.adopted) == ("orders-app-v2", "g2", True)


def test_a_reset_recorded_before_its_table_was_lost_still_starts_over() -> None:
    recorded = record("orders-app", "g2", GenerationReason.RESET_DELETE_TABLE, RESET_AT)
    choice = choose(table_generation="g3", recorded=recorded, ledger_generations=("g1",))
    assert (choice.generation_id, choice.start) == ("g2", RESET_AT)


def test_nothing_recorded_and_a_table_the_ledger_does_not_know_adopts_the_ledger() -> None:
    # A table lost before the generations table existed: the ledger's newest generation wins.
    choice = choose(table_generation="g3", ledger_generations=("g2", "g1"))
    assert (choice.generation_id, choice.adopted) == ("g2", True)
    assert choice.record == record("orders-app", "g2", GenerationReason.ADOPTED, None)


def test_nothing_recorded_and_a_table_the_ledger_knows_is_recorded() -> None:
    choice = choose(table_generation="g1", ledger_generations=("g1",))
    assert (choice.generation_id, choice.adopted) == ("g1", False)


def test_nothing_recorded_and_no_table_is_an_error() -> None:
    with pytest.raises(MaintenanceError, match="run the create_lease_table task first"):
        choose(active=None, table_generation=None)


def test_adopting_a_generation_of_a_stream_since_recreated_is_refused() -> None:
    with pytest.raises(IdentityError, match=r"deleted and created again.*reset DAG"):
        choose(
            table_generation="g2",
            recorded=record("orders-app", "g1", GenerationReason.FIRST_START),
            stream_created_at="2026-02-01T00:00:00+00:00",
        )
