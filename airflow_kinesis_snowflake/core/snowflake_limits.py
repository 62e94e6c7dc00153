"""Bounds on every Snowflake request and statement, so that no task waits on Snowflake for ever.

snowflake-connector-python retries a request that fails with a retryable answer (HTTP 5xx, 429, a
broken connection) with backoff, for as long as its ``network_timeout`` allows, and without one
for ever. Each connection this provider makes (the Airflow worker's, through
:class:`~airflow_kinesis_snowflake.hooks.snowflake.KinesisSnowflakeHook`, and the Spark job's,
through :meth:`~airflow_kinesis_snowflake.core.job.JobCredentials.connect_snowflake`) therefore
gets the connector's own bounds, unless the connection sets them:

* ``network_timeout``: how long one request is retried in all; the connector also cancels a
  statement still running after that long. It is the bound on any one statement.
* ``login_timeout``: how long a login is retried.
* ``socket_timeout``: how long one HTTP request waits to connect and for its answer (Snowflake
  holds a query's answer up to 45 s before it says "still running").
* the session parameter ``STATEMENT_TIMEOUT_IN_SECONDS``: Snowflake's own bound on a statement, a
  minute inside ``network_timeout`` so that Snowflake's message, naming it, arrives first, and so
  that a statement whose client is gone does not run on for Snowflake's default of two days.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEFAULT_TIMEOUTS = {"network_timeout": 1800, "login_timeout": 120, "socket_timeout": 60}
TIMEOUT_PARAMS = tuple(DEFAULT_TIMEOUTS)
STATEMENT_TIMEOUT = "STATEMENT_TIMEOUT_IN_SECONDS"
# How much sooner than the connector Snowflake ends a statement, when network_timeout allows it.
STATEMENT_MARGIN_SECONDS = 60


def seconds(value: Any, name: str, where: str) -> int:
    """``value`` as a whole number of seconds above 0 (an int, or its text as extras may hold it)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where}: {name!r} must be a whole number of seconds above 0, got {value!r}")
    return value


def statement_timeout(network_timeout: int) -> int:
    """The ``STATEMENT_TIMEOUT_IN_SECONDS`` that goes with a connection's ``network_timeout``."""
    if network_timeout > 2 * STATEMENT_MARGIN_SECONDS:
        return network_timeout - STATEMENT_MARGIN_SECONDS
    return network_timeout


def bounded(params: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Connector keyword arguments ``params`` with every timeout set: the defaults where absent.

    A ``STATEMENT_TIMEOUT_IN_SECONDS`` in ``session_parameters`` (in any case) is the connection's
    own choice, kept as it is.

    :param where: names the connection in an error, e.g. ``"connection 'snowflake_default'"``.
    :raises ValueError: a timeout that is not a whole number of seconds above 0.
    """
    result = dict(params)
    for name, default in DEFAULT_TIMEOUTS.items():
        given = result.get(name)
        result[name] = default if given is None else seconds(given, name, where)
    session = dict(result.get("session_parameters") or {})
    if not any(str(key).upper() == STATEMENT_TIMEOUT for key in session):
        session[STATEMENT_TIMEOUT] = statement_timeout(result["network_timeout"])
    result["session_parameters"] = session
    return result
