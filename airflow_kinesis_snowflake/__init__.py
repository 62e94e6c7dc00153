"""Apache Airflow provider: Kinesis Data Streams into Snowflake, exactly once, with PySpark."""

__version__ = "0.1.0"
