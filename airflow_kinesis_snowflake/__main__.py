"""Command line: ``python -m airflow_kinesis_snowflake policy dags/connectors/orders.yaml``.

``init`` sets up a DAGs folder: the clean-up DAG file (the package's template, the same text as the
repository's ``dags/kinesis_snowflake_connectors.py``) and, when it has no connector file yet, a
``connectors/`` directory with a commented example and the example's DAG file. ``validate`` checks
every connector file of a directory, and across files, printing each problem with its file and
field. ``policy`` prints the least-privilege IAM policy for one connector file (a Kinesis stream's
or DynamoDB tables', and leave for the provision DAG's IAM check to simulate the connector's
principal), for an AWS administrator to attach to the connector's user or role.
``dag-file`` writes the small DAG file that builds one connector file's DAGs, so that each
connector is a DAG file of its own in Airflow.
``status`` prints, per connector and shard, the checkpoint, the lag and the last batch's rows and
dead letters, read from the lease table and Snowflake's batch outcomes table through Airflow's
connections (https://airflow-provider-kinesis-snowflake.github.io/airflow-provider-kinesis-snowflake/lag/).
``artifacts upload`` builds the job's files (the connector's entry point and the package zip, on
Databricks its wheel) and uploads them, content-addressed, to the artifacts location of a connector on a
managed Spark platform (``spark.emr_serverless.artifacts``, ``spark.glue.artifacts`` or
``spark.databricks.artifacts``), printing their URIs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import warnings
from collections.abc import Callable, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from airflow_kinesis_snowflake import docs_url
from airflow_kinesis_snowflake.config import (
    AnyConnectorConfig,
    ConnectorConfigError,
    connector_files,
    duplicate_connector_id_error,
    duplicate_connector_ids,
    load_any_connector_config,
    load_connector_config,
    load_dynamodb_connector_config,
    source_type,
)
from airflow_kinesis_snowflake.core.admin.iam import (
    ACCOUNT_ID_PLACEHOLDER,
    PRINCIPAL_ARN_PLACEHOLDER,
    IamCheckMode,
    IamPolicyError,
    Requirement,
    dynamodb_source_permissions,
    emr_serverless_permissions,
    glue_permissions,
    partition_for_region,
    permission_check_permissions,
    policy_document,
    required_permissions,
)
from airflow_kinesis_snowflake.registry import DEFAULT_SOURCE, SOURCE_TYPES, registered

# The package's templates (package data): the clean-up DAG file, the same text as the repository's
# dags/kinesis_snowflake_connectors.py, and the example connector file.
TEMPLATES = "templates"
CLEANUP_TEMPLATE = "kinesis_snowflake_connectors.py.txt"
EXAMPLE_CONNECTOR = "example.yaml"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m airflow_kinesis_snowflake")
    commands = parser.add_subparsers(dest="command", required=True)
    policy = commands.add_parser(
        "policy",
        help="print the IAM policy a connector needs",
        description="Print the least-privilege IAM policy (JSON) that a connector file needs: for a Kinesis "
        "stream, the stream and the lease table; for DynamoDB tables (source.type: dynamodb), the tables, their "
        "streams, the tagging API when they are discovered by tags, and the lease table.",
    )
    policy.add_argument("config", metavar="CONNECTOR_YAML", help="a connector file, e.g. dags/connectors/orders.yaml")
    policy.add_argument(
        "--account-id",
        default=ACCOUNT_ID_PLACEHOLDER,
        help=f"the AWS account of the stream and lease table (default: the placeholder {ACCOUNT_ID_PLACEHOLDER})",
    )
    policy.add_argument("--partition", default=None, help="AWS partition (default: the region's, e.g. aws, aws-cn)")
    policy.add_argument(
        "--principal",
        metavar="ARN",
        default=None,
        help="the IAM user or role the connector's AWS connection runs as, on which the IAM permission check "
        f"(source.iam_check) needs iam:SimulatePrincipalPolicy (default: the placeholder {PRINCIPAL_ARN_PLACEHOLDER}; "
        "not granted when source.iam_check is off)",
    )
    policy.add_argument(
        "--include-migration-table",
        action="store_true",
        help="also grant the <application>_migration table used to migrate legacy KCL checkpoints",
    )
    policy.add_argument(
        "--include-maintenance",
        action="store_true",
        help="also grant what the reset, restore and clean-up DAGs need (every table of the account and region)",
    )
    policy.add_argument(
        "--active-application-name",
        metavar="NAME",
        default=None,
        help="after a reset to a new application name: also grant the lease-table permissions on NAME's table "
        "(ingestion reads the connector file's table, then the one it was superseded by)",
    )
    dag_file = commands.add_parser(
        "dag-file",
        help="write the DAG file of a connector file",
        description="Write kinesis_snowflake_<name>.py, the DAG file that builds the DAGs of one connector file, "
        "into the DAGs folder (by default the connector file's directory's parent, e.g. dags/).",
    )
    dag_file.add_argument("config", metavar="CONNECTOR_YAML", help="a connector file, e.g. dags/connectors/orders.yaml")
    dag_file.add_argument("--dag-folder", default=None, help="the DAGs folder (default: the connectors' parent)")
    dag_file.add_argument("--force", action="store_true", help="overwrite an existing DAG file")
    init = commands.add_parser(
        "init",
        help="set up a DAGs folder: the clean-up DAG file and an example connector",
        description="Write kinesis_snowflake_connectors.py, the DAG file of the connectors/ directory's clean-up DAG, "
        f"into DAGS_FOLDER; when connectors/ holds no connector file yet, also write connectors/{EXAMPLE_CONNECTOR}, "
        "a commented example, and its DAG file. Existing files with other content are kept unless --force.",
    )
    init.add_argument("dag_folder", metavar="DAGS_FOLDER", help="Airflow's DAGs folder ([core] dags_folder)")
    init.add_argument("--force", action="store_true", help="overwrite files that exist with other content")
    validate = commands.add_parser(
        "validate",
        help="check every connector file of a directory",
        description="Validate every connector file (*.yaml, *.yml) of DIRECTORY and check them against each other "
        "(connector ids, application names, DAG files); print each problem with its file and field. Exit status 1 "
        "when there is a problem.",
    )
    validate.add_argument("directory", metavar="DIRECTORY", help="a directory of connector files, e.g. dags/connectors")
    status = commands.add_parser(
        "status",
        help="print each connector's shards: checkpoint, lag, last batch",
        description="For each connector of a DAGs folder (its connectors/ directory) or of one connector file, print "
        "each shard's checkpoint and its age, its lag, its last batch, and that batch's rows and dead letters; for a "
        "DynamoDB connector, each table's generation, snapshot progress and last batch, and each stream shard's "
        "checkpoint and its age. They are read from the lease table and Snowflake's tables, through Airflow's "
        "connections (the connector's connections: ids). Exit status 1 when a connector could not be read, a "
        "Kinesis shard's lag is past 90% of the stream's retention, or a DynamoDB stream shard's checkpoint age is "
        "past 90% of the safe age (max_checkpoint_age_hours).",
    )
    status.add_argument(
        "path",
        metavar="DAGS_FOLDER_OR_CONNECTOR_YAML",
        nargs="?",
        help="a DAGs folder or one connector file (default: Airflow's [core] dags_folder)",
    )
    status.add_argument("--json", action="store_true", help="print JSON instead of tables")
    status.add_argument("--batches", type=int, default=20, help="recent batches read per connector (default 20)")
    artifacts = commands.add_parser(
        "artifacts",
        help="build and upload the job's files for a managed Spark platform",
        description="Build the Spark job's files of a connector on a managed Spark platform (spark.platform: "
        "emr_serverless, glue or databricks): its source's entry point (on Glue the Glue job's script) and the "
        "package zip (on Databricks a wheel), and upload them to spark.emr_serverless.artifacts, spark.glue.artifacts "
        "or spark.databricks.artifacts under keys that hold a hash of their bytes (a file already there is not "
        "uploaded again), through the connector's AWS connection (on Databricks its workspace connection). Prints "
        "each file's URI. The tasks upload them too on first use.",
    )
    actions = artifacts.add_subparsers(dest="action", required=True)
    upload = actions.add_parser("upload", help="build and upload the job's files, print their URIs")
    upload.add_argument("--connector", required=True, metavar="CONNECTOR_YAML", help="a connector file")
    return parser


def _artifacts(args: argparse.Namespace) -> int:
    try:
        config = load_any_connector_config(args.connector)
    except ConnectorConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    emr, glue, databricks = config.spark.emr_serverless, config.spark.glue, config.spark.databricks
    if emr is None and glue is None and databricks is None:
        print(
            f"error: {args.connector}: spark.platform is {config.spark.platform}, which runs the job from this "
            "worker's files: nothing to upload. Set spark.platform: emr_serverless and spark.emr_serverless.artifacts "
            f"({docs_url('spark', 'emr-serverless')}), glue and spark.glue.artifacts "
            f"({docs_url('spark', 'aws-glue')}), or databricks and spark.databricks.artifacts "
            f"({docs_url('spark', 'databricks')})",
            file=sys.stderr,
        )
        return 1
    # Airflow's and the clients' log lines go to standard error: standard output is the URIs.
    with contextlib.redirect_stdout(sys.stderr):
        from airflow_kinesis_snowflake.hooks.artifacts import SOURCE_APPLICATIONS

        application = SOURCE_APPLICATIONS[config.source_type]
        if databricks is not None:
            from airflow_kinesis_snowflake.hooks.platforms import platform_submitter

            submitter: Any = platform_submitter(
                databricks.platform_arguments(), aws_conn_id=config.connections.aws, region_name=config.source.region
            )
            uploaded = list(submitter.upload(application))
        else:
            from airflow.providers.amazon.aws.hooks.s3 import S3Hook

            from airflow_kinesis_snowflake.hooks.artifacts import upload_job_artifacts

            s3 = S3Hook(aws_conn_id=config.connections.aws, region_name=config.source.region)
            if glue is not None:
                from airflow_kinesis_snowflake.hooks.glue import GLUE_APPLICATION

                application = GLUE_APPLICATION
            location = emr.artifacts if emr is not None else glue.artifacts  # type: ignore[union-attr]
            uploaded = list(upload_job_artifacts(s3, location, application))
    for artifact in uploaded:
        print(f"{artifact.uri}\t{'uploaded' if artifact.uploaded else 'already there'}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from airflow_kinesis_snowflake.core.lag import LagLevel

    # Airflow's and the clients' log lines go to standard error (Airflow binds its log output when it
    # is first imported, so the import is inside too): standard output is the report.
    with contextlib.redirect_stdout(sys.stderr):
        from airflow_kinesis_snowflake.status import any_connector_status, connector_configs

        path = args.path
        if path is None:
            from airflow.configuration import conf

            path = conf.get("core", "dags_folder")
        try:
            configs = connector_configs(path)
        except (ConnectorConfigError, FileNotFoundError) as err:
            print(f"error: {err}")
            return 1
        statuses = [any_connector_status(config, batches=args.batches) for config in configs]
    if args.json:
        print(json.dumps([s.to_dict() for s in statuses], indent=2))
    else:
        print("\n\n".join(s.text() for s in statuses))
    failed = any(s.error is not None for s in statuses)
    return 1 if failed or any(s.worst_level() is LagLevel.ERROR for s in statuses) else 0


def _dag_file(args: argparse.Namespace) -> int:
    from airflow_kinesis_snowflake.dags import dag_file_name, dag_files_calling, render_dag_file

    connector = Path(args.config)
    folder = Path(args.dag_folder) if args.dag_folder else connector.resolve().parent.parent
    try:
        load_any_connector_config(connector)
        target = folder / dag_file_name(connector)
        source = render_dag_file(connector, folder)
    except (ConnectorConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    single = dag_files_calling(folder, "build_connector_dags")
    if single:
        print(
            f"error: {', '.join(str(p) for p in single)} build every connector's DAGs with build_connector_dags; "
            f"a DAG file of its own for {connector} would define the same DAG ids a second time. First replace "
            "that call with build_cleanup_dags(<connectors directory>) (see dags/kinesis_snowflake_connectors.py), "
            "then write a DAG file for each connector file.",
            file=sys.stderr,
        )
        return 1
    if target.exists() and not args.force:
        print(f"error: {target} exists; --force overwrites it", file=sys.stderr)
        return 1
    target.write_text(source, encoding="utf-8")
    print(target)
    return 0


def template_text(*parts: str) -> str:
    """The text of a file under the package's ``templates/`` directory."""
    resource = files("airflow_kinesis_snowflake") / TEMPLATES
    for part in parts:
        resource = resource / part
    return resource.read_text(encoding="utf-8")


