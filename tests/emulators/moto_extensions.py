"""IAM behaviour moto lacks, patched onto its response classes before the server takes requests.

* ``iam:SimulatePrincipalPolicy``: moto has no policy simulator. This one gathers the principal's
  identity policies (inline and attached managed; for a user also its groups') and evaluates each
  action on each resource as IAM does: an explicit Deny wins, then an Allow, else an implicit deny.
  ``*`` and ``?`` wildcards work in actions (case-insensitively) and resources; ``NotAction`` and
  ``NotResource`` are honoured. Statements with a ``Condition`` never apply, since no request
  context is simulated; their keys are reported as missing context values.
* Resource scoping under IAM enforcement (``INITIAL_NO_AUTH_ACTION_COUNT``): moto authorises a
  request against the resource its response class names in ``_determine_resource()``, and ``*``
  when there is none, which is the case for Kinesis, DynamoDB and DynamoDB Streams. Without a resource a policy
  scoped to ARNs denies everything; with one, it is honoured as on AWS. A denial is answered as
  those services do, ``AccessDeniedException`` naming the resource, not IAM's XML error. Action and
  resource patterns are matched as the simulator does (moto matches actions case-sensitively and
  knows no ``?``). CreateTable with tags also needs ``dynamodb:TagResource``, as on AWS. A DynamoDB
  Streams request is authorised on its stream's ARN (``StreamArn``, or the one a shard iterator
  begins with), as ``dynamodb:<Action>``; ListStreams on ``*``.
* Identities moto does not have: GetCallerIdentity with :data:`ROOT_ACCESS_KEY_ID` answers the
  account root user (``arn:aws:iam::<account>:root``), as AWS does for a root access key; and
  GetFederationToken issues credentials of their own, for which GetCallerIdentity answers the
  federated user (``arn:aws:sts::<account>:federated-user/<name>``), where moto answers with fixed
  example keys that it does not recognise afterwards.
* ``install(policy_simulator=False)`` leaves SimulatePrincipalPolicy out, as in the stock
  ``motoserver/moto`` image: moto then fails the request with an HTML 500 page, which botocore
  cannot parse (``ResponseParserError``, not a ``ClientError``). The server module does that when
  ``MOTO_WITHOUT_POLICY_SIMULATOR`` is set.
"""

from __future__ import annotations

import json
import re
import uuid
from functools import lru_cache
from typing import Any

from moto import settings
from moto.core.authorization import ActionAuthenticatorMixin
from moto.core.exceptions import AccessDeniedError, JsonRESTError
from moto.core.responses import ActionResult
from moto.dynamodb.responses import DynamoHandler
from moto.dynamodbstreams.responses import DynamoDBStreamsHandler
from moto.iam.access_control import IAMPolicyStatement, IAMRequest
from moto.iam.exceptions import InvalidInput, NoSuchEntity
from moto.iam.models import IAMBackend, iam_backends
from moto.iam.responses import IamResponse
from moto.kinesis.models import kinesis_backends
from moto.kinesis.responses import KinesisResponse
from moto.kinesis.utils import decompose_shard_iterator
from moto.sts.models import STSBackend
from moto.sts.responses import TokenResponse

ALLOWED = "allowed"
EXPLICIT_DENY = "explicitDeny"
IMPLICIT_DENY = "implicitDeny"

_PRINCIPAL_ARN = re.compile(
    r"^arn:(?P<partition>[^:]+):iam::(?P<account>\d{12}):(?P<kind>user|role|group)/(?P<path>.+)$"
)
_installed = False

# An access key of the account root user: GetCallerIdentity answers arn:aws:iam::<account>:root.
ROOT_ACCESS_KEY_ID = "AKIAROOTEXAMPLE00001"
# Access keys GetFederationToken issued -> (account, partition, federated user name).
_federated: dict[str, tuple[str, str, str]] = {}


# -- policy evaluation ------------------------------------------------------------------------


