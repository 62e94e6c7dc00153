"""Simulate a connector's permissions with IAM's SimulatePrincipalPolicy, one resource at a time.

What is required comes from :mod:`.iam`; this module calls IAM and reads its answers
(:func:`check_principal`: the connection's principal against what its connector needs). When the
check cannot run (see :func:`~.iam.why_check_cannot_run`), :class:`CheckCannotRunError` carries the
reason, and the caller decides whether that skips or fails.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError
from botocore.exceptions import ConnectionError as BotocoreConnectionError
from botocore.parsers import ResponseParserError

from airflow_kinesis_snowflake.core.admin.iam import (
    IMPLICIT_DENY,
    CheckCannotRun,
    Decision,
    Requirement,
    UnsimulatablePrincipalError,
    describe_missing,
    partition_of,
    permission_check_permissions,
    policy_document,
    principal_arn,
    principal_kind,
    simulation_pairs,
    why_check_cannot_run,
)


class CheckCannotRunError(Exception):
    """The IAM check could not run; ``cannot_run`` says why and how to go on, ``error`` is what happened.

    :param cannot_run: the reason and the fix; None when ``error`` is a failure of its own.
    """

    def __init__(self, cannot_run: CheckCannotRun | None, error: Exception) -> None:
        super().__init__(cannot_run.reason if cannot_run else str(error))
        self.cannot_run = cannot_run
        self.error = error


class SimulationError(Exception):
    """SimulatePrincipalPolicy failed for a reason that is not the check being unable to run."""


@dataclass(frozen=True)
class PermissionCheck:
    """What a check found: the principal simulated, what the connector needs, and IAM's decisions.

    :param caller_arn: the STS GetCallerIdentity ARN the principal was found from.
    """

    principal: str
    caller_arn: str
    requirements: list[Requirement]
    decisions: list[Decision]

    @property
    def kind(self) -> str:
        return principal_kind(self.caller_arn)

    @property
    def policy(self) -> dict[str, Any]:
        """The least-privilege policy the connector needs, with leave to simulate its principal (this check)."""
        return policy_document([*self.requirements, *permission_check_permissions(self.principal)])

    def missing(self) -> str | None:
        """Every denied action on its resource, with the policy to attach; None when all are allowed."""
        if all(d.allowed for d in self.decisions):
            return None
        return describe_missing(self.principal, self.decisions, self.requirements, self.policy)

    def to_dict(self) -> dict[str, Any]:
        return {
            "principal_arn": self.principal,
            "policy": self.policy,
            "decisions": [d.to_dict() for d in self.decisions],
        }


def check_principal(
    identity: Mapping[str, str],
    iam: Callable[[], Any],
    requirements_for: Callable[[str, str], list[Requirement]],
) -> PermissionCheck:
    """Simulate what a connector needs for the principal behind a connection.

    :param identity: the connection's STS GetCallerIdentity answer (``Arn``, ``Account``).
    :param iam: makes the boto3 IAM client (not made when the principal cannot be simulated).
    :param requirements_for: given the account id and the partition, what the connector needs.
    :raises CheckCannotRunError: the principal cannot be simulated, or IAM would not simulate it.
    :raises IamPolicyError: the connector's settings make no policy.
    :raises SimulationError: the simulation failed otherwise.
    """
    caller = identity["Arn"]
    try:
        principal = principal_arn(caller)
    except UnsimulatablePrincipalError as err:
        raise CheckCannotRunError(why_check_cannot_run(err, caller_arn=caller), err) from err
    requirements = requirements_for(identity["Account"], partition_of(caller))
    return PermissionCheck(principal, caller, requirements, simulate(iam(), principal, caller, requirements))


def simulate(iam: Any, principal: str, caller_arn: str, requirements: list[Requirement]) -> list[Decision]:
    """One decision per (action, resource), simulated one resource at a time so each is unambiguous.

    :param iam: a boto3 IAM client.
    :param principal: the IAM principal simulated (see :func:`~.iam.principal_arn`).
    :param caller_arn: the STS GetCallerIdentity ARN of the connection.
    :raises CheckCannotRunError: when the check cannot run (no permission to simulate, no such
        principal, an endpoint without the simulator or out of reach).
    :raises SimulationError: when the simulation failed otherwise.
    """
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
                    decision = decision_from_result(result, resource)
                    found[(decision.action.lower(), decision.resource)] = decision
        except (ClientError, ResponseParserError, BotocoreConnectionError) as err:
            cannot_run = why_check_cannot_run(
                err, caller_arn=caller_arn, principal=principal, endpoint=iam.meta.endpoint_url
            )
            if cannot_run is None:
                raise SimulationError(f"SimulatePrincipalPolicy for {principal} failed: {err}") from err
            raise CheckCannotRunError(cannot_run, err) from err
    # AWS echoes action names as given; index case-insensitively and report them as asked.
    return [_with_action(found.get((a.lower(), r)) or Decision(a, r, IMPLICIT_DENY), a) for a, r in pairs]


def decision_from_result(result: dict[str, Any], resource: str) -> Decision:
    """The decision of one EvaluationResults entry for ``resource``; no I/O.

    With one resource per call, a result names it; ResourceSpecificResults may refine the decision.
    """
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
