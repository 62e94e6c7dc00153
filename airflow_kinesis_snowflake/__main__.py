"""Command line: ``python -m airflow_kinesis_snowflake policy dags/connectors/orders.yaml``.

``policy`` prints the least-privilege IAM policy for one connector file, for an AWS administrator
to attach to the connector's user or role. ``dag-file`` writes the small DAG file that builds one
connector file's DAGs, so that each connector is a DAG file of its own in Airflow.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from airflow_kinesis_snowflake.config import ConnectorConfigError, load_connector_config
from airflow_kinesis_snowflake.core.admin.iam import (
    ACCOUNT_ID_PLACEHOLDER,
    IamPolicyError,
    policy_document,
    required_permissions,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m airflow_kinesis_snowflake")
    commands = parser.add_subparsers(dest="command", required=True)
    policy = commands.add_parser(
        "policy",
        help="print the IAM policy a connector needs",
        description="Print the least-privilege IAM policy (JSON) that a connector file needs.",
    )
    policy.add_argument("config", metavar="CONNECTOR_YAML", help="a connector file, e.g. dags/connectors/orders.yaml")
    policy.add_argument(
        "--account-id",
        default=ACCOUNT_ID_PLACEHOLDER,
        help=f"the AWS account of the stream and lease table (default: the placeholder {ACCOUNT_ID_PLACEHOLDER})",
    )
    policy.add_argument("--partition", default=None, help="AWS partition (default: the region's, e.g. aws, aws-cn)")
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
    return parser


def _dag_file(args: argparse.Namespace) -> int:
    from airflow_kinesis_snowflake.dags import dag_file_name, dag_files_calling, render_dag_file

    connector = Path(args.config)
    folder = Path(args.dag_folder) if args.dag_folder else connector.resolve().parent.parent
    try:
        load_connector_config(connector)
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


def _policy(args: argparse.Namespace) -> int:
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
            **common,
        )
        if args.active_application_name and args.active_application_name != config.source.application_name:
            # Same statements, one more table each: the policy document merges them.
            requirements += required_permissions(application_name=args.active_application_name, **common)
    except (ConnectorConfigError, IamPolicyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(json.dumps(policy_document(requirements), indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "policy":
        return _policy(args)
    if args.command == "dag-file":
        return _dag_file(args)
    return 2  # argparse rejects unknown commands before this


if __name__ == "__main__":
    sys.exit(main())
