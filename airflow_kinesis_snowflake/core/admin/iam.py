"""The IAM permissions a connector needs, and the least-privilege policy that grants them.

The table follows the one in the setup guide of Snowflake's Openflow Connector for Kinesis, cut
down to the calls this provider makes with the connector's credentials:

* Kinesis, on the stream: ListShards (planning), GetShardIterator and GetRecords (shared-throughput
  reads), DescribeStreamSummary (the stream's ARN and creation time, recorded in the lease table;
  also the ARN a fan-out consumer is registered on); with enhanced fan-out also
  RegisterStreamConsumer and DescribeStreamConsumer, and on the stream's consumers
  SubscribeToShard, DescribeStreamConsumer and DeregisterStreamConsumer.
* DynamoDB, on the lease table named after the application name: DescribeTable and CreateTable
  (CreateTable carries tags, which needs TagResource too), GetItem, PutItem, UpdateItem and Scan
  for leases, checkpoints and worker heartbeats, DeleteItem to remove a finished parent shard's
  lease once its children started (after a split or merge).
* A migration from a legacy KCL lease table copies it into ``<application>_migration``
  (created, tagged, batch-written, scanned, marked, then deleted) and deletes the KCL table, whose
  name the new lease table takes: DeleteTable on the lease table and the migration table's own set.

* Maintenance (the reset, restore and clean-up DAGs), granted only on request: a reset to a new
  application name creates a table whose name is chosen at trigger time, and clean-up reads and
  deletes the tables of applications no connector names any more, so these act on every table of
  the account and region (``table/*``; ListTables has no resource-level permission). Clean-up also
  lists and deregisters the stream's fan-out consumers.

* The IAM permission check (``source.iam_check`` ``required``, the default, or ``best_effort``):
  ``iam:SimulatePrincipalPolicy`` on the connector's own principal, the IAM user or role its AWS
  connection runs as (IAM authorises that action on the principal simulated, so no wider resource).

* On EMR Serverless (``spark.platform: emr_serverless``), the Airflow side starts, reads and cancels
  the job runs of the connector's application (and starts the application when it is stopped), passes
  the execution role to EMR Serverless, and uploads the job's files to the artifacts prefix and reads
  the driver's logs from it (ListBucket on that prefix only, so that a missing file is told apart from
  a denied one). What the execution role itself needs is told in the Spark page of the docs.

* On AWS Glue (``spark.platform: glue``), the Airflow side defines the connector's Glue job (creates
  it, or updates it when its definition differs), starts, reads and stops its runs, passes the job's
  role to Glue, uploads the job's files to the artifacts prefix as above, and reads a failed run's
  driver output from the Glue log groups in CloudWatch Logs.

* On Databricks (``spark.platform: databricks``), nothing: the Airflow side calls the Databricks
  workspace with its own connection for the run and its files, and the run reaches AWS with the
  cluster's identity (its instance profile), which the Spark page of the docs tells.

Unlike the Openflow table there is no DescribeStream: shards come from ListShards, and the stream
ARN from DescribeStreamSummary.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from botocore.exceptions import ClientError
from botocore.exceptions import ConnectionError as BotocoreConnectionError
from botocore.parsers import ResponseParserError

from airflow_kinesis_snowflake.core.model import ConsumerType

POLICY_VERSION = "2012-10-17"
# Left in the rendered policy for the reader to fill in, as the Openflow guide does.
ACCOUNT_ID_PLACEHOLDER = "${ACCOUNT_ID}"
# The IAM user or role the connector's AWS connection runs as, when it is not given.
PRINCIPAL_ARN_PLACEHOLDER = "${PRINCIPAL_ARN}"
MIGRATION_SUFFIX = "_migration"

# Decisions as SimulatePrincipalPolicy reports them.
ALLOWED = "allowed"
EXPLICIT_DENY = "explicitDeny"
IMPLICIT_DENY = "implicitDeny"

_ACCOUNT_ID = re.compile(r"^\d{12}$")
_PLACEHOLDER = re.compile(r"^\$\{[A-Za-z0-9_]+\}$")
_PARTITION = re.compile(r"^aws(-[a-z]+)*$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
# arn:<partition>:<service>:<region>:<account>:<resource>
_ARN = re.compile(
    r"^arn:(?P<partition>[^:]+):(?P<service>[^:]+):(?P<region>[^:]*):(?P<account>\d{12}):(?P<resource>.+)$"
)


class IamCheckMode(StrEnum):
    """What the IAM permission check does (``source.iam_check``, the operator's ``check_mode``).

    ``required``: the check must run; it fails when a permission is missing, and also when the
    check cannot run (a principal IAM cannot simulate, such as the account root user or a federated
    user; ``iam:SimulatePrincipalPolicy`` denied; an endpoint without that API), saying why.
    ``best_effort``: a missing permission fails as well, but a check that cannot run is skipped
    with a warning saying why. ``off``: no check.
    """

    REQUIRED = "required"
    BEST_EFFORT = "best_effort"
    OFF = "off"


def check_mode_from_skip_if_denied(skip_if_denied: bool) -> IamCheckMode:
    """The mode the deprecated boolean (``skip_iam_check_if_denied``, ``skip_if_simulation_denied``) stands for.

    :param skip_if_denied: ``True`` is ``best_effort``, ``False`` is ``required``.
    """
    return IamCheckMode.BEST_EFFORT if skip_if_denied else IamCheckMode.REQUIRED


def resolve_check_mode(
    check_mode: IamCheckMode | str | None, skip_if_simulation_denied: bool | None = None
) -> tuple[IamCheckMode, str | None]:
    """The check's mode (``required`` when neither is given), and a deprecation message when it came
    from the deprecated ``skip_if_simulation_denied``.

    :raises ValueError: both are given, or ``check_mode`` is not a mode.
    """
    deprecated = None
    if skip_if_simulation_denied is not None:
        if check_mode is not None:
            raise ValueError(
                "set only check_mode: skip_if_simulation_denied is its deprecated form "
                "(True is 'best_effort', False is 'required')"
            )
        check_mode = check_mode_from_skip_if_denied(skip_if_simulation_denied)
        deprecated = f"skip_if_simulation_denied is deprecated; use check_mode={check_mode.value!r}"
    try:
        return IamCheckMode(IamCheckMode.REQUIRED if check_mode is None else check_mode), deprecated
    except ValueError:
        modes = ", ".join(m.value for m in IamCheckMode)
        raise ValueError(f"check_mode must be one of {modes} (got {check_mode!r})") from None


class IamPolicyError(ValueError):
    """A parameter cannot be turned into an ARN, or a caller identity into an IAM principal."""


class UnsimulatablePrincipalError(IamPolicyError):
    """The caller is a principal IAM's policy simulator cannot simulate (the root user, a federated user).

    :param caller_arn: the STS GetCallerIdentity ARN.
    :param kind: what the caller is, for people (see :func:`principal_kind`).
    """

    def __init__(self, caller_arn: str, kind: str) -> None:
        super().__init__(
            f"cannot check the permissions of {caller_arn!r} ({kind}): only IAM users, IAM roles and assumed-role "
            "sessions can be simulated (not the root user or federated users)"
        )
        self.caller_arn = caller_arn
        self.kind = kind


@dataclass(frozen=True)
class Requirement:
    """Actions the connector performs on some resources, and why.

    :param sid: the policy statement this requirement belongs to; one statement per resource group.
    :param actions: IAM actions, ``service:Action``.
    :param resources: ARNs (the consumer ARN ends in a wildcard).
    :param purpose: what the connector does with them, for people reading the policy or a failure.
    :param conditions: ``(operator, key, value)`` triples the statement's ``Condition`` requires,
        e.g. ``("StringEquals", "cloudwatch:namespace", "KinesisSnowflake")``.
    """

    sid: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    purpose: str
    conditions: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class Decision:
    """The outcome of simulating one action on one resource for a principal."""

    action: str
    resource: str
    decision: str
    matched_statements: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return self.decision == ALLOWED

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "resource": self.resource,
            "decision": self.decision,
            "matched_statements": list(self.matched_statements),
        }


def partition_for_region(region: str) -> str:
    """The AWS partition a region belongs to: ``aws-cn`` for ``cn-*``, ``aws-us-gov`` for ``us-gov-*``."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    if region.startswith("us-isob-"):
        return "aws-iso-b"
    if region.startswith("us-iso-"):
        return "aws-iso"
    return "aws"


def _check(partition: str, region: str, account_id: str) -> None:
    if not _PARTITION.match(partition):
        raise IamPolicyError(f"partition {partition!r} is not an AWS partition such as 'aws' or 'aws-cn'")
    if not _REGION.match(region):
        raise IamPolicyError(f"region {region!r} is not an AWS region code such as 'us-east-1'")
    if not (_ACCOUNT_ID.match(account_id) or _PLACEHOLDER.match(account_id)):
        raise IamPolicyError(
            f"account id {account_id!r} must be 12 digits, or a placeholder such as {ACCOUNT_ID_PLACEHOLDER!r}"
        )


def _check_name(kind: str, name: str) -> None:
    if not _NAME.match(name):
        raise IamPolicyError(f"{kind} {name!r} must be letters, digits, '_', '.' or '-'")


def stream_arn(*, partition: str, region: str, account_id: str, stream_name: str) -> str:
    """``arn:<partition>:kinesis:<region>:<account>:stream/<name>``."""
    _check(partition, region, account_id)
    _check_name("stream name", stream_name)
    return f"arn:{partition}:kinesis:{region}:{account_id}:stream/{stream_name}"


def consumers_arn(*, partition: str, region: str, account_id: str, stream_name: str) -> str:
    """Every enhanced fan-out consumer of a stream: ``...:stream/<name>/consumer/*``.

    A consumer ARN ends in ``<consumer name>:<creation timestamp>``, so it changes whenever the
    consumer is registered again; the wildcard also covers consumers left behind by an earlier
    application name, which clean-up deregisters.
    """
    return (
        f"{stream_arn(partition=partition, region=region, account_id=account_id, stream_name=stream_name)}/consumer/*"
    )


def table_arn(*, partition: str, region: str, account_id: str, table_name: str) -> str:
    """``arn:<partition>:dynamodb:<region>:<account>:table/<name>``."""
    _check(partition, region, account_id)
    _check_name("table name", table_name)
    return f"arn:{partition}:dynamodb:{region}:{account_id}:table/{table_name}"


def all_tables_arn(*, partition: str, region: str, account_id: str) -> str:
    """Every DynamoDB table of an account and region: ``...:table/*``."""
    _check(partition, region, account_id)
    return f"arn:{partition}:dynamodb:{region}:{account_id}:table/*"


def required_permissions(
    *,
    stream_name: str,
    region: str,
    account_id: str,
    application_name: str,
    consumer_type: str = ConsumerType.SHARED_THROUGHPUT,
    partition: str | None = None,
    include_migration_table: bool = False,
    include_maintenance: bool = False,
    cloudwatch_namespace: str | None = None,
) -> list[Requirement]:
    """What a connector with these parameters needs, grouped by resource.

    :param stream_name: the Kinesis data stream.
    :param region: its AWS region.
    :param account_id: the AWS account id, or a placeholder such as ``${ACCOUNT_ID}``.
    :param application_name: names the DynamoDB lease table and the fan-out consumer.
    :param consumer_type: ``SHARED_THROUGHPUT`` or ``ENHANCED_FAN_OUT``.
    :param partition: the AWS partition; defaults to the region's (``aws-cn`` for ``cn-north-1``).
    :param include_migration_table: also grant what a migration from a legacy KCL lease table
        needs: ``<application>_migration`` and deleting the KCL table.
    :param include_maintenance: also grant what the reset, restore and clean-up DAGs need; the
        ingest policy itself is unchanged.
    :param cloudwatch_namespace: the namespace the connector publishes its metrics to
        (``metrics.cloudwatch``); None: no CloudWatch grant.
    """
    consumer_type = str(consumer_type)
    if consumer_type not in tuple(ConsumerType):
        raise IamPolicyError(f"consumer type {consumer_type!r} is not one of {', '.join(ConsumerType)}")
    partition = partition or partition_for_region(region)
    where = {"partition": partition, "region": region, "account_id": account_id}
    stream = stream_arn(stream_name=stream_name, **where)
    lease_table = table_arn(table_name=application_name, **where)

    requirements = [
        Requirement(
            sid="KinesisStream",
            actions=("kinesis:ListShards",),
            resources=(stream,),
            purpose="Discover the stream's shards and their parent/child lineage when a batch is planned.",
        ),
        Requirement(
            sid="KinesisStream",
            actions=("kinesis:GetShardIterator", "kinesis:GetRecords"),
            resources=(stream,),
            purpose="Read each planned shard range by shared-throughput polling, renewing expired iterators.",
        ),
        Requirement(
            sid="KinesisStream",
            actions=("kinesis:DescribeStreamSummary",),
            resources=(stream,),
            purpose="Record the stream's ARN and creation time in the lease table, and refuse to resume a stream "
            "that was deleted and created again.",
        ),
    ]
    if consumer_type == ConsumerType.ENHANCED_FAN_OUT:
        requirements += [
            Requirement(
                sid="KinesisStream",
                actions=(
                    "kinesis:RegisterStreamConsumer",
                    "kinesis:DescribeStreamConsumer",
                ),
                resources=(stream,),
                purpose=(
                    "Register the enhanced fan-out consumer "
                    f"{application_name!r} (named after the application) and poll its status until it is ACTIVE."
                ),
            ),
            Requirement(
                sid="KinesisFanOutConsumer",
                actions=(
                    "kinesis:SubscribeToShard",
                    "kinesis:DescribeStreamConsumer",
                    "kinesis:DeregisterStreamConsumer",
                ),
                resources=(consumers_arn(stream_name=stream_name, **where),),
                purpose=(
                    "Subscribe to shards through the consumer, describe it by its ARN, and deregister it on "
                    "reset or clean-up."
                ),
            ),
        ]
    requirements += lease_table_permissions(application_name=application_name, lease_table=lease_table)
    if include_migration_table:
        migration_table = f"{application_name}{MIGRATION_SUFFIX}"
        requirements += [
            Requirement(
                sid="DynamoDBLeaseTable",
                actions=("dynamodb:DeleteTable",),
                resources=(lease_table,),
                purpose=(
                    f"Delete the legacy KCL lease table {application_name!r} once its verified copy exists, so that "
                    "the new lease table can take its name."
                ),
            ),
            Requirement(
                sid="DynamoDBMigrationTable",
                actions=(
                    "dynamodb:DescribeTable",
                    "dynamodb:CreateTable",
                    "dynamodb:TagResource",
                    "dynamodb:BatchWriteItem",
                    "dynamodb:Scan",
                    "dynamodb:GetItem",
                    "dynamodb:PutItem",
                    "dynamodb:DeleteItem",
                    "dynamodb:DeleteTable",
                ),
                resources=(table_arn(table_name=migration_table, **where),),
                purpose=(
                    f"Copy the legacy KCL leases into {migration_table!r} (created and tagged), verify the copy and "
                    "mark it, read it back to write the new leases, then delete it."
                ),
            ),
        ]
    if include_maintenance:
        requirements += maintenance_permissions(stream_name=stream_name, **where)
    if cloudwatch_namespace is not None:
        requirements += cloudwatch_metrics_permissions(cloudwatch_namespace)
    return requirements


def cloudwatch_metrics_permissions(namespace: str) -> list[Requirement]:
    """What publishing the connector's metrics to CloudWatch needs: ``PutMetricData`` into ``namespace``.

    PutMetricData has no resource-level permission (its resource is ``*``); the ``cloudwatch:namespace``
    condition key keeps the grant to the connector's namespace.
    """
    return [
        Requirement(
            sid="CloudWatchMetrics",
            actions=("cloudwatch:PutMetricData",),
            resources=("*",),
            purpose=f"Publish each committed batch's metrics to the CloudWatch namespace {namespace!r} "
            "(metrics.cloudwatch); PutMetricData has no resource-level permission, so the grant is limited to "
            "the namespace by the cloudwatch:namespace condition key.",
            conditions=(("StringEquals", "cloudwatch:namespace", namespace),),
        )
    ]


def emr_serverless_permissions(
    *,
    application_id: str,
    execution_role_arn: str,
    artifacts: str,
    partition: str,
    region: str,
    account_id: str,
) -> list[Requirement]:
    """What the Airflow side of a connector on EMR Serverless needs (``spark.emr_serverless``).

    :param application_id: the EMR Serverless application.
    :param execution_role_arn: the job runtime role passed to it.
    :param artifacts: ``s3://bucket/prefix`` of the job's files and the driver logs.
    """
    _check(partition, region, account_id)
    application = f"arn:{partition}:emr-serverless:{region}:{account_id}:/applications/{application_id}"
    return [
        Requirement(
            sid="EmrServerlessJobRuns",
            actions=(
                "emr-serverless:GetApplication",
                "emr-serverless:StartApplication",
                "emr-serverless:StartJobRun",
                "emr-serverless:GetJobRun",
                "emr-serverless:CancelJobRun",
            ),
            resources=(application, f"{application}/jobruns/*"),
            purpose="Run each batch's Spark job as a job run of the connector's EMR Serverless application, wait "
            "for it, and cancel it when the task is killed; start the application when it is stopped.",
        ),
        Requirement(
            sid="EmrServerlessPassRole",
            actions=("iam:PassRole",),
            resources=(execution_role_arn,),
            purpose="Give the job runs their execution role (the driver's own AWS identity).",
            conditions=(("StringEquals", "iam:PassedToService", "emr-serverless.amazonaws.com"),),
        ),
        *artifacts_permissions("EmrServerless", artifacts, partition, reads="and read the driver's logs"),
    ]


def artifacts_permissions(sid: str, artifacts: str, partition: str, *, reads: str = "") -> list[Requirement]:
    """What uploading a managed Spark platform's job files needs: ``artifacts``' prefix only.

    :param sid: the platform's statement id prefix (``EmrServerless``, ``Glue``).
    :param reads: what else is read under the prefix, as the purpose says it.
    """
    bucket, _, prefix = artifacts.removeprefix("s3://").partition("/")
    prefix = prefix.strip("/")
    objects = f"arn:{partition}:s3:::{bucket}/{prefix}/*" if prefix else f"arn:{partition}:s3:::{bucket}/*"
    return [
        Requirement(
            sid=f"{sid}Artifacts",
            actions=("s3:GetObject", "s3:PutObject"),
            resources=(objects,),
            purpose="Upload the job's entry point and package zip (content-addressed)"
            + (f" {reads}" if reads else "")
            + ".",
        ),
        Requirement(
            sid=f"{sid}ArtifactsList",
            actions=("s3:ListBucket",),
            resources=(f"arn:{partition}:s3:::{bucket}",),
            purpose="Tell a file not uploaded yet from a denied one under the artifacts prefix.",
            conditions=(("StringLike", "s3:prefix", f"{prefix}/*" if prefix else "*"),),
        ),
    ]


def glue_permissions(
    *, job_name: str, role_arn: str, artifacts: str, partition: str, region: str, account_id: str
) -> list[Requirement]:
    """What the Airflow side of a connector on AWS Glue needs (``spark.glue``).

    :param job_name: the connector's Glue job, which the tasks define and run.
    :param role_arn: the job's role, passed to Glue.
    :param artifacts: ``s3://bucket/prefix`` of the job's files.
    """
    _check(partition, region, account_id)
    return [
        Requirement(
            sid="GlueJobRuns",
            actions=(
                "glue:GetJob",
                "glue:CreateJob",
                "glue:UpdateJob",
                "glue:StartJobRun",
                "glue:GetJobRun",
                "glue:GetJobRuns",
                "glue:BatchStopJobRun",
            ),
            resources=(f"arn:{partition}:glue:{region}:{account_id}:job/{job_name}",),
            purpose="Define the connector's Glue job (its script the uploaded entry point), run each batch's Spark "
            "job as a run of it, wait for it, and stop it when the task is killed.",
        ),
        Requirement(
            sid="GluePassRole",
            actions=("iam:PassRole",),
            resources=(role_arn,),
            purpose="Give the Glue job its role (the driver's own AWS identity).",
            conditions=(("StringEquals", "iam:PassedToService", "glue.amazonaws.com"),),
        ),
        *artifacts_permissions("Glue", artifacts, partition),
        Requirement(
            sid="GlueDriverLogs",
            actions=("logs:GetLogEvents",),
            resources=(f"arn:{partition}:logs:{region}:{account_id}:log-group:/aws-glue/jobs/*:log-stream:*",),
            purpose="Read a failed job run's last driver lines for the task's error.",
        ),
    ]


def lease_table_permissions(*, application_name: str, lease_table: str) -> list[Requirement]:
    """What any source needs on its lease table (named after the application), whose ARN is ``lease_table``."""
    return [
        Requirement(
            sid="DynamoDBLeaseTable",
            actions=(
                "dynamodb:DescribeTable",
                "dynamodb:CreateTable",
                "dynamodb:TagResource",
                "dynamodb:DescribeTimeToLive",
                "dynamodb:UpdateTimeToLive",
            ),
            resources=(lease_table,),
            purpose=(
                f"Create the lease table {application_name!r} (on demand, tagged so that clean-up recognises it; "
                "CreateTable with tags needs TagResource), wait until it is ACTIVE, and turn on its time to live "
                "(worker items of tries that died)."
            ),
        ),
        Requirement(
            sid="DynamoDBLeaseTable",
            actions=(
                "dynamodb:GetItem",
                "dynamodb:BatchGetItem",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                "dynamodb:Scan",
            ),
            resources=(lease_table,),
            purpose="Read the table's metadata and the listed shards' leases by key; create, take, renew, "
            "checkpoint and release leases with conditional writes; record worker heartbeats. Scan only when a "
            "lost table is adopted, or a table without a metadata item is checked before it is used.",
        ),
        Requirement(
            sid="DynamoDBLeaseTable",
            actions=("dynamodb:DeleteItem",),
            resources=(lease_table,),
            purpose="Delete a try's heartbeat item when it ends (best effort), and the lease of a parent shard "
            "that reached SHARD_END once its children started.",
        ),
    ]


def table_streams_arn(*, partition: str, region: str, account_id: str, table_name: str) -> str:
    """Every stream of a DynamoDB table: ``...:table/<name>/stream/*``.

    A stream's ARN ends in its label, a time, which changes whenever the stream is enabled again.
    """
    return f"{table_arn(partition=partition, region=region, account_id=account_id, table_name=table_name)}/stream/*"


def dynamodb_source_permissions(
    *,
    region: str,
    account_id: str,
    application_name: str,
    tables: Sequence[str] | None,
    partition: str | None = None,
    cloudwatch_namespace: str | None = None,
) -> list[Requirement]:
    """What a connector syncing DynamoDB tables needs, grouped by resource.

    :param region: the tables' region.
    :param account_id: the AWS account id, or a placeholder such as ``${ACCOUNT_ID}``.
    :param application_name: names the lease table.
    :param tables: the tables listed in ``source.tables``; None when they are discovered by tags,
        which cannot be known when the policy is written: then the source grants cover every table
        and stream of the account and region (``table/*``), and ``tag:GetResources`` is granted.
    :param partition: the AWS partition; defaults to the region's.
    :param cloudwatch_namespace: the namespace the connector publishes its metrics to
        (``metrics.cloudwatch``); None: no CloudWatch grant.
    """
    partition = partition or partition_for_region(region)
    where = {"partition": partition, "region": region, "account_id": account_id}
    if tables is None:
        sources: tuple[str, ...] = (all_tables_arn(**where),)
        streams: tuple[str, ...] = (f"{all_tables_arn(**where)}/stream/*",)
    else:
        if not tables:
            raise IamPolicyError("a DynamoDB source needs at least one table, or discovery by tags")
        sources = tuple(table_arn(table_name=name, **where) for name in sorted(set(tables)))
        streams = tuple(table_streams_arn(table_name=name, **where) for name in sorted(set(tables)))
    requirements = [
        Requirement(
            sid="DynamoDBSourceTables",
            actions=("dynamodb:DescribeTable",),
            resources=sources,
            purpose="Discovery: read each table's status, key schema, read capacity and stream (enabled, view type, "
            "ARN) to decide whether it is synced.",
        ),
        Requirement(
            sid="DynamoDBSourceTables",
            actions=("dynamodb:Scan",),
            resources=sources,
            purpose="The snapshot: a parallel Scan (Segment/TotalSegments) of each table, eventually consistent, at "
            "the configured read rate.",
        ),
        Requirement(
            sid="DynamoDBSourceStreams",
            actions=("dynamodb:DescribeStream", "dynamodb:GetShardIterator", "dynamodb:GetRecords"),
            resources=streams,
            purpose="Follow each table's stream (its ARN is DescribeTable's LatestStreamArn, so no ListStreams): "
            "list its shards and their parents, and read each shard's records.",
        ),
    ]
    if tables is None:
        requirements.append(
            Requirement(
                sid="TaggingGetResources",
                actions=("tag:GetResources",),
                resources=("*",),
                purpose="Discovery: find the DynamoDB tables carrying the ingestion (and environment) tags "
                "(GetResources has no resource-level permission).",
            )
        )
    requirements += lease_table_permissions(
        application_name=application_name, lease_table=table_arn(table_name=application_name, **where)
    )
    if cloudwatch_namespace is not None:
        requirements += cloudwatch_metrics_permissions(cloudwatch_namespace)
    return requirements


def maintenance_permissions(*, stream_name: str, partition: str, region: str, account_id: str) -> list[Requirement]:
    """What the reset, restore and clean-up DAGs need beyond ingestion, for one connector's stream."""
    where = {"partition": partition, "region": region, "account_id": account_id}
    stream = stream_arn(stream_name=stream_name, **where)
    every_table = all_tables_arn(**where)
    return [
        Requirement(
            sid="KinesisStream",
            actions=("kinesis:DescribeStreamSummary", "kinesis:ListStreamConsumers"),
            resources=(stream,),
            purpose=(
                "Clean-up: read the stream's retention period and list its enhanced fan-out consumers (by the "
                "stream ARN). Clean-up also describes the streams of other lease tables it sees; a table whose "
                "stream this role may not describe is kept (stream-unknown)."
            ),
        ),
        Requirement(
            sid="KinesisFanOutConsumer",
            actions=("kinesis:DeregisterStreamConsumer",),
            resources=(consumers_arn(stream_name=stream_name, **where),),
            purpose="Clean-up: deregister the consumer of an application no enhanced fan-out connector uses.",
        ),
        Requirement(
            sid="DynamoDBMaintenance",
            actions=(
                "dynamodb:DescribeTable",
                "dynamodb:CreateTable",
                "dynamodb:TagResource",
                "dynamodb:DescribeTimeToLive",
                "dynamodb:UpdateTimeToLive",
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                "dynamodb:DeleteItem",
                "dynamodb:Scan",
                "dynamodb:DeleteTable",
            ),
            resources=(every_table,),
            purpose="Reset and restore: mark the connector as resetting, hold and back up its leases, create the "
            "lease table of a new application name (chosen at trigger time) or delete and create the lease table "
            "again, write restored leases, and record which table supersedes which.",
        ),
        Requirement(
            sid="DynamoDBMaintenance",
            actions=("dynamodb:DescribeTable", "dynamodb:ListTagsOfResource", "dynamodb:Scan", "dynamodb:GetItem"),
            resources=(every_table,),
            purpose="Clean-up: read each table's tags (only tables tagged "
            "created-by=airflow-provider-kinesis-snowflake are considered), metadata, leases and heartbeats, and "
            "back up a table before deleting it.",
        ),
        Requirement(
            sid="DynamoDBListTables",
            actions=("dynamodb:ListTables",),
            resources=("*",),
            purpose="Clean-up: list the tables of the account and region (ListTables has no resource-level "
            "permission).",
        ),
    ]


def permission_check_permissions(principal: str) -> list[Requirement]:
    """What the IAM permission check needs: simulating the connector's own principal.

    IAM authorises ``iam:SimulatePrincipalPolicy`` on the principal simulated, so the grant names
    that principal only.

    :param principal: the ARN of the IAM user or role the connector's AWS connection runs as (an
        assumed-role session ARN stands for its role), or a placeholder such as
        :data:`PRINCIPAL_ARN_PLACEHOLDER`.
    :raises IamPolicyError: ``principal`` is not such an ARN, or is a principal IAM cannot simulate
        (the account root user, a federated user).
    """
    simulated = principal if _PLACEHOLDER.match(principal) else principal_arn(principal)
    return [
        Requirement(
            sid="IamPermissionCheck",
            actions=("iam:SimulatePrincipalPolicy",),
            resources=(simulated,),
            purpose="The IAM permission check of the provision DAG (source.iam_check required or best_effort): "
            "simulate this principal's permissions before anything is created.",
        )
    ]


def _statements(requirements: Iterable[Requirement]) -> dict[str, tuple[list[str], list[str]]]:
    """Actions and resources per statement id, in order of first appearance."""
    grouped: dict[str, tuple[list[str], list[str]]] = {}
    for requirement in requirements:
        actions, resources = grouped.setdefault(requirement.sid, ([], []))
        actions.extend(a for a in requirement.actions if a not in actions)
        resources.extend(r for r in requirement.resources if r not in resources)
    return grouped


def _conditions(requirements: Iterable[Requirement]) -> dict[str, dict[str, dict[str, str]]]:
    """The ``Condition`` block of each statement id that has one."""
    blocks: dict[str, dict[str, dict[str, str]]] = {}
    for requirement in requirements:
        for operator, key, value in requirement.conditions:
            blocks.setdefault(requirement.sid, {}).setdefault(operator, {})[key] = value
    return blocks


def policy_document(requirements: Iterable[Requirement]) -> dict[str, Any]:
    """An identity policy granting exactly ``requirements``: one Allow statement per resource group."""
    requirements = list(requirements)
    conditions = _conditions(requirements)
    return {
        "Version": POLICY_VERSION,
        "Statement": [
            {
                "Sid": sid,
                "Effect": "Allow",
                "Action": sorted(actions),
                "Resource": sorted(resources),
                **({"Condition": conditions[sid]} if sid in conditions else {}),
            }
            for sid, (actions, resources) in _statements(requirements).items()
        ],
    }


def simulation_pairs(requirements: Iterable[Requirement]) -> list[tuple[str, str]]:
    """Every (action, resource ARN) pair the policy grants, to check one by one with the IAM simulator."""
    pairs: list[tuple[str, str]] = []
    for actions, resources in _statements(requirements).values():
        for resource in sorted(resources):
            pairs.extend((action, resource) for action in sorted(actions) if (action, resource) not in pairs)
    return pairs


def purpose_of(requirements: Iterable[Requirement], action: str, resource: str) -> str:
    """Why the connector needs ``action`` on ``resource``; empty when it does not."""
    return " ".join(r.purpose for r in requirements if action in r.actions and resource in r.resources)


def principal_arn(caller_arn: str) -> str:
    """The IAM principal behind an STS GetCallerIdentity ARN, as SimulatePrincipalPolicy wants it.

    Users and roles are returned as they are; an assumed-role session
    ``arn:aws:sts::<account>:assumed-role/<role>/<session>`` becomes the role
    ``arn:aws:iam::<account>:role/<role>``. A role's path is not part of the session ARN, so a
    role created under a path cannot be found this way.
    """
    match = _ARN.match(caller_arn)
    if not match:
        raise IamPolicyError(f"{caller_arn!r} is not an IAM or STS ARN")
    partition, service, account, resource = match["partition"], match["service"], match["account"], match["resource"]
    if service == "iam" and resource.startswith(("user/", "role/")):
        return caller_arn
    if service == "sts" and resource.startswith("assumed-role/"):
        parts = resource.split("/")
        if len(parts) >= 3 and parts[1]:
            return f"arn:{partition}:iam::{account}:role/{parts[1]}"
    raise UnsimulatablePrincipalError(caller_arn, principal_kind(caller_arn))


def principal_kind(caller_arn: str) -> str:
    """What an STS GetCallerIdentity ARN is, in words: ``an IAM user``, ``the account root user``...

    Never raises: an ARN it does not know is ``a principal of unknown kind``.
    """
    match = _ARN.match(caller_arn)
    if not match:
        return f"not an IAM or STS ARN ({caller_arn!r})"
    service, resource = match["service"], match["resource"]
    if service == "iam" and resource == "root":
        return "the account root user"
    if service == "iam" and resource.startswith("user/"):
        return "an IAM user"
    if service == "iam" and resource.startswith("role/"):
        return "an IAM role"
    if service == "sts" and resource.startswith("assumed-role/"):
        role = resource.split("/")[1] if resource.count("/") >= 2 else "?"
        return f"an assumed-role session of role {role}"
    if service == "sts" and resource.startswith("federated-user/"):
        return "a federated user (GetFederationToken credentials)"
    return f"a principal of unknown kind ({service}:{resource})"


def partition_of(arn: str) -> str:
    """The partition field of an ARN (``aws``, ``aws-cn``, ...)."""
    parts = arn.split(":")
    if len(parts) < 6 or parts[0] != "arn":
        raise IamPolicyError(f"{arn!r} is not an ARN")
    return parts[1]


def describe_missing(
    principal: str,
    decisions: Sequence[Decision],
    requirements: Sequence[Requirement],
    policy: dict[str, Any],
) -> str:
    """A readable account of every denied action, with the policy that would grant them."""
    missing = [d for d in decisions if not d.allowed]
    lines = [f"{principal} lacks {len(missing)} of the {len(decisions)} permissions this connector needs:"]
    for decision in missing:
        line = f"  - {decision.action} on {decision.resource} ({decision.decision}"
        if decision.decision == EXPLICIT_DENY:
            statements = ", ".join(decision.matched_statements) or "a Deny statement"
            line += f" by {statements}: an Allow cannot override it, remove or narrow the Deny"
        line += ")"
        purpose = purpose_of(requirements, decision.action, decision.resource)
        if purpose:
            line += f"\n      needed to: {purpose}"
        lines.append(line)
    lines.append(f"Attach this policy to {principal}:")
    lines.append(json.dumps(policy, indent=2))
    return "\n".join(lines)


# Error codes of SimulatePrincipalPolicy that mean the check cannot run, rather than that it failed.
_ACCESS_DENIED = ("AccessDenied", "AccessDeniedException")
# What an endpoint without the IAM policy simulator may answer instead of a simulation.
_NOT_SERVED = (
    "InvalidAction",
    "NotImplemented",
    "UnknownOperation",
    "UnknownOperationException",
    "UnsupportedOperation",
)
_OTHER_ENDPOINT = "point the AWS connection at an IAM endpoint that has the policy simulator"


@dataclass(frozen=True)
class CheckCannotRun:
    """Why the IAM permission check cannot run, and what lets it run.

    :param reason: what happened, naming the caller, the principal, its kind and the error.
    :param fix: how to have the permissions checked, as a clause ("allow ... on ...").
    """

    reason: str
    fix: str

    def message(self, mode: IamCheckMode) -> str:
        """What the task says: a warning to skip with (``best_effort``), or why it fails (``required``)."""
        if mode is IamCheckMode.BEST_EFFORT:
            return f"{self.reason}\nTo have it checked: {self.fix}."
        return (
            f"{self.reason}\nThe IAM permission check could not run, and check_mode is 'required'. To go on: "
            f"{self.fix}; or set check_mode='best_effort' (in the connector file: source.iam_check: best_effort) "
            "to check whenever the check can run and skip it, with this warning, when it cannot, or 'off' not to check."
        )


def why_check_cannot_run(
    error: BaseException, *, caller_arn: str, principal: str | None = None, endpoint: str | None = None
) -> CheckCannotRun | None:
    """Tell an error that keeps the IAM check from running from one that is a failure of its own.

    :param error: what :func:`principal_arn` or IAM's SimulatePrincipalPolicy raised:
        :class:`UnsimulatablePrincipalError`, a botocore ``ClientError``, ``ResponseParserError``
        (an endpoint that does not answer as AWS does) or ``ConnectionError``.
    :param caller_arn: the STS GetCallerIdentity ARN of the connection.
    :param principal: the IAM principal that was simulated (see :func:`principal_arn`).
    :param endpoint: the IAM endpoint URL called.
    :return: the reason and the fix, or ``None`` when ``error`` is not about the check being unable
        to run (it is then to be raised as it is).
    """
    kind = principal_kind(caller_arn)
    if isinstance(error, UnsimulatablePrincipalError):
        return CheckCannotRun(
            f"{caller_arn} is {error.kind}, which IAM's SimulatePrincipalPolicy cannot simulate (it simulates IAM "
            "users, IAM roles and assumed-role sessions only), so the connector's permissions cannot be checked",
            "provision with the IAM user or role the connector runs as, or compare its policies with the "
            "output of `python -m airflow_kinesis_snowflake policy <connector file>`",
        )
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        code, text = details.get("Code", "?"), details.get("Message", str(error))
        said = f"AWS said: {code}: {text}"
        if code in _ACCESS_DENIED:
            return CheckCannotRun(
                f"{caller_arn} may not call iam:SimulatePrincipalPolicy, so the connector's permissions cannot be "
                f"checked (principal {principal}, {kind}). {said}",
                f"allow iam:SimulatePrincipalPolicy on {principal} to enable this check",
            )
        if code == "NoSuchEntity":
            return CheckCannotRun(
                f"IAM has no principal {principal} (the caller is {caller_arn}, {kind}); a role created under a "
                "path, such as an IAM Identity Center role (/aws-reserved/...), cannot be found from its session "
                f"ARN. {said}",
                "provision with an IAM user, or a role without a path, that holds the same policies",
            )
        if code in _NOT_SERVED:
            return CheckCannotRun(
                f"the IAM endpoint does not serve SimulatePrincipalPolicy (principal {principal}, {kind}). {said}",
                _OTHER_ENDPOINT,
            )
        return None
    first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
    said = f"botocore said: {type(error).__name__}: {first_line}"
    if isinstance(error, ResponseParserError):
        return CheckCannotRun(
            f"the IAM endpoint {endpoint} did not answer SimulatePrincipalPolicy as AWS does, so the connector's "
            f"permissions cannot be checked (principal {principal}, {kind}): an emulator without the IAM policy "
            f"simulator, such as the stock motoserver/moto image, answers this way. {said}",
            _OTHER_ENDPOINT,
        )
    if isinstance(error, BotocoreConnectionError):
        return CheckCannotRun(
            f"the IAM endpoint {endpoint} cannot be reached, so the connector's permissions cannot be checked "
            f"(principal {principal}, {kind}): IAM has no VPC endpoint, so a network without internet access "
            f"cannot reach it. {said}",
            _OTHER_ENDPOINT,
        )
    return None
