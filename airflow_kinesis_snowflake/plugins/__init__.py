"""Airflow plugins of the provider: the lag page (:mod:`.lag_page`)."""
