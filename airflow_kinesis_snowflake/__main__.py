"""Command line: ``python -m airflow_kinesis_snowflake policy dags/connectors/orders.yaml``.

``policy`` prints the least-privilege IAM policy for one connector file, for an AWS administrator
to attach to the connector's user or role.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from airflow_kinesis_snowflake.config import ConnectorConfigError, load_connector_config
from airflow_kinesis_snowflake.core.iam import (
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
    return parser


def _policy(args: argparse.Namespace) -> int:
    try:
        config = load_connector_config(args.config)
        requirements = required_permissions(
            stream_name=config.source.stream_name,
            region=config.source.region,
            account_id=args.account_id,
            application_name=config.source.application_name,
            consumer_type=config.source.consumer_type.value,
            partition=args.partition,
            include_migration_table=args.include_migration_table,
        )
    except (ConnectorConfigError, IamPolicyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(json.dumps(policy_document(requirements), indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "policy":
        return _policy(args)
    return 2  # argparse rejects unknown commands before this


if __name__ == "__main__":
    sys.exit(main())