def _init(args: argparse.Namespace) -> int:
    from airflow_kinesis_snowflake.dags import (
        CLEANUP_DAG_FILE,
        dag_file_errors,
        dag_file_name,
        dag_files_calling,
        render_dag_file,
    )

    folder = Path(args.dag_folder)
    if folder.exists() and not folder.is_dir():
        print(f"error: {folder} is not a directory", file=sys.stderr)
        return 1
    single = dag_files_calling(folder, "build_connector_dags")
    if single:
        print(
            f"error: {', '.join(str(p) for p in single)} build every connector's DAGs with build_connector_dags; "
            f"{CLEANUP_DAG_FILE} and a DAG file per connector would define the same DAG ids a second time. Replace "
            "that call with build_cleanup_dags(<connectors directory>) first, or keep that file and skip init.",
            file=sys.stderr,
        )
        return 1
    connectors = folder / "connectors"
    example = connectors / EXAMPLE_CONNECTOR
    others = [path for path in connector_files(connectors) if path != example]
    planned = {folder / CLEANUP_DAG_FILE: template_text(CLEANUP_TEMPLATE)}
    if not others:
        planned[example] = template_text("connectors", EXAMPLE_CONNECTOR)
        planned[folder / dag_file_name(example, collisions={})] = render_dag_file(example, folder)
    existing = {path: path.read_text(encoding="utf-8") for path in planned if path.is_file()}
    conflicts = [path for path, text in planned.items() if path in existing and existing[path] != text]
    if conflicts and not args.force:
        print(
            f"error: {', '.join(str(p) for p in conflicts)} exist with other content; nothing was written "
            "(--force overwrites them)",
            file=sys.stderr,
        )
        return 1
    for path, text in planned.items():
        if existing.get(path) == text:
            print(f"unchanged {path}")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    if others:
        print(f"{connectors} already holds {len(others)} connector file(s): no example written")
        for problem in dag_file_errors(connectors, folder):
            print(f"note: {problem}")
    print(
        f"next: edit or copy {example}, write each connector file's DAG file with "
        f"`python -m airflow_kinesis_snowflake dag-file {connectors}/<name>.yaml`, check them with "
        f"`python -m airflow_kinesis_snowflake validate {connectors}` ({docs_url('install', '2-the-dags-folder')})"
    )
    return 0


