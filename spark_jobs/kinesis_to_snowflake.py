"""The PySpark entry point of a Kinesis connector's batches.

``spark-submit [--py-files core.zip] kinesis_to_snowflake.py --plan WORK --attempt ID
[--snowflake-connection-ref SECRET]``, or ``--continuous WORK`` instead of ``--plan``: the engine's
driver (:mod:`airflow_kinesis_snowflake.core.engine.driver`) runs the work and records each batch's
outcome in Snowflake under its batch id and ``ID``. The driver and the executors import the package
from the installed wheel or from the ``--py-files`` zip of ``core``.
"""

import sys

from airflow_kinesis_snowflake.core.engine.driver import main

if __name__ == "__main__":
    sys.exit(main())
