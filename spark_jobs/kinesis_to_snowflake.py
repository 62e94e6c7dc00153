"""PySpark entry point: ``spark-submit spark_jobs/kinesis_to_snowflake.py --plan P --result R``.

The work lives in :mod:`airflow_kinesis_snowflake.core.job`, which the ingest operator submits
by default; this file is for submitting the job by hand or from a cluster's own tooling.
"""

import sys

from airflow_kinesis_snowflake.core.job import main

if __name__ == "__main__":
    sys.exit(main())