def _problems(err: ConnectorConfigError) -> list[str]:
    """One line per problem of a connector file's error: ``<file>: <field>: <what is wrong>``."""
    first, *rest = str(err).splitlines()
    heading = ": invalid connector configuration"
    if first.endswith(heading) and rest and all(line.startswith("  - ") for line in rest):
        source = first.removesuffix(heading)
        return [f"{source}: {line.removeprefix('  - ')}" for line in rest]
    # Unreadable or not YAML: one line, with the parser's position.
    return [" ".join(line.strip() for line in (first, *rest) if line.strip())]


def _shared_application_names(configs: dict[Path, AnyConnectorConfig]) -> list[str]:
    """Connector files whose application name an earlier file has, on the same AWS connection and region."""
    first: dict[tuple[str, str, str], Path] = {}
    problems = []
    for path, config in configs.items():
        key = (config.connections.aws, config.source.region, config.source.application_name)
        if key in first:
            problems.append(
                f"{path}: source.application_name: {key[2]!r} is also the application name of {first[key]}, with "
                f"the same AWS connection ({key[0]}) and region ({key[1]}): the two connectors would share one "
                "DynamoDB lease table; give each connector an application name of its own"
            )
        else:
            first[key] = path
    return problems


def _dag_file_problems(directory: Path, paths: list[Path]) -> list[str]:
    """What keeps the connector files from having DAG files of their own in the directory's parent."""
    from airflow_kinesis_snowflake.dags import dag_file_collisions, dag_file_errors, dag_file_name, dag_files_calling

    folder = directory.parent
    if dag_files_calling(folder, "build_connector_dags"):
        return []  # one DAG file builds every connector's DAGs: no DAG file per connector
    if dag_files_calling(folder, "build_cleanup_dags"):
        return dag_file_errors(directory, folder)
    # Not in a DAGs folder yet: only what would keep a DAG file from being written.
    collisions = dag_file_collisions(directory)
    problems = []
    for path in paths:
        try:
            dag_file_name(path, collisions=collisions)
        except ConnectorConfigError as err:
            problems.append(str(err))
    return problems


