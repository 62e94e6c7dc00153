"""The PySpark entry point of a DynamoDB connector's batches.

``spark-submit [--py-files core.zip] dynamodb_to_snowflake.py --plan WORK --attempt ID
[--snowflake-connection-ref SECRET]``, or ``--continuous WORK`` instead of ``--plan``: the engine's
driver (:mod:`airflow_kinesis_snowflake.core.engine.driver`) runs the work (one Spark task per
snapshot segment and per stream shard) and records each batch's outcome in Snowflake under its batch
id and ``ID``. It is the Kinesis entry point's twin: the driver picks the source's job by the work's
source; the file's name tells the application apart in the cluster's process lists.
"""

import sys

from airflow_kinesis_snowflake.core.engine.driver import main

if __name__ == "__main__":
    sys.exit(main())
