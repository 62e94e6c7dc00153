"""The job's files on object storage, where a managed Spark platform reads them: content-addressed.

A platform such as EMR Serverless runs the entry point and ``--py-files`` from S3, not from this
worker's disk. Each file goes under a key holding the SHA-256 of its bytes,
``<prefix>/sha256-<hex>/<file name>``: a new version of the package lands under a new key, so it
never overwrites the files of a job that is running, and the same bytes are uploaded once (the
upload is skipped when the key exists). The package zip is built byte for byte the same from the
same package (:func:`~airflow_kinesis_snowflake.hooks.spark.package_core`), so every worker and the
``artifacts upload`` command agree on its key.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    """One file of the job and where it is on S3.

    :param path: the local file.
    :param uri: ``s3://bucket/key``, the key content-addressed (:func:`content_key`).
    :param uploaded: whether this call uploaded it (False: the key held it already).
    """

    path: Path
    uri: str
    uploaded: bool


def upload_artifacts(s3: Any, location: str, paths: Sequence[Path]) -> list[Artifact]:
    """Upload each file of ``paths`` under ``location``, content-addressed, unless its key exists.

    :param s3: an :class:`~airflow.providers.amazon.aws.hooks.s3.S3Hook`.
    :param location: ``s3://bucket/prefix``.
    :returns: the files and their URIs, in the order given.
    """
    bucket, prefix = split_location(location)
    artifacts = []
    for path in paths:
        data = path.read_bytes()
        key = content_key(prefix, path.name, data)
        uri = f"{S3_SCHEME}{bucket}/{key}"
        uploaded = not s3.check_for_key(key, bucket_name=bucket)
        if uploaded:
            s3.load_bytes(data, key=key, bucket_name=bucket, replace=False)
            log.info("Uploaded %s to %s", path.name, uri)
        artifacts.append(Artifact(path, uri, uploaded))
    return artifacts


def upload_job_artifacts(s3: Any, location: str, application: str) -> tuple[Artifact, Artifact]:
    """The entry point ``application`` and the package zip (``--py-files``), uploaded under ``location``.

    :returns: the entry point's artifact and the zip's.
    """
    with tempfile.TemporaryDirectory(prefix="kinesis-snowflake-artifacts-") as directory:
        entry_point, package = upload_artifacts(s3, location, [Path(application), package_core(Path(directory))])
    return entry_point, package
