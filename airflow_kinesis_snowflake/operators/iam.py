"""Check, before anything else runs, that the connector's AWS principal has every permission it needs
(a Kinesis connector's, or a DynamoDB connector's)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from airflow.sdk import BaseOperator, Context

from airflow_kinesis_snowflake.compat import AirflowException, AirflowFailException, AirflowSkipException
from airflow_kinesis_snowflake.core.admin.iam import (
    CheckCannotRun,
    IamCheckMode,
    IamPolicyError,
    Requirement,
    dynamodb_source_permissions,
    required_permissions,
    resolve_check_mode,
)
from airflow_kinesis_snowflake.core.admin.iam_check import CheckCannotRunError, SimulationError, check_principal
from airflow_kinesis_snowflake.core.model import ConsumerType


class _CheckIamPermissions(BaseOperator):
    """Both sources' checks (:func:`~.core.admin.iam_check.check_principal`); a subclass gives :meth:`requirements`."""

    def __init__(
        self,
        *,
        region_name: str | None = None,
        aws_conn_id: str | None = "aws_default",
        check_mode: IamCheckMode | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.region_name = region_name
        self.aws_conn_id = aws_conn_id
        self.check_mode, _ = resolve_check_mode(check_mode)

    def requirements(self, region: str, account_id: str, partition: str) -> list[Requirement]:
        """Every permission the connector needs, on the exact resources of this account and region.

        :raises IamPolicyError: the connector's settings cannot make a policy.
        """
        raise NotImplementedError

    def execute(self, context: Context) -> dict[str, Any]:
        if self.check_mode is IamCheckMode.OFF:
            raise AirflowSkipException("The IAM permission check is off (check_mode 'off'); nothing was checked")
        sts = AwsBaseHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name, client_type="sts")
        region = self.region_name or sts.region_name
        if not region:
            raise AirflowFailException(
                f"no AWS region: set region_name on the task or region_name in connection {self.aws_conn_id!r}"
            )
        try:
            check = check_principal(
                sts.conn.get_caller_identity(),
                lambda: AwsBaseHook(aws_conn_id=self.aws_conn_id, region_name=region, client_type="iam").conn,
                functools.partial(self.requirements, region),
            )
        except CheckCannotRunError as err:
            self._cannot_run(err.cannot_run, err.error)
        except IamPolicyError as err:
            raise AirflowFailException(str(err)) from err
        except SimulationError as err:
            raise AirflowException(str(err)) from err.__cause__
        count, mode = len(check.decisions), self.check_mode.value
        self.log.info("Checked %d permissions of %s (%s), check_mode %s", count, check.principal, check.kind, mode)
        if (missing := check.missing()) is not None:
            raise AirflowFailException(missing)
        self.log.info("%s has all %d permissions the connector needs", check.principal, count)
        return {**check.to_dict(), "check_mode": mode}

    def _cannot_run(self, cannot_run: CheckCannotRun | None, err: Exception) -> NoReturn:
        """The check could not run: skip with a warning (``best_effort``) or fail saying how to go on."""
        if cannot_run is None:  # not a reason the check cannot run: the error is the failure
            raise err
        message = cannot_run.message(self.check_mode)
        if self.check_mode is IamCheckMode.BEST_EFFORT:
            self.log.warning("Skipping the IAM permission check: %s", message)
            raise AirflowSkipException(message) from err
        raise AirflowFailException(message) from err