@lru_cache(maxsize=1024)
def _wildcard(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(f"^{regex}$", re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _matches(patterns: Any, value: str, *, ignore_case: bool) -> bool:
    return any(_wildcard(str(p), ignore_case).match(value) for p in _as_list(patterns))


def statement_applies(statement: dict[str, Any], action: str, resource: str) -> bool:
    """Whether one identity-policy statement covers ``action`` on ``resource``."""
    if "Action" in statement:
        action_ok = _matches(statement["Action"], action, ignore_case=True)
    elif "NotAction" in statement:
        action_ok = not _matches(statement["NotAction"], action, ignore_case=True)
    else:
        return False
    if "Resource" in statement:
        resource_ok = _matches(statement["Resource"], resource, ignore_case=False)
    elif "NotResource" in statement:
        resource_ok = not _matches(statement["NotResource"], resource, ignore_case=False)
    else:
        return False
    return action_ok and resource_ok and "Condition" not in statement


class _Policy:
    def __init__(self, policy_id: str, policy_type: str, document: Any) -> None:
        self.policy_id = policy_id
        self.policy_type = policy_type
        parsed = json.loads(document) if isinstance(document, str) else document
        self.statements: list[dict[str, Any]] = _as_list(parsed.get("Statement"))

    def matched(self, action: str, resource: str, effect: str) -> bool:
        return any(s.get("Effect") == effect and statement_applies(s, action, resource) for s in self.statements)

    def condition_keys(self, action: str, resource: str) -> list[str]:
        keys: list[str] = []
        for statement in self.statements:
            condition = statement.get("Condition")
            unconditional = {k: v for k, v in statement.items() if k != "Condition"}
            if condition and statement_applies(unconditional, action, resource):
                keys.extend(key for operator in condition.values() for key in operator)
        return keys


def evaluate(policies: list[_Policy], action: str, resource: str) -> dict[str, Any]:
    """One EvaluationResult of SimulatePrincipalPolicy."""
    denied = [p for p in policies if p.matched(action, resource, "Deny")]
    allowed = [p for p in policies if p.matched(action, resource, "Allow")]
    if denied:
        decision, matched = EXPLICIT_DENY, denied
    elif allowed:
        decision, matched = ALLOWED, allowed
    else:
        decision, matched = IMPLICIT_DENY, []
    missing = sorted({key for p in policies for key in p.condition_keys(action, resource)})
    return {
        "EvalActionName": action,
        "EvalResourceName": resource,
        "EvalDecision": decision,
        "MatchedStatements": [{"SourcePolicyId": p.policy_id, "SourcePolicyType": p.policy_type} for p in matched],
        "MissingContextValues": missing,
    }


# -- the principal's policies ------------------------------------------------------------------


def _managed(managed_policies: dict[str, Any]) -> list[_Policy]:
    policies = []
    for arn, policy in managed_policies.items():
        version = next(v for v in policy.versions if v.is_default)
        kind = "aws-managed" if ":iam::aws:policy/" in arn else "user-managed"
        policies.append(_Policy(policy.name, kind, version.document))
    return policies


def principal_policies(backend: IAMBackend, arn: str) -> list[_Policy]:
    """Identity policies of a user (with its groups'), a role or a group; NoSuchEntity if unknown."""
    match = _PRINCIPAL_ARN.match(arn)
    if not match:
        raise InvalidInput(f"PolicySourceArn {arn} is not the ARN of an IAM user, role or group.")
    kind, name = match["kind"], match["path"].rsplit("/", 1)[-1]
    if kind == "user":
        user = next((u for u in backend.users.values() if u.arn == arn), None)
        if user is None:
            raise NoSuchEntity(f"The user with name {name} cannot be found.")
        policies = [_Policy(n, "user", d) for n, d in user.policies.items()] + _managed(user.managed_policies)
        for group in backend.get_groups_for_user(user.name):
            policies += [_Policy(n, "group", d) for n, d in group.policies.items()]
            policies += _managed(group.managed_policies)
        return policies
    if kind == "role":
        role = next((r for r in backend.roles.values() if r.arn == arn), None)
        if role is None:
            raise NoSuchEntity(f"The role with name {name} cannot be found.")
        return [_Policy(n, "role", d) for n, d in role.policies.items()] + _managed(role.managed_policies)
    found = next((g for g in backend.groups.values() if g.arn == arn), None)
    if found is None:
        raise NoSuchEntity(f"The group with name {name} cannot be found.")
    return [_Policy(n, "group", d) for n, d in found.policies.items()] + _managed(found.managed_policies)


def _simulate_principal_policy(self: IamResponse) -> ActionResult:
    source_arn = self._get_param("PolicySourceArn")
    actions = _as_list(self._get_param("ActionNames"))
    resources = _as_list(self._get_param("ResourceArns")) or ["*"]
    if not actions:
        raise InvalidInput("ActionNames must name at least one action.")
    match = _PRINCIPAL_ARN.match(source_arn or "")
    if not match:
        raise InvalidInput(f"PolicySourceArn {source_arn} is not the ARN of an IAM user, role or group.")
    backend = iam_backends[match["account"]][match["partition"]]
    policies = principal_policies(backend, source_arn)
    for index, document in enumerate(_as_list(self._get_param("PolicyInputList")), start=1):
        policies.append(_Policy(f"PolicyInputList.{index}", "none", document))

    results = [evaluate(policies, action, resource) for action in actions for resource in resources]
    start = int(self._get_param("Marker") or 0)
    page_size = int(self._get_param("MaxItems") or 100)
    page = results[start : start + page_size]
    body: dict[str, Any] = {"EvaluationResults": page, "IsTruncated": start + page_size < len(results)}
    if body["IsTruncated"]:
        body["Marker"] = str(start + page_size)
    return ActionResult(body)


# -- resources for IAM enforcement -------------------------------------------------------------


def _json_body(response: Any) -> dict[str, Any]:
    body = response.body
    if isinstance(body, dict):
        return body
    try:
        parsed = json.loads(body or "{}")
    except (TypeError, ValueError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _kinesis_resource(self: KinesisResponse) -> str:
    """The stream or consumer ARN a Kinesis request acts on, as AWS authorises it."""
    params = _json_body(self)
    if params.get("ConsumerARN"):
        return str(params["ConsumerARN"])
    stream_arn = params.get("StreamARN")
    stream_name = params.get("StreamName")
    if not stream_arn and not stream_name and params.get("ShardIterator"):
        try:
            stream_name = decompose_shard_iterator(params["ShardIterator"])[0]
        except (ValueError, IndexError, UnicodeDecodeError):
            stream_name = None
    if not stream_arn and stream_name:
        stream_arn = f"arn:{self.partition}:kinesis:{self.region}:{self.current_account}:stream/{stream_name}"
    if not stream_arn:
        # ListShards with only a NextToken: moto's token does not say which stream it pages.
        return "*"
    consumer_name = params.get("ConsumerName")
    if consumer_name and self._get_action() in ("DescribeStreamConsumer", "DeregisterStreamConsumer"):
        backend = kinesis_backends[self.current_account][self.region]
        for stream in backend.streams.values():
            if stream.arn == stream_arn:
                for consumer in stream.consumers:
                    if consumer.consumer_name == consumer_name:
                        return str(consumer.consumer_arn)
    return str(stream_arn)


def _dynamodb_table_arn(self: DynamoHandler, table: str) -> str:
    if table.startswith("arn:"):
        return table
    return f"arn:{self.partition}:dynamodb:{self.region}:{self.current_account}:table/{table}"


def _dynamodb_resource(self: DynamoHandler) -> str:
    """The table (or index) ARN a DynamoDB request acts on; ``*`` for account-wide actions."""
    params = getattr(self, "params", None) or {}
    if params.get("ResourceArn"):
        return str(params["ResourceArn"])
    table = params.get("TableName")
    if not table:
        request_items = params.get("RequestItems") or {}
        # A batch over one table is authorised on it; over several, AWS checks each table.
        if len(request_items) == 1:
            table = next(iter(request_items))
    if not table:
        return "*"
    arn = _dynamodb_table_arn(self, str(table))
    if params.get("IndexName") and self._get_action() in ("Query", "Scan"):
        arn += f"/index/{params['IndexName']}"
    return arn


def _dynamodb_streams_resource(self: DynamoDBStreamsHandler) -> str:
    """The stream ARN a DynamoDB Streams request acts on; ``*`` for ListStreams.

    A shard iterator is ``<stream ARN>|<version>|<token>``, as on AWS, so GetRecords is authorised
    on the stream it reads.
    """
    params = _json_body(self)
    if params.get("StreamArn"):
        return str(params["StreamArn"])
    iterator = params.get("ShardIterator")
    if iterator and str(iterator).startswith("arn:"):
        return str(iterator).split("|", 1)[0]
    return "*"


def _iam_resource(original: Any) -> Any:
    def determine(self: IamResponse) -> str:
        # AWS authorises SimulatePrincipalPolicy on the simulated principal.
        if self._get_action() == "SimulatePrincipalPolicy":
            source = self.querystring.get("PolicySourceArn")
            if source:
                return str(source[0])
        return str(original(self))

    return determine


def _also_needed(response: Any) -> list[str]:
    """Actions AWS authorises on top of the request's own."""
    if isinstance(response, DynamoHandler) and response._get_action() == "CreateTable":
        if (getattr(response, "params", None) or {}).get("Tags"):
            return ["TagResource"]
    return []


def _json_access_denied(original: Any) -> Any:
    def authorize(self: Any, resource: str = "*") -> None:
        enforcing = ActionAuthenticatorMixin.request_count >= settings.INITIAL_NO_AUTH_ACTION_COUNT
        try:
            original(self, resource)
            for action in _also_needed(self) if enforcing else []:
                IAMRequest(
                    account_id=self.current_account,
                    method=self.method,
                    path=self.raw_path,
                    data=self.data,
                    body=self.raw_body,
                    headers=self.headers,
                    action=action,
                ).check_action_permitted(resource)
        except AccessDeniedError as err:
            raise JsonRESTError(
                "AccessDeniedException",
                f"{err.message} on resource: {resource} because no identity-based policy allows the action",
            ) from err

    return authorize


# -- identities moto does not have -------------------------------------------------------------


def _federation_token(original: Any) -> Any:
    def issue(self: TokenResponse) -> ActionResult:
        result = original(self)
        body = dict(result.result)
        key = "ASIAFED" + uuid.uuid4().hex[:13].upper()
        body["Credentials"] = {**body["Credentials"], "AccessKeyId": key}
        _federated[key] = (self.current_account, self.partition, self._get_param("Name"))
        return ActionResult(body)

    return issue


def _caller_identity(original: Any) -> Any:
    def identify(self: STSBackend, access_key_id: str, region: str) -> tuple[str, str, str]:
        if access_key_id == ROOT_ACCESS_KEY_ID:
            partition = "aws-cn" if region.startswith("cn-") else "aws"
            return self.account_id, f"arn:{partition}:iam::{self.account_id}:root", self.account_id
        if access_key_id in _federated:
            account, partition, name = _federated[access_key_id]
            return f"{account}:{name}", f"arn:{partition}:sts::{account}:federated-user/{name}", account
        identity: tuple[str, str, str] = original(self, access_key_id, region)
        return identity

    return identify


def _check_element_matches(self: IAMPolicyStatement, statement_element: str, value: str) -> bool:
    ignore_case = statement_element in ("Action", "NotAction")
    return _matches(self._statement[statement_element], value, ignore_case=ignore_case)


def install(*, policy_simulator: bool = True) -> None:
    """Patch moto's response classes; idempotent.

    :param policy_simulator: serve SimulatePrincipalPolicy; without it, moto fails the request as
        the stock image does.
    """
    global _installed
    if _installed:
        return
    if policy_simulator:
        IamResponse.simulate_principal_policy = _simulate_principal_policy  # type: ignore[attr-defined]
    TokenResponse.get_federation_token = _federation_token(TokenResponse.get_federation_token)  # type: ignore[method-assign]
    STSBackend.get_caller_identity = _caller_identity(STSBackend.get_caller_identity)  # type: ignore[method-assign]
    IamResponse._determine_resource = _iam_resource(IamResponse._determine_resource)  # type: ignore[method-assign]
    KinesisResponse._determine_resource = _kinesis_resource  # type: ignore[attr-defined]
    DynamoHandler._determine_resource = _dynamodb_resource  # type: ignore[attr-defined]
    DynamoDBStreamsHandler._determine_resource = _dynamodb_streams_resource  # type: ignore[attr-defined]
    for response_class in (KinesisResponse, DynamoHandler, DynamoDBStreamsHandler):
        response_class._authenticate_and_authorize_normal_action = _json_access_denied(  # type: ignore[method-assign]
            response_class._authenticate_and_authorize_normal_action
        )
    IAMPolicyStatement._check_element_matches = _check_element_matches  # type: ignore[method-assign]
    _installed = True
