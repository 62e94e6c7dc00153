"""`make demo`: the real DAG, end to end, on local emulators.

Starts a moto server (Kinesis, DynamoDB, IAM) and a fakesnow server (Snowflake), creates the
stream `orders` with 2 shards and ~1,000 JSON records, creates an IAM user holding the generated
least-privilege policy, runs the provisioning DAG (IAM check, lease table, Snowflake objects) and
the ingest DAG with dag.test() (plan, spark-submit, COPY INTO, checkpoints), prints what landed
and the checkpoint per shard; then puts more records, runs again and shows that only those landed.

Then the DynamoDB source: the table `customers` with a stream, its connector's provision and sync
DAGs (a snapshot of the existing items, then the stream), an update and a delete, and the sync's
second run showing them in Snowflake.

With ``--platform emr_serverless`` (``make demo PLATFORM=emr_serverless``) both connectors run their
Spark job as job runs of an EMR Serverless application in moto (tests/emulators/emr_serverless.py runs
each with a local spark-submit): the demo creates the application, an artifacts bucket and a Secrets
Manager secret holding the Snowflake connection the driver reads, and writes the connector files with
their ``spark.emr_serverless`` section under ``.demo/dags/``. Nothing else changes.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from textwrap import indent

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_kinesis_snowflake.config import load_connector_config, load_dynamodb_connector_config  # noqa: E402
from airflow_kinesis_snowflake.core.admin.iam import (  # noqa: E402
    Requirement,
    dynamodb_source_permissions,
    emr_serverless_permissions,
    policy_document,
    required_permissions,
)
from tests.emulators import Emulators, local_emulators  # noqa: E402
from tests.emulators.airflow_env import airflow_home_env, run_dag  # noqa: E402

CONNECTOR = REPO / "dags" / "connectors" / "orders.yaml"
DAG_FILE = REPO / "dags" / "kinesis_snowflake_orders.py"
DYNAMODB_CONNECTOR = REPO / "demo" / "connectors" / "customers.yaml"
STATUSES = ["NEW", "PAID", "SHIPPED", "DELIVERED"]
T0 = time.monotonic()
MOTO_ACCOUNT = "123456789012"  # moto's default account id
SPARK_SUBMIT, EMR_SERVERLESS = "spark_submit", "emr_serverless"
EMR_ROLE = f"arn:aws:iam::{MOTO_ACCOUNT}:role/demo-spark-job"  # the job runs' execution role
EMR_BUCKET = "demo-spark-jobs"
EMR_SECRET = "demo/snowflake"


def emr_serverless_platform(emulators: Emulators, env: dict[str, str]) -> dict[str, object]:
    """An EMR Serverless application, its artifacts bucket and the secret its driver reads the Snowflake
    connection from, in moto; points spark_default at them; the connectors' ``spark`` section."""
    emulators.boto3_client("s3").create_bucket(Bucket=EMR_BUCKET)
    application = emulators.boto3_client("emr-serverless").create_application(
        name="demo", releaseLabel="emr-7.5.0", type="SPARK"
    )["applicationId"]
    snowflake = {
        "account": "fakesnow",
        "user": "fake",
        "password": "snow",
        "host": "127.0.0.1",
        "port": emulators.fakesnow_port,
        "protocol": "http",
    }
    emulators.boto3_client("secretsmanager").create_secret(Name=EMR_SECRET, SecretString=json.dumps(snowflake))
    # The Spark connection says only how the driver gets its credentials: its execution role and the secret.
    extra = {"driver_identity": True, "snowflake_connection_ref": EMR_SECRET}
    env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "kinesis_snowflake_spark", "extra": extra})
    return {
        "platform": EMR_SERVERLESS,
        "emr_serverless": {
            "application_id": application,
            "execution_role_arn": EMR_ROLE,
            "artifacts": f"s3://{EMR_BUCKET}/jobs",
            "poll_seconds": 1,
        },
    }


def on_platform(connector: Path, spark: dict[str, object] | None, work: Path) -> Path:
    """The connector file as it is (``spark`` None), or a copy under ``work/dags/connectors`` whose
    ``spark`` section is ``spark``."""
    if spark is None:
        return connector
    content = yaml.safe_load(connector.read_text())
    content["spark"] = spark
    copy = work / "dags" / "connectors" / connector.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(yaml.safe_dump(content, sort_keys=False))
    return copy


