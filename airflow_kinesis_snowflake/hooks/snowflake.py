"""The one place this provider connects to Snowflake from."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from airflow.providers.snowflake.hooks.snowflake import SnowflakeHook
from airflow.sdk.log import mask_secret
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from airflow_kinesis_snowflake.core.keys import load_private_key, private_key_der
from airflow_kinesis_snowflake.core.redaction import SECRET_PARAMS, secret_forms
from airflow_kinesis_snowflake.core.snowflake_limits import TIMEOUT_PARAMS, bounded
from airflow_kinesis_snowflake.get_provider_info import (
    SNOWFLAKE_CONN_TYPE,
    SNOWFLAKE_CONNECTION,
    field_behaviour,
)

ALLOWED_PROTOCOLS = ("https", "http")
# Extras naming the passphrase of an encrypted private key (the connector's own name too).
PASSPHRASE_EXTRAS = ("private_key_passphrase", "private_key_file_pwd")


def mask_secret_value(value: str) -> None:
    """Register ``value`` with Airflow's secret masker in every form it may be logged in: itself,
    JSON-escaped (as in ``SNOWFLAKE_CONNECTION_JSON``), and each line of a PEM key."""
    for form in secret_forms(value):
        mask_secret(form)


class KinesisSnowflakeHook(SnowflakeHook):
    """:class:`~airflow.providers.snowflake.hooks.snowflake.SnowflakeHook` that also honours a
    ``protocol`` extra, and bounds every request and statement.

    The Snowflake provider passes the ``host`` and ``port`` extras to the connector but not
    ``protocol``, so it can only speak HTTPS. This hook passes it through, which lets the same
    connection reach a Snowflake-compatible endpoint on plain HTTP (such as a local emulator).

    The connector's ``network_timeout``, ``login_timeout`` and ``socket_timeout`` come from the
    extras of those names, else from :data:`~airflow_kinesis_snowflake.core.snowflake_limits.DEFAULT_TIMEOUTS`,
    and the session's ``STATEMENT_TIMEOUT_IN_SECONDS`` from ``network_timeout`` unless the
    ``session_parameters`` extra sets it (:func:`~airflow_kinesis_snowflake.core.snowflake_limits.bounded`):
    a Snowflake that keeps failing fails the task instead of holding it for ever.

    Any Snowflake connection works; the connection type ``kinesis_snowflake_snowflake`` gives these
    extras fields of their own in the UI.
    """

    conn_type = SNOWFLAKE_CONN_TYPE
    hook_name = "Snowflake (Kinesis ingestion)"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The standard fields hidden (host and port: the Snowflake provider reads them from the extras)."""
        return field_behaviour(SNOWFLAKE_CONNECTION)

    def test_connection(self) -> tuple[bool, str]:  # type: ignore[override]  # DbApiHook's says None
        """Log in and run ``select 1``; the message names the connection, and on failure carries Snowflake's error."""
        result: Any = super().test_connection()
        ok, message = result
        return bool(ok), f"Snowflake connection {self.get_conn_id()!r}: {message}"

    def get_private_key(self) -> PrivateKeyTypes | None:
        """The private key of a key-pair connection, decrypted.

        As the Snowflake provider reads it (extra ``private_key_content`` or ``private_key_file``,
        the password as its passphrase), and also with the passphrase in the extra
        ``private_key_passphrase`` (or ``private_key_file_pwd``), which leaves the password empty.

        The key's text is registered with Airflow's secret masker, each of its lines too: Airflow
        registers ``private_key_content`` as a whole only, and never sees the content of
        ``private_key_file``.
        """
        extra = self.get_connection(self.get_conn_id()).extra_dejson
        content = self._get_field(extra, "private_key_content")
        path = self._get_field(extra, "private_key_file")
        file_content = Path(path).read_bytes() if path else None
        for text in (content, file_content.decode("utf-8", "replace") if file_content else None):
            if isinstance(text, str) and text:
                mask_secret_value(text)
        passphrase = next((extra[k] for k in PASSPHRASE_EXTRAS if extra.get(k)), None)
        if passphrase is None:
            return super().get_private_key()
        if content and path:
            raise ValueError(
                "The private_key_file and private_key_content extra fields are mutually exclusive. Please remove one."
            )
        if not (content or path):
            raise ValueError(
                f"connection {self.get_conn_id()!r} has a private key passphrase but no private_key_content "
                "or private_key_file extra"
            )
        key = file_content if file_content is not None else content
        try:
            return load_private_key(key, str(passphrase))
        except ValueError as err:
            raise ValueError(f"connection {self.get_conn_id()!r}: {err}") from None

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
        for name in TIMEOUT_PARAMS:
            if extra.get(name) not in ("", None):
                params[name] = extra[name]
        # Empty strings confuse the connector (an empty warehouse is sent as a name).
        params = {k: v for k, v in params.items() if v not in ("", None)}
        return bounded(params, f"connection {self.get_conn_id()!r}")

    def job_connection_params(self) -> dict[str, Any]:
        """Connector keyword arguments that survive JSON, for the Spark job.

        A key-pair connection's private key, whichever form the Snowflake provider returns it in
        (DER bytes, or a key object with older releases), becomes ``private_key_der_base64``:
        unencrypted PKCS#8 DER in base64. Every secret value, that one included, is registered with
        Airflow's secret masker before it is returned, also in its JSON-escaped form.
        """
        params = dict(self._get_conn_params())
        key = params.pop("private_key", None)
        if key is not None:
            try:
                der = private_key_der(key)
            except ValueError as err:
                raise ValueError(f"connection {self.get_conn_id()!r}: {err}") from None
            params["private_key_der_base64"] = base64.b64encode(der).decode("ascii")
        params.pop("application", None)
        for name in SECRET_PARAMS:
            value = params.get(name)
            if isinstance(value, str) and value:
                mask_secret_value(value)
        return params

    def account_and_region(self) -> tuple[str | None, str | None]:
        """The connection's ``account`` and ``region`` extras, read without touching its credentials."""
        extra = self.get_connection(self.get_conn_id()).extra_dejson
        account = self.account or self._get_field(extra, "account")
        region = self.region or self._get_field(extra, "region")
        return account or None, region or None
