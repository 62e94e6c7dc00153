"""KinesisSnowflakeHook reaches the fakesnow server over HTTP through the `protocol` extra."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from tests.emulators import Emulators

pytestmark = pytest.mark.integration


def test_protocol_extra_reaches_the_connector(aws_connections: Emulators) -> None:
    hook = KinesisSnowflakeHook(snowflake_conn_id="snowflake_default")
    params = hook.job_connection_params()
    assert params["protocol"] == "http" and params["port"] == aws_connections.fakesnow_port
    conn = hook.get_conn()
    try:
        cur = conn.cursor()
        cur.execute("SELECT 41 + 1")
        assert cur.fetchone() == (42,)
    finally:
        conn.close()


def test_unknown_protocol_is_refused(aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = aws_connections.snowflake_connection()
    bad["extra"]["protocol"] = "ftp"
    monkeypatch.setenv("AIRFLOW_CONN_SNOWFLAKE_BAD", json.dumps(bad))
    with pytest.raises(ValueError, match="extra 'protocol' must be one of https, http"):
        KinesisSnowflakeHook(snowflake_conn_id="snowflake_bad").get_conn()


def test_connection_test_passes_against_the_emulator(aws_connections: Emulators) -> None:
    hook = KinesisSnowflakeHook(snowflake_conn_id="snowflake_default")
    result: Any = hook.test_connection()  # type: ignore[func-returns-value]
    assert result == (True, "Connection successfully tested")
