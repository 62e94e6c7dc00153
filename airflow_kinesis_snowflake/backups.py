"""Where backups go, and the one place they are written and read.

Local paths need nothing more. ``s3://<aws connection id>@<bucket>/<prefix>`` uses an Airflow
connection and needs ``s3fs`` (the Amazon provider's ``s3fs`` extra); any other fsspec protocol
works once its filesystem package is installed. Without a location, backups go to
``$AIRFLOW_HOME/kinesis_snowflake_backups``, which suits a single machine; with several workers,
point every DAG at shared storage (``build_connector_dags(..., backup_dir=...)``).

Two documents are written: a lease table's checkpoint backup
(:class:`~airflow_kinesis_snowflake.core.state.backups.CheckpointBackup`, by reset, restore and
clean-up, read back by restore) and the items of a legacy migration's copy that clean-up removes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import ObjectStoragePath

from airflow_kinesis_snowflake.core.admin.window import AdminError
from airflow_kinesis_snowflake.core.state.backups import CheckpointBackup
from airflow_kinesis_snowflake.core.state.errors import MaintenanceError

DEFAULT_DIRECTORY_NAME = "kinesis_snowflake_backups"
MIGRATION_COPY_FORMAT = "airflow-kinesis-snowflake/migration-copy"


def default_backup_dir() -> str:
    """``$AIRFLOW_HOME/kinesis_snowflake_backups`` (``~/airflow`` when AIRFLOW_HOME is not set)."""
    home = os.environ.get("AIRFLOW_HOME") or os.path.join("~", "airflow")
    return os.path.join(os.path.expanduser(home), DEFAULT_DIRECTORY_NAME)


def write_backup(text: str, name: str, backup_dir: str | None = None) -> str:
    """Write ``text`` to ``<backup_dir>/<name>``; returns where it went (a path or URL).

    :param name: a relative name such as ``orders-to-snowflake/20260131T120000000000Z-reset.json``.
    :param backup_dir: a directory path or URL; None for :func:`default_backup_dir`.
    """
    path = ObjectStoragePath(backup_dir or default_backup_dir()) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def write_checkpoint_backup(backup: CheckpointBackup, backup_dir: str | None = None) -> str:
    """Write a lease table's checkpoint backup (reset, restore and clean-up alike); returns where it went.

    :param backup: from :func:`~airflow_kinesis_snowflake.core.state.backups.snapshot`, which records
        whose progress it is (connector, application name, stream, destination).
    :param backup_dir: a directory path or URL; None for :func:`default_backup_dir`.
    """
    return write_backup(backup.to_json(), backup.file_name, backup_dir)


def read_backup(location: str) -> str:
    """The text of the backup at ``location`` (a path or URL, as :func:`write_backup` returned it)."""
    return ObjectStoragePath(location).read_text()


def read_checkpoint_backup(location: str) -> CheckpointBackup:
    """The checkpoint backup at ``location``; :class:`AdminError` saying why it cannot be read or used."""
    try:
        text = read_backup(location)
    except (OSError, ValueError) as err:
        raise AdminError(f"cannot read the backup {location!r}: {err}") from err
    try:
        return CheckpointBackup.from_json(text)
    except MaintenanceError as err:
        raise AdminError(f"{location}: {err}") from err


@dataclass(frozen=True)
class BackupStore:
    """Backups written under one directory (path or URL; None: :func:`default_backup_dir`)."""

    backup_dir: str | None = None

    def checkpoints(self, backup: CheckpointBackup) -> str:
        """Write a checkpoint backup; returns where it went."""
        return write_checkpoint_backup(backup, self.backup_dir)

    def migration_copy(self, table_name: str, migration_of: str, items: Sequence[Mapping[str, Any]]) -> str:
        """Write the items of a legacy migration's copy before it is deleted; returns where it went."""
        now = datetime.now(UTC)
        document = {
            "format": MIGRATION_COPY_FORMAT,
            "table_name": table_name,
            "migration_of": migration_of,
            "created_at": now.isoformat(),
            "items": list(items),
        }
        name = f"{migration_of}/{now:%Y%m%dT%H%M%S%fZ}-cleanup-migration-copy.json"
        return write_backup(json.dumps(document, indent=2), name, self.backup_dir)
