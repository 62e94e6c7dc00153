"""Every Snowflake connection's requests and statements are bounded: defaults, overrides, refusals."""

from __future__ import annotations

import json

import pytest

from airflow_kinesis_snowflake.core.engine.credentials import snowflake_params_from_secret
from airflow_kinesis_snowflake.core.snowflake_limits import DEFAULT_TIMEOUTS, bounded, statement_timeout


def test_a_connection_that_names_no_bound_gets_them_all() -> None:
    params = bounded({"account": "a", "user": "u", "session_parameters": None}, "connection 'c'")

    assert params == {
        "account": "a",
        "user": "u",
        "network_timeout": 1800,
        "login_timeout": 120,
        "socket_timeout": 60,
        "session_parameters": {"STATEMENT_TIMEOUT_IN_SECONDS": 1740},
    }
    assert bounded(params, "connection 'c'") == params  # the job applies them again: nothing changes


def test_a_connections_own_bounds_are_kept_and_the_statement_timeout_follows_network_timeout() -> None:
    given = {"network_timeout": "7200", "login_timeout": 30, "session_parameters": {"QUERY_TAG": "ingest"}}

    params = bounded(given, "connection 'c'")

    assert (params["network_timeout"], params["login_timeout"], params["socket_timeout"]) == (7200, 30, 60)
    assert params["session_parameters"] == {"QUERY_TAG": "ingest", "STATEMENT_TIMEOUT_IN_SECONDS": 7140}
    assert given["session_parameters"] == {"QUERY_TAG": "ingest"}  # the caller's dict is left alone
    # A statement timeout the connection sets itself, in any case, is its own choice.
    own = bounded({"session_parameters": {"statement_timeout_in_seconds": 0}}, "connection 'c'")
    assert own["session_parameters"] == {"statement_timeout_in_seconds": 0}


def test_a_short_network_timeout_is_the_statement_timeout_too() -> None:
    assert statement_timeout(120) == 120
    assert statement_timeout(121) == 61
    assert statement_timeout(DEFAULT_TIMEOUTS["network_timeout"]) == 1740


@pytest.mark.parametrize("value", [0, -5, "0", "ten", 2.5, True, [60]])
def test_a_bound_that_is_not_a_whole_number_of_seconds_above_0_is_refused(value: object) -> None:
    with pytest.raises(
        ValueError, match=r"connection 'snowflake_default': 'network_timeout' must be a whole number of seconds above 0"
    ):
        bounded({"network_timeout": value}, "connection 'snowflake_default'")


def test_the_jobs_connection_from_a_secret_is_bounded_and_a_bad_bound_names_the_secret() -> None:
    params = snowflake_params_from_secret(json.dumps({"account": "a", "user": "u", "socket_timeout": 90}), "s")
    assert (params["network_timeout"], params["login_timeout"], params["socket_timeout"]) == (1800, 120, 90)

    with pytest.raises(ValueError, match="secret 's': 'login_timeout' must be a whole number"):
        snowflake_params_from_secret(json.dumps({"account": "a", "login_timeout": "soon"}), "s")
