"""Check, before anything else runs, that the connector's AWS principal has every permission it needs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException
from botocore.exceptions import ClientError

from airflow_kinesis_snowflake.core.iam import (
    IMPLICIT_DENY,
    SHARED_THROUGHPUT,
    Decision,
    IamPolicyError,
    Requirement,
    describe_missing,
    partition_of,
    policy_document,
    principal_arn,
    required_permissions,
    simulation_pairs,
)

_ACCESS_DENIED = ("AccessDenied", "AccessDeniedException")


class CheckIamPermissionsOperator(BaseOperator):
    """Simulate the connector's IAM permissions for the connection's principal, and fail if any is missing.

    The principal comes from STS GetCallerIdentity (an assumed-role session is checked as its
    role). Every action the connector performs is simulated on the exact ARNs of its stream, its
    fan-out consumers and its lease table with IAM's SimulatePrincipalPolicy. If anything is
    denied, the task fails without retrying, listing each missing action on each resource and the
    least-privilege policy to attach. Nothing is created or changed.

    The principal must itself be allowed ``iam:SimulatePrincipalPolicy`` on its own ARN. When it is
    not, the task fails saying so, or is skipped with a warning if ``skip_if_simulation_denied``.

    :param stream_name: the Kinesis data stream.
    :param application_name: the connector's application name: the lease table and the fan-out
        consumer are named after it.
    :param consumer_type: ``SHARED_THROUGHPUT`` or ``ENHANCED_FAN_OUT``.
    :param region_name: AWS region of the stream and table; defaults to the connection's.
    :param aws_conn_id: the Airflow AWS connection the connector uses.
    :param include_migration_table: also check ``<application>_migration``, used when migrating
        checkpoints from a legacy KCL lease table.
    :param skip_if_simulation_denied: skip instead of failing when the principal may not call
        ``iam:SimulatePrincipalPolicy``.
    :return: ``principal_arn``, the ``policy`` document and one ``decisions`` entry per action and
        resource (all ``allowed`` when the task succeeds).
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
        skip_if_simulation_denied: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stream_name = stream_name
        self.application_name = application_name
        self.consumer_type = consumer_type
        self.region_name = region_name
        self.aws_conn_id = aws_conn_id
        self.include_migration_table = include_migration_table
        self.skip_if_simulation_denied = skip_if_simulation_denied

    def execute(self, context: Context) -> dict[str, Any]:
        sts = AwsBaseHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name, client_type="sts")
        region = self.region_name or sts.region_name
        if not region:
            raise AirflowFailException(
                f"no AWS region: set region_name on the task or region_name in connection {self.aws_conn_id!r}"
            )
        identity = sts.conn.get_caller_identity()
        try:
            principal = principal_arn(identity["Arn"])
            requirements = required_permissions(
                stream_name=self.stream_name,
                region=region,
                account_id=identity["Account"],
                application_name=self.application_name,
                consumer_type=self.consumer_type,
                partition=partition_of(identity["Arn"]),
                include_migration_table=self.include_migration_table,
            )
        except IamPolicyError as err:
            raise AirflowFailException(str(err)) from err
        policy = policy_document(requirements)
        self.log.info("Checking %d permissions of %s", len(simulation_pairs(requirements)), principal)

        iam = AwsBaseHook(aws_conn_id=self.aws_conn_id, region_name=region, client_type="iam").conn
        decisions = self._simulate(iam, principal, identity["Arn"], requirements)
        result = {
            "principal_arn": principal,
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
        # AWS echoes action names as given; index case-insensitively and report them as asked.
        return [_with_action(found.get((a.lower(), r)) or Decision(a, r, IMPLICIT_DENY), a) for a, r in pairs]

    def _simulation_failed(self, err: ClientError, principal: str, caller_arn: str) -> NoReturn:
        error = err.response.get("Error", {})
        code, message = error.get("Code", "?"), error.get("Message", str(err))
        if code in _ACCESS_DENIED:
            explanation = (
                f"{caller_arn} may not call iam:SimulatePrincipalPolicy, so the connector's permissions cannot be "
                f"checked. Allow iam:SimulatePrincipalPolicy on {principal} to enable this check. "
                f"AWS said: {code}: {message}"
            )
            if self.skip_if_simulation_denied:
                self.log.warning("Skipping the IAM permission check: %s", explanation)
                raise AirflowSkipException(explanation) from err
            raise AirflowFailException(
                f"{explanation}\nOr set skip_if_simulation_denied=True to skip this check."
            ) from err
        if code == "NoSuchEntity":
            raise AirflowFailException(
                f"IAM has no principal {principal} (the caller is {caller_arn}); a role created under a path "
                f"cannot be found from its session ARN. AWS said: {code}: {message}"
            ) from err
        raise AirflowException(f"SimulatePrincipalPolicy for {principal} failed: {code}: {message}") from err


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
