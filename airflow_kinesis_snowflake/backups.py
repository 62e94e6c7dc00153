"""Where checkpoint backups go: a local directory, or any URL ``ObjectStoragePath`` understands.

Local paths need nothing more. ``s3://<aws connection id>@<bucket>/<prefix>`` uses an Airflow
connection and needs ``s3fs`` (the Amazon provider's ``s3fs`` extra); any other fsspec protocol
works once its filesystem package is installed. Without a location, backups go to
``$AIRFLOW_HOME/kinesis_snowflake_backups``, which suits a single machine; with several workers,
point every DAG at shared storage (``build_connector_dags(..., backup_dir=...)``).
"""

from __future__ import annotations

import os

from airflow.sdk import ObjectStoragePath

from airflow_kinesis_snowflake.core.state.backups import CheckpointBackup

DEFAULT_DIRECTORY_NAME = "kinesis_snowflake_backups"


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
