"""Spark's Python daemon in the tests' jobs (``spark.python.daemon.module``, see spark_env.py).

It imports, once, the libraries that every Python worker of the ingestion job imports, then forks the
workers as ``pyspark.daemon`` does: each no longer imports them on its own. The job's own code still
comes from the job's ``--py-files``, as it would on a cluster.
"""

from __future__ import annotations

import boto3  # noqa: F401
import botocore.session  # noqa: F401
import pyarrow.compute
import pyarrow.parquet  # noqa: F401
import snowflake.connector  # noqa: F401
from pyspark.daemon import manager

if __name__ == "__main__":
    manager()
