"""Spark's Python daemon in the tests' jobs (``spark.python.daemon.module``, see spark_env.py).

It imports, once, the libraries that every Python worker of the ingestion job imports, then forks the
workers as ``pyspark.daemon`` does: each no longer imports them on its own. The job's own code still
comes from the job's ``--py-files``, as it would on a cluster.

PySpark is imported from the installed package, not from the ``pyspark.zip`` and py4j archive Spark
puts first on the workers' path: every task calls ``importlib.invalidate_caches()``, which on Python
3.11 reads again the directory of every archive a package was imported from (about half a second of
CPU per task with PySpark's archive).
"""

from __future__ import annotations

import sys

sys.path[:] = [p for p in sys.path if not (p.endswith(".zip") and ("pyspark" in p or "py4j" in p))]

import boto3  # noqa: E402, F401
import botocore.session  # noqa: E402, F401
import pyarrow.compute  # noqa: E402
import pyarrow.parquet  # noqa: E402, F401
import snowflake.connector  # noqa: E402, F401
from pyspark.daemon import manager  # noqa: E402

if __name__ == "__main__":
    manager()