def _validate(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    if not directory.is_dir():
        print(f"error: {directory} is not a directory of connector files", file=sys.stderr)
        return 1
    paths = connector_files(directory)
    if not paths:
        print(f"error: {directory} holds no connector file (*.yaml, *.yml)", file=sys.stderr)
        return 1
    problems: list[str] = []
    configs: dict[Path, AnyConnectorConfig] = {}
    for path in paths:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                configs[path] = load_any_connector_config(path)
            except ConnectorConfigError as err:
                problems.extend(_problems(err))
        for warning in caught:
            if str(warning.message).startswith(f"{path}:"):
                print(f"warning: {warning.message}")
    for path, first in duplicate_connector_ids(paths).items():
        if path in configs:
            problems.append(str(duplicate_connector_id_error(path, configs[path].connector_id, first)))
    problems += _shared_application_names(configs)
    problems += _dag_file_problems(directory, paths)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s) in the {len(paths)} connector file(s) of {directory}")
        return 1
    ids = ", ".join(config.connector_id for config in configs.values())
    print(f"{len(paths)} connector file(s) in {directory} valid: {ids}")
    return 0


def _source_type(path: str) -> str:
    """The ``source.type`` a connector file names (an unreadable file, or an unknown type, is left to the
    loader of a Kinesis connector, which reports it)."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return DEFAULT_SOURCE
    kind = source_type(data)
    return kind if kind in SOURCE_TYPES else DEFAULT_SOURCE


# Options of the Kinesis policy that have no counterpart for a DynamoDB source, and why.
_KINESIS_ONLY_OPTIONS = {
    "include_migration_table": (
        "--include-migration-table",
        "a DynamoDB source has no legacy KCL lease table to migrate",
    ),
    "include_maintenance": (
        "--include-maintenance",
        "the reset, restore and clean-up DAGs do not act on a DynamoDB source's tables in this version",
    ),
    "active_application_name": (
        "--active-application-name",
        "a DynamoDB source is not reset to a new application name in this version",
    ),
}


def _permission_check(args: argparse.Namespace, config: AnyConnectorConfig) -> list[Requirement]:
    """What the connector's IAM permission check needs: nothing when ``source.iam_check`` is off.

    :raises IamPolicyError: ``--principal`` is given with the check off, or is not a principal IAM can simulate.
    """
    if config.source.iam_check is IamCheckMode.OFF:
        if args.principal is not None:
            raise IamPolicyError(
                f"{args.config}: --principal is the principal the IAM permission check simulates, and "
                "source.iam_check is off; leave --principal out, or set source.iam_check to required or best_effort"
            )
        return []
    try:
        return permission_check_permissions(args.principal or PRINCIPAL_ARN_PLACEHOLDER)
    except IamPolicyError as err:
        raise IamPolicyError(
            f"--principal: {err}; give the ARN of the IAM user or role the connector's AWS connection runs as, "
            f"or set source.iam_check: off in {args.config}"
        ) from err


def _platform_permissions(args: argparse.Namespace, config: AnyConnectorConfig) -> list[Requirement]:
    """What running the job on the connector's Spark platform needs of the Airflow side (nothing for spark-submit)."""
    partition = args.partition or partition_for_region(config.source.region)
    if (glue := config.spark.glue) is not None:
        return glue_permissions(
            job_name=glue.job_name,
            role_arn=glue.role_arn,
            artifacts=glue.artifacts,
            partition=partition,
            region=config.source.region,
            account_id=args.account_id,
        )
    emr = config.spark.emr_serverless
    if emr is None:
        return []
    return emr_serverless_permissions(
        application_id=emr.application_id,
        execution_role_arn=emr.execution_role_arn,
        artifacts=emr.artifacts,
        partition=partition,
        region=config.source.region,
        account_id=args.account_id,
    )


