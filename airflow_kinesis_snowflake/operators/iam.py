"""Check, before anything else runs, that the connector's AWS principal has every permission it needs."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException
from botocore.exceptions import ClientError
from botocore.exceptions import ConnectionError as BotocoreConnectionError
from botocore.parsers import ResponseParserError

from airflow_kinesis_snowflake.core.iam import (
    IMPLICIT_DENY,
    SHARED_THROUGHPUT,
    Decision,
    IamPolicyError,
    Requirement,
    UnsimulatablePrincipalError,
    describe_missing,
    partition_of,
    policy_document,
    principal_arn,
    principal_kind,
    required_permissions,
    simulation_pairs,
)

REQUIRED = "required"
BEST_EFFORT = "best_effort"
OFF = "off"
CHECK_MODES = (REQUIRED, BEST_EFFORT, OFF)

_ACCESS_DENIED = ("AccessDenied", "AccessDeniedException")
# What an endpoint without the IAM policy simulator may answer instead of a simulation.
_NOT_SERVED = (
    "InvalidAction",
    "NotImplemented",
    "UnknownOperation",
    "UnknownOperationException",
    "UnsupportedOperation",
)


class CheckIamPermissionsOperator(BaseOperator):
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
    :param check_mode: ``required`` (default), ``best_effort`` or ``off``, as above. A missing
        permission fails the task in both ``required`` and ``best_effort``.
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
        consumer_type: str = SHARED_THROUGHPUT,
        region_name: str | None = None,
        aws_conn_id: str | None = "aws_default",
        include_migration_table: bool = False,
        check_mode: str | None = None,
        skip_if_simulation_denied: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if skip_if_simulation_denied is not None:
            if check_mode is not None:
                raise ValueError(
                    "set only check_mode: skip_if_simulation_denied is its deprecated form "
                    "(True is 'best_effort', False is 'required')"
                )
            warnings.warn(
                "skip_if_simulation_denied is deprecated; use check_mode="
                f"{BEST_EFFORT if skip_if_simulation_denied else REQUIRED!r}",
                AirflowProviderDeprecationWarning,
                stacklevel=2,
            )
            check_mode = BEST_EFFORT if skip_if_simulation_denied else REQUIRED
        check_mode = REQUIRED if check_mode is None else str(check_mode)
        if check_mode not in CHECK_MODES:
            raise ValueError(f"check_mode must be one of {', '.join(CHECK_MODES)} (got {check_mode!r})")
        self.stream_name = stream_name
        self.application_name = application_name
        self.consumer_type = consumer_type
        self.region_name = region_name
        self.aws_conn_id = aws_conn_id
        self.include_migration_table = include_migration_table
        self.check_mode = check_mode

    @property
    def skip_if_simulation_denied(self) -> bool:
        """Deprecated: ``check_mode`` is ``best_effort``."""
        return self.check_mode == BEST_EFFORT

    def execute(self, context: Context) -> dict[str, Any]:
        if self.check_mode == OFF:
            raise AirflowSkipException("The IAM permission check is off (check_mode 'off'); nothing was checked")
        sts = AwsBaseHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name, client_type="sts")
        region = self.region_name or sts.region_name
        if not region:
            raise AirflowFailException(
                f"no AWS region: set region_name on the task or region_name in connection {self.aws_conn_id!r}"
            )
        identity = sts.conn.get_caller_identity()
        caller = identity["Arn"]
        try:
            principal = principal_arn(caller)
        except UnsimulatablePrincipalError as err:
            self._cannot_run(
                f"{caller} is {err.kind}, which IAM's SimulatePrincipalPolicy cannot simulate (it simulates IAM "
                "users, IAM roles and assumed-role sessions only), so the connector's permissions cannot be checked",
                "provision with the IAM user or role the connector runs as, or compare its policies with the "
                "output of `python -m airflow_kinesis_snowflake policy <connector file>`",
            )
        try:
            requirements = required_permissions(
                stream_name=self.stream_name,
                region=region,
                account_id=identity["Account"],
                application_name=self.application_name,
                consumer_type=self.consumer_type,
                partition=partition_of(caller),
                include_migration_table=self.include_migration_table,
            )
        except IamPolicyError as err:
            raise AirflowFailException(str(err)) from err
        policy = policy_document(requirements)
        self.log.info(
            "Checking %d permissions of %s (%s), check_mode %s",
            len(simulation_pairs(requirements)),
            principal,
            principal_kind(caller),
            self.check_mode,
        )

        iam = AwsBaseHook(aws_conn_id=self.aws_conn_id, region_name=region, client_type="iam").conn
        decisions = self._simulate(iam, principal, caller, requirements)
        result = {
            "principal_arn": principal,
            "check_mode": self.check_mode,
            "policy": policy,
            "decisions": [d.to_dict() for d in decisions],
        }
        if not all(d.allowed for d in decisions):
            raise AirflowFailException(describe_missing(principal, decisions, requirements, policy))
        self.log.info("%s has all %d permissions the connector needs", principal, len(decisions))
        return result

    def _simulate(self, iam: Any, principal: str, caller_arn: str, requirements: list[Requirement]) -> list[Decision]:
        """One decision per (action, resource), simulated one resource at a time so each is unambiguous."""
        pairs = simulation_pairs(requirements)
        by_resource: dict[str, list[str]] = {}
        for action, resource in pairs:
            by_resource.setdefault(resource, []).append(action)
        found: dict[tuple[str, str], Decision] = {}
        paginator = iam.get_paginator("simulate_principal_policy")
        for resource, actions in by_resource.items():
            try:
                for page in paginator.paginate(PolicySourceArn=principal, ActionNames=actions, ResourceArns=[resource]):
                    for result in page.get("EvaluationResults", []):
                        decision = _decision(result, resource)
                        found[(decision.action.lower(), decision.resource)] = decision
            except ClientError as err:
                self._simulation_failed(err, principal, caller_arn)
            except (ResponseParserError, BotocoreConnectionError) as err:
                self._endpoint_failed(err, iam.meta.endpoint_url, principal, caller_arn)
        # AWS echoes action names as given; index case-insensitively and report them as asked.
        return [_with_action(found.get((a.lower(), r)) or Decision(a, r, IMPLICIT_DENY), a) for a, r in pairs]

    def _simulation_failed(self, err: ClientError, principal: str, caller_arn: str) -> NoReturn:
        error = err.response.get("Error", {})
        code, message = error.get("Code", "?"), error.get("Message", str(err))
        said = f"AWS said: {code}: {message}"
        if code in _ACCESS_DENIED:
            self._cannot_run(
                f"{caller_arn} may not call iam:SimulatePrincipalPolicy, so the connector's permissions cannot be "
                f"checked (principal {principal}, {principal_kind(caller_arn)}). {said}",
                f"allow iam:SimulatePrincipalPolicy on {principal} to enable this check",
            )
        if code == "NoSuchEntity":
            self._cannot_run(
                f"IAM has no principal {principal} (the caller is {caller_arn}, {principal_kind(caller_arn)}); a "
                "role created under a path, such as an IAM Identity Center role (/aws-reserved/...), cannot be "
                f"found from its session ARN. {said}",
                "provision with an IAM user, or a role without a path, that holds the same policies",
            )
        if code in _NOT_SERVED:
            self._cannot_run(
                f"the IAM endpoint does not serve SimulatePrincipalPolicy (principal {principal}, "
                f"{principal_kind(caller_arn)}). {said}",
                "point the AWS connection at an IAM endpoint that has the policy simulator",
            )
        raise AirflowException(f"SimulatePrincipalPolicy for {principal} failed: {code}: {message}") from err

    def _endpoint_failed(self, err: Exception, endpoint: str, principal: str, caller_arn: str) -> NoReturn:
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        if isinstance(err, ResponseParserError):
            reason = (
                f"the IAM endpoint {endpoint} did not answer SimulatePrincipalPolicy as AWS does, so the connector's "
                f"permissions cannot be checked (principal {principal}, {principal_kind(caller_arn)}): an emulator "
                "without the IAM policy simulator, such as the stock motoserver/moto image, answers this way. "
                f"botocore said: {type(err).__name__}: {first_line}"
            )
        else:
            reason = (
                f"the IAM endpoint {endpoint} cannot be reached, so the connector's permissions cannot be checked "
                f"(principal {principal}, {principal_kind(caller_arn)}): IAM has no VPC endpoint, so a network "
                f"without internet access cannot reach it. botocore said: {type(err).__name__}: {first_line}"
            )
        self._cannot_run(reason, "point the AWS connection at an IAM endpoint that has the policy simulator")

    def _cannot_run(self, reason: str, fix: str) -> NoReturn:
        """The check could not run: skip with a warning (``best_effort``) or fail saying how to go on."""
        if self.check_mode == BEST_EFFORT:
            message = f"{reason}\nTo have it checked: {fix}."
            self.log.warning("Skipping the IAM permission check: %s", message)
            raise AirflowSkipException(message)
        raise AirflowFailException(
            f"{reason}\nThe IAM permission check could not run, and check_mode is 'required'. To go on: {fix}; "
            "or set check_mode='best_effort' (in the connector file: source.iam_check: best_effort) to check "
            "whenever the check can run and skip it, with this warning, when it cannot, or 'off' not to check."
        )


def _decision(result: dict[str, Any], resource: str) -> Decision:
    # With one resource per call, a result names it; ResourceSpecificResults may refine the decision.
    specific = [r for r in result.get("ResourceSpecificResults") or [] if r.get("EvalResourceName") == resource]
    source = specific[0] if specific else result
    decision = source.get("EvalResourceDecision") or source.get("EvalDecision", IMPLICIT_DENY)
    statements = tuple(
        f"{s.get('SourcePolicyType', 'policy')} policy {s.get('SourcePolicyId', '?')}"
        for s in source.get("MatchedStatements") or []
    )
    return Decision(result["EvalActionName"], resource, decision, statements)


def _with_action(decision: Decision, action: str) -> Decision:
    return Decision(action, decision.resource, decision.decision, decision.matched_statements)
