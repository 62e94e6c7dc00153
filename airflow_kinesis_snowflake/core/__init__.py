"""The ingestion library. No Airflow imports here: this package ships to Spark executors."""
