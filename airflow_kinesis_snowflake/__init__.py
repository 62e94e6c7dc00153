"""Apache Airflow provider: Kinesis Data Streams into Snowflake, exactly once, with PySpark."""

__version__ = "0.1.0"

#: The published documentation, built from the repository's ``docs/`` (``mkdocs.yml``). Messages, DAG docs,
#: templates and the package's metadata point users here, not at files a ``pip install`` does not bring.
DOCS_URL = "https://airflow-provider-kinesis-snowflake.github.io/airflow-provider-kinesis-snowflake/"


def docs_url(page: str = "", section: str = "") -> str:
    """The address of ``docs/<page>.md`` on the published site, at the heading whose anchor is ``section``.

    ``docs_url("spark")`` is ``<DOCS_URL>spark/``; ``docs_url("install", "6-sizing")`` adds ``#6-sizing``.
    """
    return DOCS_URL + (f"{page}/" if page else "") + (f"#{section}" if section else "")