def _print_policy(args: argparse.Namespace, requirements: list[Requirement]) -> int:
    print(json.dumps(policy_document(requirements), indent=2))
    if any(PRINCIPAL_ARN_PLACEHOLDER in r.resources for r in requirements):
        print(
            f"note: replace {PRINCIPAL_ARN_PLACEHOLDER} with the ARN of the IAM user or role the connector's AWS "
            "connection runs as (or pass --principal): the provision DAG's IAM permission check simulates it",
            file=sys.stderr,
        )
    return 0


def dynamodb_policy(args: argparse.Namespace) -> int:
    """Print the IAM policy of a DynamoDB connector file (its registry part ``policy``)."""
    for option, (flag, why) in _KINESIS_ONLY_OPTIONS.items():
        if getattr(args, option):
            print(f"error: {args.config}: {flag} does not apply: {why}; leave it out", file=sys.stderr)
            return 1
    try:
        config = load_dynamodb_connector_config(args.config)
        requirements = dynamodb_source_permissions(
            region=config.source.region,
            account_id=args.account_id,
            application_name=config.source.application_name,
            tables=config.source.tables,
            partition=args.partition,
            cloudwatch_namespace=config.metrics.cloudwatch_namespace,
        )
        requirements += _permission_check(args, config)
        requirements += _platform_permissions(args, config)
    except (ConnectorConfigError, IamPolicyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return _print_policy(args, requirements)


def _policy(args: argparse.Namespace) -> int:
    policy: Callable[[argparse.Namespace], int] = registered(_source_type(args.config)).part("policy")
    return policy(args)


def kinesis_policy(args: argparse.Namespace) -> int:
    """Print the IAM policy of a Kinesis connector file (its registry part ``policy``)."""
    try:
        config = load_connector_config(args.config)
        common = {
            "stream_name": config.source.stream_name,
            "region": config.source.region,
            "account_id": args.account_id,
            "consumer_type": config.source.consumer_type.value,
            "partition": args.partition,
        }
        requirements = required_permissions(
            application_name=config.source.application_name,
            include_migration_table=args.include_migration_table,
            include_maintenance=args.include_maintenance,
            cloudwatch_namespace=config.metrics.cloudwatch_namespace,
            **common,
        )
        if args.active_application_name and args.active_application_name != config.source.application_name:
            # Same statements, one more table each: the policy document merges them.
            requirements += required_permissions(application_name=args.active_application_name, **common)
        requirements += _permission_check(args, config)
        requirements += _platform_permissions(args, config)
    except (ConnectorConfigError, IamPolicyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return _print_policy(args, requirements)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "policy":
        return _policy(args)
    if args.command == "dag-file":
        return _dag_file(args)
    if args.command == "init":
        return _init(args)
    if args.command == "validate":
        return _validate(args)
    if args.command == "status":
        return _status(args)
    if args.command == "artifacts":
        return _artifacts(args)
    return 2  # argparse rejects unknown commands before this


if __name__ == "__main__":
    sys.exit(main())
