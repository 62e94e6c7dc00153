"""The connector's service user's RSA public key, read at run time from an Airflow Variable or connection.

Only the public key is ever read; provisioning shows it by its fingerprint alone.
"""

from __future__ import annotations

from airflow.sdk import Variable

from airflow_kinesis_snowflake.compat import AirflowException, BaseHook


def read_public_key(variable: str | None, conn_id: str | None) -> str | None:
    """The RSA public key PEM from the Variable ``variable`` or the connection ``conn_id``; None when neither is set.

    :param variable: an Airflow Variable holding the PEM.
    :param conn_id: an Airflow connection holding it, in its extra ``public_key`` or, failing that, its password.
    :raises AirflowException: when both are set, or the one set holds no key.
    """
    if variable and conn_id:
        raise AirflowException("set only one of public_key_variable and public_key_conn_id")
    if variable:
        value = Variable.get(variable, default=None)
        if not value:
            raise AirflowException(
                f"Airflow Variable {variable!r} is not set; store the service user's RSA public key PEM in it"
            )
        return str(value)
    if conn_id:
        connection = BaseHook.get_connection(conn_id)
        value = connection.extra_dejson.get("public_key") or connection.password
        if not value:
            raise AirflowException(
                f"connection {conn_id!r} holds no public key: put the RSA public key PEM "
                "in its extra 'public_key' or in its password"
            )
        return str(value)
    return None
