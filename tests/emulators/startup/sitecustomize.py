"""Start-up of every Python process the tests' Airflow starts (on its ``PYTHONPATH``, see airflow_env.py).

spark-submit puts PySpark's and py4j's archives (``.../pyspark/python/lib/*.zip``) first on the path
of a job's Python driver, daemon and workers. An archive holds no bytecode and none is written to
it, so every such process compiles each PySpark module it imports from source: about half a second
of CPU per job. The installed package is the same PySpark (one distribution, checked by
``airflow_kinesis_snowflake.environment``), so the tests' processes import it from there.
"""

import sys

sys.path[:] = [p for p in sys.path if not (p.endswith(".zip") and "/pyspark/python/lib/" in p.replace("\\", "/"))]
