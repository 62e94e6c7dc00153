"""The PySpark entry point of the DynamoDB source's batches.

``spark-submit [--py-files core.zip] dynamodb_to_snowflake.py --plan PLAN --attempt ID
[--snowflake-connection-ref SECRET]``: runs the data plane of the encoded table batch plan ``PLAN``
(one Spark task per snapshot segment and per stream shard) and records its result in Snowflake
under the batch id and ``ID``. With ``--continuous RUN`` instead of ``--plan``, the driver syncs the
table run after run (:mod:`airflow_kinesis_snowflake.core.dynamodb_continuous`), each batch
recorded under ``ID``. The work lives in :mod:`airflow_kinesis_snowflake.core.dynamodb_driver`.
"""

import sys

from airflow_kinesis_snowflake.core.dynamodb_driver import main

if __name__ == "__main__":
    sys.exit(main())
