"""Which generation an ingest run reads with: Snowflake's record over DynamoDB's cache, without I/O."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from airflow_kinesis_snowflake.core.model import GenerationReason, GenerationRecord, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.state.errors import IdentityError, MaintenanceError
from airflow_kinesis_snowflake.core.state.generations import GenerationChoice, choose_generation, plan_adoption
from airflow_kinesis_snowflake.core.state.metadata import TableMarks

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
    assert choice.record == record("orders-app", "g2", GenerationReason.ADOPTED, TRIM)


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


# -- a reset or restore that recorded its intent and stopped before it changed DynamoDB ----------


def stopped(reason: GenerationReason, application: str = "orders-app", replaces: str = "g1") -> GenerationRecord:
    return replace(record(application, "g2", reason, RESET_AT), replaces=replaces)


def test_a_delete_table_reset_stopped_before_deleting_the_table_is_withdrawn() -> None:
    # The table still holds g1 and its leases: switching it to g2 would drop g1's ledger marks.
    choice = choose(recorded=stopped(GenerationReason.RESET_DELETE_TABLE), recorded_table_generation="g1")
    assert (choice.application_name, choice.generation_id, choice.adopted) == ("orders-app", "g1", False)
    assert choice.record == record("orders-app", "g1", GenerationReason.RESET_WITHDRAWN)
    assert "stopped before it changed DynamoDB" in choice.why


def test_a_restore_stopped_before_writing_another_table_is_withdrawn_to_the_active_one() -> None:
    recorded = stopped(GenerationReason.RESTORE, application="orders-app-old", replaces="g0")
    choice = choose(active="orders-app-v2", table_generation="g5", recorded=recorded, recorded_table_generation="g0")
    assert (choice.application_name, choice.generation_id, choice.adopted) == ("orders-app-v2", "g5", False)
    assert choice.record is not None and choice.record.reason is GenerationReason.RESET_WITHDRAWN


def test_a_stopped_reset_with_no_table_to_go_on_with_is_an_error() -> None:
    recorded = stopped(GenerationReason.RESTORE, application="orders-app-old", replaces="g0")
    with pytest.raises(MaintenanceError, match="trigger the reset or restore again"):
        choose(active=None, table_generation=None, recorded=recorded, recorded_table_generation="g0")


def test_a_reset_whose_table_was_deleted_and_created_again_is_carried_out() -> None:
    # The table holds neither the replaced generation nor the recorded one: it was recreated.
    choice = choose(
        table_generation="g3", recorded=stopped(GenerationReason.RESET_DELETE_TABLE), recorded_table_generation="g3"
    )
    assert (choice.generation_id, choice.adopted, choice.start) == ("g2", True, RESET_AT)


def adopted(generation: str = "g2") -> GenerationChoice:
    return GenerationChoice("orders-app", generation, TRIM, True, None, "adopted")


def marks(generation: str, superseded_by: str | None = None) -> TableMarks:
    return TableMarks("orders-app", "orders-app", "orders", generation, "", superseded_by=superseded_by)


def test_adopting_into_a_table_with_another_generations_leases_catches_them_up_first() -> None:
    plan = plan_adoption(
        adopted(), configured="orders-app", table=marks("g1"), has_leases=True, chain=("orders-app",), existing=()
    )
    assert (plan.create, plan.catch_up, plan.set_generation) == (False, "g1", True)


def test_adopting_into_a_table_without_leases_switches_it_directly() -> None:
    plan = plan_adoption(
        adopted(), configured="orders-app", table=marks("g1"), has_leases=False, chain=("orders-app",), existing=()
    )
    assert (plan.catch_up, plan.set_generation) == (None, True)


def test_adopting_into_a_missing_table_creates_it_and_points_the_configured_table_at_it() -> None:
    choice = replace(adopted(), application_name="orders-app-v2")
    plan = plan_adoption(
        choice, configured="orders-app", table=None, has_leases=False, chain=("orders-app",), existing=("orders-app",)
    )
    assert (plan.create, plan.catch_up, plan.set_generation, plan.point) == (True, None, False, ("orders-app",))


# -- where shards without a ledger mark start in an adopted generation -----------------------------

LATEST_NOW = StartPosition(InitialPosition.AT_TIMESTAMP, datetime(2026, 3, 1, tzinfo=UTC))  # LATEST, resolved now


def test_an_adoption_from_the_ledger_starts_unmarked_shards_at_the_oldest_record_not_now() -> None:
    # A LATEST connector whose table was lost: a quiet shard has no mark, and was never loaded.
    choice = choose(table_generation="g3", ledger_generations=("g2",), start=LATEST_NOW)
    assert choice.start == TRIM
    assert choice.record is not None and choice.record.start == TRIM


def test_a_recorded_row_without_a_start_is_adopted_from_the_oldest_record_not_now() -> None:
    recorded = record("orders-app", "g2", GenerationReason.ADOPTED, None)
    choice = choose(table_generation="g3", recorded=recorded, start=LATEST_NOW)
    assert (choice.generation_id, choice.adopted, choice.start) == ("g2", True, TRIM)


# -- one application name, one destination ---------------------------------------------------------


def test_another_connectors_recorded_application_name_is_refused_naming_both() -> None:
    # The lease table was lost; the second connector of the schema must not adopt the first one's marks.
    recorded = replace(record("orders-app", "g1", GenerationReason.FIRST_START), destination="ANALYTICS.RAW.ORDERS")
    with pytest.raises(IdentityError) as refused:
        choose(
            active="orders-app",
            table_generation="g7",
            recorded=recorded,
            connector_id="refunds",
            destination="ANALYTICS.RAW.REFUNDS",
        )
    message = str(refused.value)
    assert "'orders', which loads ANALYTICS.RAW.ORDERS" in message
    assert "'refunds' loads ANALYTICS.RAW.REFUNDS" in message
    assert "needs no change; give connector 'refunds' an application_name of its own" in message


def test_the_same_connector_recorded_with_another_destination_is_told_so_and_how_to_go_on() -> None:
    recorded = replace(record("orders-app", "g1", GenerationReason.FIRST_START), destination="ANALYTICS.RAW.ORDERS")
    with pytest.raises(IdentityError) as refused:
        choose(recorded=recorded, connector_id="orders", destination="ANALYTICS.RAW.ORDERS_V2")
    message = str(refused.value)
    assert message.startswith(
        "connector 'orders' loaded ANALYTICS.RAW.ORDERS under application name 'orders-app', and its connector "
        "file now names ANALYTICS.RAW.ORDERS_V2. One application name serves one destination (the ledger's marks"
    )
    assert "give connector 'orders' a new application_name" in message and "set the destination back" in message
    assert "needs no change" not in message and "(unknown)" not in message


def test_the_recorded_destination_is_the_connectors_own() -> None:
    recorded = replace(record("orders-app", "g1", GenerationReason.FIRST_START), destination="ANALYTICS.RAW.ORDERS")
    choice = choose(table_generation="g7", recorded=recorded, destination="ANALYTICS.RAW.ORDERS")
    assert (choice.generation_id, choice.adopted) == ("g1", True)


def test_the_first_record_names_the_destination() -> None:
    choice = choose(destination="ANALYTICS.RAW.ORDERS")
    assert choice.record is not None and choice.record.destination == "ANALYTICS.RAW.ORDERS"