def platform_permissions(spark: dict[str, object] | None, region: str) -> list[Requirement]:
    """What the Airflow side needs of the Spark platform: nothing for spark-submit."""
    if spark is None:
        return []
    emr = spark["emr_serverless"]
    assert isinstance(emr, dict)
    return emr_serverless_permissions(
        application_id=emr["application_id"],
        execution_role_arn=emr["execution_role_arn"],
        artifacts=emr["artifacts"],
        partition="aws",
        region=region,
        account_id=MOTO_ACCOUNT,
    )


def quiet_libraries() -> None:
    """Only the demo's lines and the libraries' warnings and errors: importing Airflow configures logging
    at INFO, where the Snowflake connector logs two lines per connection and botocore its credentials.
    (The DAG runs' own logs go to their files, each at its level.)"""
    logging.getLogger().setLevel(logging.WARNING)
    for name in ("snowflake", "botocore", "boto3", "urllib3", "fakesnow"):
        logging.getLogger(name).setLevel(logging.WARNING)


def step(message: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {message}", flush=True)


def put_orders(kinesis: object, stream: str, first_id: int, count: int) -> None:
    rng = random.Random(first_id)
    for start in range(first_id, first_id + count, 500):
        entries = []
        for order_id in range(start, min(start + 500, first_id + count)):
            body = {
                "order_id": order_id,
                "Customer": f"customer-{rng.randint(1, 50):02d}",  # any case maps to the column
                "amount": round(rng.uniform(5, 500), 2),
                "status": rng.choice(STATUSES),
                "created_at": datetime.now(UTC).isoformat(),
                "coupon": "SPRING" if order_id % 7 == 0 else None,  # no such column: ignored
            }
            entries.append({"Data": json.dumps(body).encode(), "PartitionKey": f"customer-{order_id % 37}"})
        response = kinesis.put_records(StreamName=stream, Records=entries)  # type: ignore[attr-defined]
        if response.get("FailedRecordCount"):
            raise RuntimeError(f"PutRecords failed for {response['FailedRecordCount']} records")


def show(emulators: object, config: object, lease_client: object) -> None:
    conn = emulators.snowflake_connect()  # type: ignore[attr-defined]
    cur = conn.cursor()
    table = config.table_fqn  # type: ignore[attr-defined]
    total, distinct = cur.execute(
        f"SELECT COUNT(*), COUNT(DISTINCT KINESISMETADATA:shardId::string || ':' || "
        f"KINESISMETADATA:sequenceNumber::string || ':' || KINESISMETADATA:subSequenceNumber::string) FROM {table}"
    ).fetchone()
    print(f"    rows in {table}: {total} ({distinct} distinct Kinesis records)")
    for shard, count in cur.execute(
        f"SELECT KINESISMETADATA:shardId::string AS shard, COUNT(*) FROM {table} GROUP BY shard ORDER BY shard"
    ).fetchall():
        print(f"      {shard}: {count} rows")
    print("    a few rows:")
    for row in cur.execute(
        f"SELECT ORDER_ID, CUSTOMER, AMOUNT, STATUS, KINESISMETADATA:shardId::string, "
        f"KINESISMETADATA:sequenceNumber::string FROM {table} ORDER BY ORDER_ID DESC LIMIT 3"
    ).fetchall():
        print(f"      {row}")
    conn.close()
    app = config.source.application_name  # type: ignore[attr-defined]
    items = lease_client.scan(TableName=app, ConsistentRead=True)["Items"]  # type: ignore[attr-defined]
    print(f"    checkpoints in DynamoDB table {app}:")
    for item in sorted(items, key=lambda i: i["lease_key"]["S"]):
        if item.get("item_type", {}).get("S") == "SHARD":
            print(
                f"      {item['lease_key']['S']}: sequence {item.get('checkpoint_sequence_number', {}).get('S')} "
                f"sub-sequence {item.get('checkpoint_sub_sequence_number', {}).get('N')}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--platform",
        choices=(SPARK_SUBMIT, EMR_SERVERLESS),
        default=SPARK_SUBMIT,
        help="where the connectors' Spark job runs: spark-submit here (default) or the emulated EMR Serverless",
    )
    platform = parser.parse_args().platform
    load_connector_config(CONNECTOR)  # the demo's connector file is valid before anything starts
    quiet_libraries()  # once reading the connector file has configured Airflow's logging
    work = REPO / ".demo"
    shutil.rmtree(work, ignore_errors=True)
    step("Starting the emulators: moto (Kinesis, DynamoDB) and fakesnow (Snowflake) on loopback")
    with local_emulators(work) as emulators:
        env = airflow_home_env(work / "airflow", emulators.airflow_env())
        spark = None
        dag_file = DAG_FILE
        if platform == EMR_SERVERLESS:
            spark = emr_serverless_platform(emulators, env)
            application = spark["emr_serverless"]["application_id"]  # type: ignore[index]
            step(f"Spark jobs run as job runs of EMR Serverless application {application} (emulated in moto)")
            dag_file = work / "dags" / DAG_FILE.name
            dag_file.parent.mkdir(parents=True, exist_ok=True)
            dag_file.write_text(connector_dag_file(on_platform(CONNECTOR, spark, work)))
        config = load_connector_config(on_platform(CONNECTOR, spark, work))
        kinesis = emulators.boto3_client("kinesis")
        stream = config.source.stream_name
        step(f"Creating Kinesis stream {stream!r} with 2 shards and putting 1,000 JSON orders")
        kinesis.create_stream(StreamName=stream, ShardCount=2)
        kinesis.get_waiter("stream_exists").wait(StreamName=stream)
        put_orders(kinesis, stream, 1, 1000)

        src = config.source
        policy = policy_document(
            required_permissions(
                stream_name=src.stream_name,
                region=src.region,
                account_id=MOTO_ACCOUNT,
                application_name=src.application_name,
                consumer_type=src.consumer_type.value,
            )
            + platform_permissions(spark, src.region)
        )
        step("Creating the IAM user the connector runs as, holding only the generated least-privilege policy")
        print(indent(json.dumps(policy, indent=2), "    "))
        user = emulators.iam_user_connection("orders-connector", policy)
        env["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps(user)

        provision = f"kinesis_snowflake_{config.connector_id}_provision"
        step(f"dag.test() of {provision}: check IAM >> lease table >> Snowflake objects >> verify")
        proc = run_dag(provision, env, dag_file=dag_file, log_path=work / "dag-provision.log")
        if proc.returncode != 0:
            print((proc.stdout + proc.stderr)[-6000:])
            step(f"Provisioning failed; full log in {work / 'dag-provision.log'}")
            return 1
        step(f"Provisioned {config.table_fqn}, its ledger, parse-failure table and stage")

        dag_id = f"kinesis_snowflake_{config.connector_id}_ingest"
        for run, (first, count) in enumerate([(1, 1000), (1001, 250)], start=1):
            if run == 2:
                step("Putting 250 more orders")
                put_orders(kinesis, stream, first, count)
            step(f"Run {run}: dag.test() of {dag_id} (wait_for_records >> create_lease_table >> ingest)")
            log = work / f"dag-run-{run}.log"
            proc = run_dag(dag_id, env, dag_file=dag_file, log_path=log)
            if proc.returncode != 0:
                print((proc.stdout + proc.stderr)[-6000:])
                step(f"Run {run} failed; full log in {log}")
                return 1
            step(f"Run {run} succeeded (log: {log})")
            show(emulators, config, emulators.boto3_client("dynamodb"))
        step("Done: the second run loaded only the 250 new orders; nothing was loaded twice.")
        if spark is not None:
            show_job_runs(emulators, spark)
        code = sync_dynamodb_table(emulators, env, work, spark)
        if code == 0 and spark is not None:
            show_job_runs(emulators, spark)
        return code


def connector_dag_file(connector: Path) -> str:
    """A DAG file building the DAGs of one connector file."""
    return (
        "from pathlib import Path\n\nfrom airflow_kinesis_snowflake.dags import build_connector_file_dags\n\n"
        f"globals().update(build_connector_file_dags(Path({str(connector)!r})))\n"
    )


def show_job_runs(emulators: Emulators, spark: dict[str, object]) -> None:
    application = spark["emr_serverless"]["application_id"]  # type: ignore[index]
    emr = emulators.boto3_client("emr-serverless")
    runs = emr.list_job_runs(applicationId=application)["jobRuns"]
    print(f"    EMR Serverless job runs of application {application}:")
    for run in sorted(runs, key=lambda r: r["createdAt"]):
        print(f"      {run['id']}: {run['state']}")


def put_customers(dynamodb: object, table: str, count: int) -> None:
    rng = random.Random(7)
    for n in range(1, count + 1):
        item = {
            "customer_id": {"S": f"customer-{n:03d}"},
            "name": {"S": f"Customer {n}"},
            "balance": {"N": f"{rng.randint(0, 10**6)}.{rng.randint(0, 99):02d}"},
            "tags": {"SS": sorted({rng.choice(["gold", "silver", "new", "eu", "us"]), "demo"})},
        }
        dynamodb.put_item(TableName=table, Item=item)  # type: ignore[attr-defined]


def show_customers(emulators: object, table: str, picks: list[str]) -> None:
    conn = emulators.snowflake_connect()  # type: ignore[attr-defined]
    cur = conn.cursor()
    (total,) = cur.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
    print(f"    rows in {table}: {total}")
    for customer in picks:
        row = cur.execute(
            f"SELECT CUSTOMER_ID, NAME, BALANCE, DYNAMODBMETADATA:eventName::string FROM {table} "
            "WHERE CUSTOMER_ID = %s",
            (customer,),
        ).fetchone()
        print(f"      {customer}: {row if row else 'no row'}")
    conn.close()


def sync_dynamodb_table(emulators: object, env: dict[str, str], work: Path, spark: dict[str, object] | None) -> int:
    connector = on_platform(DYNAMODB_CONNECTOR, spark, work)
    config = load_dynamodb_connector_config(connector)
    (table,) = config.source.tables or ()
    dynamodb = emulators.boto3_client("dynamodb")  # type: ignore[attr-defined]
    step(f"DynamoDB: creating table {table!r} with a NEW_AND_OLD_IMAGES stream and putting 200 customers")
    dynamodb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "customer_id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "customer_id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    put_customers(dynamodb, table, 200)
    policy = policy_document(
        dynamodb_source_permissions(
            region=config.source.region,
            account_id=MOTO_ACCOUNT,
            application_name=config.source.application_name,
            tables=config.source.tables,
        )
        + platform_permissions(spark, config.source.region)
    )
    step("Creating the IAM user the DynamoDB connector runs as, holding only its generated policy")
    print(indent(json.dumps(policy, indent=2), "    "))
    env = {**env, "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(emulators.iam_user_connection("customers-connector", policy))}  # type: ignore[attr-defined]
    dag_file = work / "dags" / "dynamodb_snowflake_customers.py"
    dag_file.parent.mkdir(parents=True, exist_ok=True)
    dag_file.write_text(connector_dag_file(connector))
    destination = f"{config.destination.database}.{config.destination.schema_}.{table.upper()}"
    runs = [
        (
            f"dynamodb_snowflake_{config.connector_id}_provision",
            "check_iam_permissions >> create_lease_table >> discover_tables >> provision_table",
        ),
        (f"dynamodb_snowflake_{config.connector_id}_sync", "discover_tables >> sync_table[customers]: the snapshot"),
        (f"dynamodb_snowflake_{config.connector_id}_sync", "the stream: the update and the delete"),
    ]
    for number, (dag_id, what) in enumerate(runs, start=1):
        if number == 3:
            step("Updating customer-001's balance and deleting customer-002 in DynamoDB")
            dynamodb.update_item(
                TableName=table,
                Key={"customer_id": {"S": "customer-001"}},
                UpdateExpression="SET balance = :b",
                ExpressionAttributeValues={":b": {"N": "12345.67"}},
            )
            dynamodb.delete_item(TableName=table, Key={"customer_id": {"S": "customer-002"}})
        step(f"dag.test() of {dag_id} ({what})")
        log = work / f"dag-dynamodb-{number}.log"
        proc = run_dag(dag_id, env, dag_file=dag_file, log_path=log)
        if proc.returncode != 0:
            print((proc.stdout + proc.stderr)[-6000:])
            step(f"{dag_id} failed; full log in {log}")
            return 1
        if number > 1:
            show_customers(emulators, destination, ["customer-001", "customer-002", "customer-003"])
    items = dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
    conn = emulators.snowflake_connect()  # type: ignore[attr-defined]
    try:
        rows = conn.cursor().execute(f"SELECT CUSTOMER_ID FROM {destination}").fetchall()
    finally:
        conn.close()
    if sorted(r[0] for r in rows) != sorted(i["customer_id"]["S"] for i in items):
        step(f"{destination} does not hold the {len(items)} customers DynamoDB holds")
        return 1
    step(
        f"Done: the update and the delete arrived through the stream; {destination} holds DynamoDB's {len(items)} keys."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
