"""Submit the ingestion job without a secret on the spark-submit command line or in Spark settings."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk.exceptions import AirflowException

CLIENT = "client"
CLUSTER = "cluster"
CONNECTIONS_DOC = "docs/connections.md"


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)


class KinesisJobSubmitHook(SparkSubmitHook):
    """:class:`~airflow.providers.apache.spark.hooks.spark_submit.SparkSubmitHook` for the ingestion job.

    The Spark provider's ``env_vars`` are turned into ``--conf spark.yarn.appMasterEnv.*`` (YARN)
    or ``spark.kubernetes.driverEnv.*`` (Kubernetes) settings, which show on the command line, in
    the Spark UI and in event logs, and are refused in standalone cluster mode. This hook never
    uses them. How the job's driver gets its credentials depends on the deploy mode:

    * client (``local``, ``spark://``, ``yarn``, ``k8s://`` with deploy mode client): the driver is
      the spark-submit child process on this worker. ``job_env`` is given to that process alone,
      as its environment (``Popen(env=...)``).
    * cluster: the driver runs elsewhere and cannot read this worker's environment or disk.
      Credentials are not shipped there; with the Spark connection's extra ``driver_identity``
      the job uses the cluster's own AWS identity and reads the Snowflake connection from the
      Secrets Manager secret named by the extra ``snowflake_secret_id``.

    Extras read from the Spark connection, besides the provider's own:

    * ``driver_identity`` (bool): the driver and executors use their own AWS identity (boto3's
      default chain: instance profile, EMR role, IRSA); no AWS credential is sent to the job.
    * ``snowflake_secret_id``: with ``driver_identity``, the name or ARN of the AWS Secrets Manager
      secret holding the Snowflake connection (a JSON object of connector arguments).

    With ``driver_identity``, ``--snowflake-secret-id <snowflake_secret_id>`` is added to the
    application arguments (a secret's name, not a secret).

    :param job_env: variables added to this worker's environment for the spark-submit process;
        they may hold secrets, and reach nothing but that process (and a client-mode driver).
        Kept in :attr:`job_env`, which may be filled until :meth:`submit`.
    :param kwargs: passed to ``SparkSubmitHook``; ``env_vars`` is refused.
    """

    def __init__(self, *, job_env: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        if kwargs.get("env_vars"):
            raise ValueError(
                "env_vars would reach the driver as Spark settings on the command line on YARN and "
                "Kubernetes; pass job_env, which goes to the spark-submit process's environment only"
            )
        super().__init__(**kwargs)
        self.job_env: dict[str, str] = dict(job_env or {})
        extra = self._connection_extra()
        self.driver_identity = _flag(extra.get("driver_identity", False))
        secret_id = extra.get("snowflake_secret_id")
        self.snowflake_secret_id: str | None = str(secret_id) if secret_id else None
        if self.driver_identity and not self.snowflake_secret_id:
            raise ValueError(
                f"Spark connection {self._conn_id!r}: extra driver_identity needs snowflake_secret_id, the AWS "
                "Secrets Manager secret (name or ARN) that holds the Snowflake connection for the driver"
            )
        if self.snowflake_secret_id and self.driver_identity:
            self._application_args = [
                *(self._application_args or []),
                "--snowflake-secret-id",
                self.snowflake_secret_id,
            ]

    def _connection_extra(self) -> dict[str, Any]:
        try:
            extra: dict[str, Any] = self.get_connection(self._conn_id).extra_dejson
        except AirflowException:
            return {}  # SparkSubmitHook defaults to yarn without a connection; so do these extras
        return extra

    @property
    def master(self) -> str:
        """The Spark master URL, as the connection resolves it."""
        return str(self._connection["master"])

    @property
    def deploy_mode(self) -> str:
        """``client`` or ``cluster``: the connection's ``deploy-mode``, else ``spark.submit.deployMode``."""
        mode = self._connection["deploy_mode"] or self._conf.get("spark.submit.deployMode") or CLIENT
        return str(mode).strip().lower()

    def check_credential_delivery(self) -> None:
        """Refuse, with what to configure, a submission whose driver cannot get its credentials.

        :raises AirflowException: in cluster deploy mode.
        """
        if self.deploy_mode != CLUSTER:
            return
        where = f"Spark connection {self._conn_id!r} (master {self.master}) runs the driver in cluster deploy mode"
        if not self.driver_identity:
            raise AirflowException(
                f"{where}, away from this worker, so credentials would have to travel on the spark-submit "
                "command line or in Spark settings, which this provider never does. Give the driver and "
                "executors their own AWS identity (instance profile, EMR role, IRSA), store the Snowflake "
                "connection in AWS Secrets Manager, and set the Spark connection's extras "
                '"driver_identity": true and "snowflake_secret_id": "<secret name or ARN>" '
                f"({CONNECTIONS_DOC}); or use deploy mode client."
            )
        raise AirflowException(
            f"{where}: not supported yet, because the driver reads the batch plan from this worker's disk and "
            "writes its result there. Use deploy mode client; driver_identity works there too "
            f"({CONNECTIONS_DOC})."
        )

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        """Run spark-submit with ``job_env`` in its environment (see the class); cluster mode is refused."""
        self.check_credential_delivery()
        env = dict(kwargs.pop("env", None) or os.environ)
        env.update(self.job_env)
        return super().submit(application, env=env, **kwargs)
