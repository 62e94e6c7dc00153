"""The PySpark entry point that the ingest operator submits.

``spark-submit [--py-files core.zip] kinesis_to_snowflake.py --plan PLAN --attempt ID
[--snowflake-connection-ref SECRET]``: loads the micro-batch of the encoded plan ``PLAN`` and records
its outcome in Snowflake under the batch id and ``ID``. The work lives in
:mod:`airflow_kinesis_snowflake.core.job`; the driver and the executors import it from the
installed package or from the ``--py-files`` zip of ``core``.
"""

import sys

from airflow_kinesis_snowflake.core.job import main

if __name__ == "__main__":
    sys.exit(main())