class CheckIamPermissionsOperator(_CheckIamPermissions):
    """Simulate the connector's IAM permissions for the connection's principal, and fail if any is missing.

    The principal comes from STS GetCallerIdentity (an assumed-role session is checked as its
    role). Every action the connector performs is simulated on the exact ARNs of its stream, its
    fan-out consumers and its lease table with IAM's SimulatePrincipalPolicy. If anything is
    denied, the task fails without retrying, listing each missing action on each resource and the
    least-privilege policy to attach. Nothing is created or changed.

    Some legitimate setups cannot be checked this way: the account root user and federated users
    cannot be simulated, the principal may lack ``iam:SimulatePrincipalPolicy`` on its own ARN, a
    role under a path cannot be found from its session ARN, and an emulator or a network may not
    serve the IAM API. ``check_mode`` says what happens then: ``required`` fails, saying why the
    check could not run (the principal, its kind, the error) and how to go on; ``best_effort``
    skips the task with a warning saying the same; ``off`` skips the task without calling AWS.

    :param stream_name: the Kinesis data stream.
    :param application_name: the connector's application name: the lease table and the fan-out
        consumer are named after it.
    :param consumer_type: ``SHARED_THROUGHPUT`` or ``ENHANCED_FAN_OUT``.
    :param region_name: AWS region of the stream and table; defaults to the connection's.
    :param aws_conn_id: the Airflow AWS connection the connector uses.
    :param include_migration_table: also check ``<application>_migration``, used when migrating
        checkpoints from a legacy KCL lease table.
    :param check_mode: ``required`` (default), ``best_effort`` or ``off``, as above: an
        :class:`~airflow_kinesis_snowflake.core.admin.iam.IamCheckMode` or its value. A missing
        permission fails the task in both ``required`` and ``best_effort``. Why the check cannot
        run is decided by :func:`~airflow_kinesis_snowflake.core.admin.iam.why_check_cannot_run`.
    :param skip_if_simulation_denied: deprecated: ``True`` is ``check_mode="best_effort"``,
        ``False`` is ``check_mode="required"``.
    :return: ``principal_arn``, ``check_mode``, the ``policy`` document and one ``decisions`` entry
        per action and resource (all ``allowed`` when the task succeeds).
    """

    template_fields: Sequence[str] = ("stream_name", "application_name", "consumer_type", "region_name", "aws_conn_id")

    def __init__(
        self,
        *,
        stream_name: str,
        application_name: str,
        consumer_type: str = ConsumerType.SHARED_THROUGHPUT,
        region_name: str | None = None,
        aws_conn_id: str | None = "aws_default",
        include_migration_table: bool = False,
        check_mode: IamCheckMode | str | None = None,
        skip_if_simulation_denied: bool | None = None,
        **kwargs: Any,
    ) -> None:
        check_mode, deprecated = resolve_check_mode(check_mode, skip_if_simulation_denied)
        if deprecated is not None:
            warnings.warn(deprecated, AirflowProviderDeprecationWarning, stacklevel=2)
        super().__init__(region_name=region_name, aws_conn_id=aws_conn_id, check_mode=check_mode, **kwargs)
        self.stream_name = stream_name
        self.application_name = application_name
        self.consumer_type = consumer_type
        self.include_migration_table = include_migration_table

    @property
    def skip_if_simulation_denied(self) -> bool:
        """Deprecated: ``check_mode`` is ``best_effort``."""
        return self.check_mode is IamCheckMode.BEST_EFFORT

    def requirements(self, region: str, account_id: str, partition: str) -> list[Requirement]:
        return required_permissions(
            stream_name=self.stream_name,
            region=region,
            account_id=account_id,
            application_name=self.application_name,
            consumer_type=self.consumer_type,
            partition=partition,
            include_migration_table=self.include_migration_table,
        )


class CheckDynamoDBIamPermissionsOperator(_CheckIamPermissions):
    """Simulate a DynamoDB connector's IAM permissions for the connection's principal, and fail if any is missing.

    As :class:`CheckIamPermissionsOperator` does for a Kinesis connector, with what a DynamoDB
    connector does (:func:`~airflow_kinesis_snowflake.core.admin.iam.dynamodb_source_permissions`):
    DescribeTable and Scan on each table, DescribeStream, GetShardIterator and GetRecords on its
    streams, the lease table's actions, and ``tag:GetResources`` when the tables are found by tags
    (then the table and stream grants cover every table of the account and region). Nothing is
    created or changed.

    :param tables: the tables the connector lists (``source.tables``); None when it finds them by tags.
    :param application_name: the connector's application name: its lease table.
    :param region_name: AWS region of the tables and the lease table; defaults to the connection's.
    :param aws_conn_id: the Airflow AWS connection.
    :param check_mode: ``required`` (default), ``best_effort`` or ``off``, as for :class:`CheckIamPermissionsOperator`.
    :return: ``principal_arn``, ``check_mode``, the ``policy`` document and one ``decisions`` entry
        per action and resource (all ``allowed`` when the task succeeds).
    """

    template_fields: Sequence[str] = ("tables", "application_name", "region_name", "aws_conn_id")

    def __init__(
        self,
        *,
        tables: Sequence[str] | None,
        application_name: str,
        region_name: str | None = None,
        aws_conn_id: str | None = "aws_default",
        check_mode: IamCheckMode | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(region_name=region_name, aws_conn_id=aws_conn_id, check_mode=check_mode, **kwargs)
        self.tables = list(tables) if tables is not None else None
        self.application_name = application_name

    def requirements(self, region: str, account_id: str, partition: str) -> list[Requirement]:
        return dynamodb_source_permissions(
            region=region,
            account_id=account_id,
            application_name=self.application_name,
            tables=self.tables,
            partition=partition,
        )
