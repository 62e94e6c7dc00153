"""The job's files on object storage, where a managed Spark platform reads them: content-addressed.

A platform such as EMR Serverless runs the entry point and ``--py-files`` from S3, not from this
worker's disk. Each file goes under a key holding the SHA-256 of its bytes,
``<prefix>/sha256-<hex>/<file name>``: a new version of the package lands under a new key, so it
never overwrites the files of a job that is running, and the same bytes are uploaded once (the
upload is skipped when the key exists). The package zip is built byte for byte the same from the
same package (:func:`~airflow_kinesis_snowflake.hooks.spark.package_core`), so every worker and the
``artifacts upload`` command agree on its key.

S3 is one :class:`ArtifactStore`; a platform with storage of its own (Databricks: DBFS or a Unity
Catalog volume) gives :func:`store_artifacts` its own store, and its files are named the same way.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from airflow_kinesis_snowflake.hooks.spark import DEFAULT_APPLICATION, DYNAMODB_APPLICATION, package_core
from airflow_kinesis_snowflake.registry import DYNAMODB_SOURCE, KINESIS_SOURCE

log = logging.getLogger(__name__)
# The PySpark entry point of each source's job.
SOURCE_APPLICATIONS = {KINESIS_SOURCE: DEFAULT_APPLICATION, DYNAMODB_SOURCE: DYNAMODB_APPLICATION}

S3_SCHEME = "s3://"


def split_location(location: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` as ``(bucket, prefix)``, the prefix without a trailing slash.

    :raises ValueError: ``location`` is not an ``s3://`` location.
    """
    if not location.startswith(S3_SCHEME) or not location[len(S3_SCHEME) :].split("/", 1)[0]:
        raise ValueError(f"{location!r} is not an S3 location: write it s3://<bucket>/<prefix>")
    bucket, _, prefix = location[len(S3_SCHEME) :].partition("/")
    return bucket, prefix.strip("/")


def content_key(prefix: str, name: str, data: bytes) -> str:
    """The key of a file named ``name`` holding ``data`` under ``prefix``: the same bytes, the same key."""
    digest = hashlib.sha256(data).hexdigest()
    return "/".join(part for part in (prefix, f"sha256-{digest}", name) if part)


@dataclass(frozen=True)
class Artifact:
    """One file of the job and where it is in the platform's storage.

    :param path: the local file.
    :param uri: where it is, e.g. ``s3://bucket/key``, the key content-addressed (:func:`content_key`).
    :param uploaded: whether this call uploaded it (False: the key held it already).
    """

    path: Path
    uri: str
    uploaded: bool


class ArtifactStore(Protocol):
    """Storage a managed platform reads the job's files from, by URI."""

    def exists(self, uri: str) -> bool:
        """Whether a file is at ``uri``."""
        ...

    def put(self, uri: str, data: bytes) -> None:
        """Write ``data`` as a new file at ``uri``."""
        ...


class S3Store:
    """S3 through the Amazon provider's :class:`~airflow.providers.amazon.aws.hooks.s3.S3Hook`."""

    def __init__(self, s3: Any) -> None:
        self.s3 = s3

    def exists(self, uri: str) -> bool:
        bucket, key = split_location(uri)
        return bool(self.s3.check_for_key(key, bucket_name=bucket))

    def put(self, uri: str, data: bytes) -> None:
        bucket, key = split_location(uri)
        self.s3.load_bytes(data, key=key, bucket_name=bucket, replace=False)


def store_artifacts(store: ArtifactStore, location: str, paths: Sequence[Path]) -> list[Artifact]:
    """Upload each file of ``paths`` under ``location`` in ``store``, content-addressed, unless it is there.

    :param location: where the files go, without a trailing slash (e.g. ``dbfs:/jobs``).
    :returns: the files and their URIs, in the order given.
    """
    artifacts = []
    for path in paths:
        data = path.read_bytes()
        uri = f"{location}/{content_key('', path.name, data)}"
        uploaded = not store.exists(uri)
        if uploaded:
            store.put(uri, data)
            log.info("Uploaded %s to %s", path.name, uri)
        artifacts.append(Artifact(path, uri, uploaded))
    return artifacts


def upload_artifacts(s3: Any, location: str, paths: Sequence[Path]) -> list[Artifact]:
    """Upload each file of ``paths`` under ``location`` on S3, content-addressed, unless its key exists
    (:func:`store_artifacts`).

    :param s3: an :class:`~airflow.providers.amazon.aws.hooks.s3.S3Hook`.
    :param location: ``s3://bucket/prefix``.
    :returns: the files and their URIs, in the order given.
    """
    bucket, prefix = split_location(location)
    return store_artifacts(S3Store(s3), f"{S3_SCHEME}{bucket}/{prefix}".rstrip("/"), paths)


def upload_job_artifacts(s3: Any, location: str, application: str) -> tuple[Artifact, Artifact]:
    """The entry point ``application`` and the package zip (``--py-files``), uploaded under ``location``.

    :returns: the entry point's artifact and the zip's.
    """
    with tempfile.TemporaryDirectory(prefix="kinesis-snowflake-artifacts-") as directory:
        entry_point, package = upload_artifacts(s3, location, [Path(application), package_core(Path(directory))])
    return entry_point, package
