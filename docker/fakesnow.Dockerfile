# A fakesnow server: a Snowflake-compatible endpoint on plain HTTP, reached by the real
# snowflake-connector-python. fakesnow 0.12 needs snowflake-connector-python below 5.
FROM python:3.11-slim-bookworm

ENV PYTHONUNBUFFERED=1
RUN pip install --no-cache-dir "fakesnow[server]==0.12.1" "snowflake-connector-python<5" \
    && useradd --create-home --uid 1000 fakesnow
USER fakesnow

EXPOSE 8000
CMD ["fakesnow", "-s", "--host", "0.0.0.0", "-p", "8000"]
