"""The one place this provider connects to Snowflake from."""

from __future__ import annotations

import base64
from typing import Any

from airflow.providers.snowflake.hooks.snowflake import SnowflakeHook
from cryptography.hazmat.primitives import serialization

ALLOWED_PROTOCOLS = ("https", "http")


class KinesisSnowflakeHook(SnowflakeHook):
    """:class:`~airflow.providers.snowflake.hooks.snowflake.SnowflakeHook` that also honours a
    ``protocol`` extra.

    The Snowflake provider passes the ``host`` and ``port`` extras to the connector but not
    ``protocol``, so it can only speak HTTPS. This hook passes it through, which lets the same
    connection reach a Snowflake-compatible endpoint on plain HTTP (such as a local emulator).
    """

    hook_name = "Snowflake (Kinesis ingestion)"

    def _get_conn_params(self) -> dict[str, Any]:
        params: dict[str, Any] = dict(super()._get_conn_params())
        extra = self.get_connection(self.get_conn_id()).extra_dejson
        protocol = extra.get("protocol")
        if protocol:
            if protocol not in ALLOWED_PROTOCOLS:
                raise ValueError(
                    f"connection {self.get_conn_id()!r}: extra 'protocol' must be one of "
                    f"{', '.join(ALLOWED_PROTOCOLS)}, got {protocol!r}"
                )
            params["protocol"] = protocol
        if params.get("port"):
            params["port"] = int(params["port"])
        # Empty strings confuse the connector (an empty warehouse is sent as a name).
        return {k: v for k, v in params.items() if v not in ("", None)}

    def job_connection_params(self) -> dict[str, Any]:
        """Connector keyword arguments that survive JSON, for the Spark job's environment."""
        params = dict(self._get_conn_params())
        key = params.pop("private_key", None)
        if key is not None:
            params["private_key_der_base64"] = base64.b64encode(
                key.private_bytes(
                    encoding=serialization.Encoding.DER,
                    format=serialization.PrivateFormat.PKCS8,
                    encryption_algorithm=serialization.NoEncryption(),
                )
            ).decode("ascii")
        params.pop("application", None)
        return params
