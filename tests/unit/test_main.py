"""The command line: `policy` prints a connector's IAM policy, `init` sets up a DAGs folder from the
package's templates, `validate` checks a directory of connector files."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_kinesis_snowflake.__main__ import CLEANUP_TEMPLATE, EXAMPLE_CONNECTOR, main, template_text
from airflow_kinesis_snowflake.config import load_connector_config
from airflow_kinesis_snowflake.core.admin.iam import (
    PRINCIPAL_ARN_PLACEHOLDER,
    permission_check_permissions,
    policy_document,
    required_permissions,
)
from airflow_kinesis_snowflake.dags import render_dag_file
from tests.emulators.servers import REPO_ROOT

ORDERS = REPO_ROOT / "dags" / "connectors" / "orders.yaml"


def run_command(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m airflow_kinesis_snowflake`` with ``args``, from the repository's root."""
    return subprocess.run(
        [sys.executable, "-m", "airflow_kinesis_snowflake", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """What :func:`run_command` prints and returns, from :func:`main` in this process (the package is
    imported once, not once per case; ``test_the_package_runs_as_a_command`` runs the command itself)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(REPO_ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse's usage errors
            code = exit_.code if isinstance(exit_.code, int) else 2
    return subprocess.CompletedProcess(["airflow_kinesis_snowflake", *args], code, out.getvalue(), err.getvalue())


def test_the_package_runs_as_a_command() -> None:
    """``python -m airflow_kinesis_snowflake`` is :func:`main`: the same output and exit status."""
    for args in (("policy", str(ORDERS), "--account-id", "210987654321"), ("policy", "missing.yaml")):
        command, in_process = run_command(*args), run(*args)
        assert (command.returncode, command.stdout, command.stderr) == (
            in_process.returncode,
            in_process.stdout,
            in_process.stderr,
        )
    assert run_command("policy", "missing.yaml").returncode == 1


def write_connector(tmp_path: Path, **source: str) -> Path:
    fields = {
        "stream_name": "clicks",
        "region": "cn-north-1",
        "application_name": "clicks-app",
        "consumer_type": "ENHANCED_FAN_OUT",
    } | source
    body = "\n".join(f"  {k}: {v}" for k, v in fields.items())
    path = tmp_path / "clicks.yaml"
    path.write_text(
        f"connector_id: clicks\nsource:\n{body}\ndestination:\n  database: DB\n  schema: S\n  table: T\n",
        encoding="utf-8",
    )
    return path


def test_prints_the_policy_for_a_connector_file() -> None:
    result = run("policy", str(ORDERS), "--account-id", "210987654321")
    assert result.returncode == 0, result.stderr
    expected = policy_document(
        required_permissions(
            stream_name="orders",
            region="us-east-1",
            account_id="210987654321",
            application_name="orders-to-snowflake",
            consumer_type="SHARED_THROUGHPUT",
        )
        # The IAM check of the provision DAG (iam_check: required by default) simulates the principal.
        + permission_check_permissions(PRINCIPAL_ARN_PLACEHOLDER)
    )
    assert json.loads(result.stdout) == expected


def test_account_defaults_to_a_placeholder() -> None:
    result = run("policy", str(ORDERS))
    assert result.returncode == 0, result.stderr
    resources = [r for s in json.loads(result.stdout)["Statement"] for r in s["Resource"]]
    assert resources == [
        "arn:aws:kinesis:us-east-1:${ACCOUNT_ID}:stream/orders",
        "arn:aws:dynamodb:us-east-1:${ACCOUNT_ID}:table/orders-to-snowflake",
        "${PRINCIPAL_ARN}",
    ]
    assert "note: replace ${PRINCIPAL_ARN} with the ARN of the IAM user or role" in result.stderr


def test_the_iam_check_may_simulate_the_principal_named(tmp_path: Path) -> None:
    session = "arn:aws-cn:sts::123456789012:assumed-role/connector/airflow-worker"
    result = run("policy", str(write_connector(tmp_path)), "--account-id", "123456789012", "--principal", session)
    assert result.returncode == 0, result.stderr
    statements = {s["Sid"]: s for s in json.loads(result.stdout)["Statement"]}
    # IAM authorises SimulatePrincipalPolicy on the principal simulated: the session's role.
    assert statements["IamPermissionCheck"] == {
        "Sid": "IamPermissionCheck",
        "Effect": "Allow",
        "Action": ["iam:SimulatePrincipalPolicy"],
        "Resource": ["arn:aws-cn:iam::123456789012:role/connector"],
    }
    assert "note:" not in result.stderr
    assert [a for s in statements.values() for a in s["Action"] if a.startswith("iam:")] == [
        "iam:SimulatePrincipalPolicy"
    ]


def test_no_simulation_is_granted_when_the_iam_check_is_off(tmp_path: Path) -> None:
    path = write_connector(tmp_path, iam_check="'off'")
    result = run("policy", str(path), "--account-id", "123456789012")
    assert result.returncode == 0, result.stderr
    assert not [a for s in json.loads(result.stdout)["Statement"] for a in s["Action"] if a.startswith("iam:")]
    named = run("policy", str(path), "--principal", "arn:aws:iam::123456789012:user/u")
    assert named.returncode == 1 and named.stdout == ""
    assert named.stderr.startswith(f"error: {path}: --principal is the principal the IAM permission check simulates")
    assert "source.iam_check is off" in named.stderr


def test_a_principal_iam_cannot_simulate_is_refused(tmp_path: Path) -> None:
    path = write_connector(tmp_path)
    for principal, why in (
        ("arn:aws:iam::123456789012:root", "the account root user"),
        ("orders-role", "is not an IAM or STS ARN"),
    ):
        result = run("policy", str(path), "--principal", principal)
        assert result.returncode == 1 and result.stdout == "", principal
        assert result.stderr.startswith("error: --principal: ") and why in result.stderr, result.stderr
        assert f"or set source.iam_check: off in {path}" in result.stderr


def test_fan_out_in_china_with_the_migration_table(tmp_path: Path) -> None:
    result = run("policy", str(write_connector(tmp_path)), "--account-id", "123456789012", "--include-migration-table")
    assert result.returncode == 0, result.stderr
    statements = {s["Sid"]: s for s in json.loads(result.stdout)["Statement"]}
    assert statements["KinesisFanOutConsumer"]["Resource"] == [
        "arn:aws-cn:kinesis:cn-north-1:123456789012:stream/clicks/consumer/*"
    ]
    assert statements["DynamoDBMigrationTable"]["Resource"] == [
        "arn:aws-cn:dynamodb:cn-north-1:123456789012:table/clicks-app_migration"
    ]


def test_partition_option(tmp_path: Path) -> None:
    path = write_connector(tmp_path, region="us-east-1", consumer_type="SHARED_THROUGHPUT")
    result = run("policy", str(path), "--partition", "aws-us-gov")
    assert result.returncode == 0, result.stderr
    resources = [r for s in json.loads(result.stdout)["Statement"] for r in s["Resource"]]
    # Every ARN is in the partition; the principal the IAM check simulates is left to fill in.
    assert resources[-1] == PRINCIPAL_ARN_PLACEHOLDER
    assert all(r.startswith("arn:aws-us-gov:") for r in resources[:-1])


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = run("policy", str(missing))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {missing}: cannot read:")


def test_invalid_connector_names_the_field(tmp_path: Path) -> None:
    result = run("policy", str(write_connector(tmp_path, consumer_type="POLLING")))
    assert result.returncode == 1
    assert "invalid connector configuration" in result.stderr
    assert "source.consumer_type" in result.stderr
    assert result.stdout == ""


def test_bad_account_id_is_refused() -> None:
    result = run("policy", str(ORDERS), "--account-id", "1234")
    assert result.returncode == 1
    assert "account id '1234' must be 12 digits" in result.stderr


def test_a_command_is_required() -> None:
    result = run()
    assert result.returncode == 2
    assert "policy" in result.stderr


def test_maintenance_and_the_active_application_after_a_reset() -> None:
    result = run(
        "policy",
        str(ORDERS),
        "--account-id",
        "123456789012",
        "--include-maintenance",
        "--active-application-name",
        "orders-v2",
    )
    assert result.returncode == 0, result.stderr
    statements = {s["Sid"]: s for s in json.loads(result.stdout)["Statement"]}
    assert statements["DynamoDBLeaseTable"]["Resource"] == [
        "arn:aws:dynamodb:us-east-1:123456789012:table/orders-to-snowflake",
        "arn:aws:dynamodb:us-east-1:123456789012:table/orders-v2",
    ]
    assert statements["DynamoDBMaintenance"]["Resource"] == ["arn:aws:dynamodb:us-east-1:123456789012:table/*"]
    assert statements["DynamoDBListTables"]["Action"] == ["dynamodb:ListTables"]
    bad = run("policy", str(ORDERS), "--active-application-name", "x:y")
    assert bad.returncode == 1 and "table name 'x:y'" in bad.stderr


# -- init: a DAGs folder from the package's templates -----------------------------------------------

DAGS = REPO_ROOT / "dags"


def test_the_packaged_clean_up_dag_file_is_the_repositorys() -> None:
    """One definition: the template `init` writes is dags/kinesis_snowflake_connectors.py, word for word."""
    assert template_text(CLEANUP_TEMPLATE) == (DAGS / "kinesis_snowflake_connectors.py").read_text(encoding="utf-8")


def test_the_example_connector_is_valid_and_waits_for_provisioning(tmp_path: Path) -> None:
    path = tmp_path / EXAMPLE_CONNECTOR
    path.write_text(template_text("connectors", EXAMPLE_CONNECTOR), encoding="utf-8")
    config = load_connector_config(path)
    assert config.connector_id == "example"
    # Never scheduled before someone provisions it and sets a schedule.
    assert config.batch.schedule is None


def test_init_writes_the_clean_up_dag_file_an_example_and_its_dag_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "dags"

    assert main(["init", str(folder)]) == 0

    example = folder / "connectors" / "example.yaml"
    assert (folder / "kinesis_snowflake_connectors.py").read_text() == (
        DAGS / "kinesis_snowflake_connectors.py"
    ).read_text()
    assert example.read_text() == template_text("connectors", EXAMPLE_CONNECTOR)
    assert (folder / "kinesis_snowflake_example.py").read_text() == render_dag_file(example, folder)
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        "connectors/example.yaml",
        "kinesis_snowflake_connectors.py",
        "kinesis_snowflake_example.py",
    ]
    out = capsys.readouterr().out
    assert f"wrote {example}" in out
    assert f"validate {folder / 'connectors'}" in out


def test_init_again_changes_nothing_and_never_overwrites_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", str(tmp_path)]) == 0
    assert main(["init", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("unchanged ") == 3

    cleanup = tmp_path / "kinesis_snowflake_connectors.py"
    cleanup.write_text(cleanup.read_text() + "# edited\n")
    example_dag_file = tmp_path / "kinesis_snowflake_example.py"
    example_dag_file.unlink()

    assert main(["init", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"error: {cleanup} exist with other content; nothing was written (--force overwrites them)" in err
    assert cleanup.read_text().endswith("# edited\n")
    assert not example_dag_file.exists(), "a refused init wrote a file"

    assert main(["init", str(tmp_path), "--force"]) == 0
    assert cleanup.read_text() == template_text(CLEANUP_TEMPLATE)
    assert example_dag_file.is_file()


def test_init_leaves_a_connectors_directory_with_connector_files_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "connectors").mkdir()
    orders = tmp_path / "connectors" / "orders.yaml"
    shutil.copy(ORDERS, orders)

    assert main(["init", str(tmp_path), "--force"]) == 0

    assert sorted(p.name for p in (tmp_path / "connectors").iterdir()) == ["orders.yaml"]
    assert sorted(p.name for p in tmp_path.glob("*.py")) == ["kinesis_snowflake_connectors.py"]
    out = capsys.readouterr().out
    assert f"{tmp_path / 'connectors'} already holds 1 connector file(s): no example written" in out
    # The clean-up DAG would be an import error until orders.yaml has its DAG file: init says so.
    assert f"note: {orders}: its DAG file {tmp_path / 'kinesis_snowflake_orders.py'} is missing" in out


def test_init_refuses_a_folder_that_builds_every_connector_from_one_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    single = tmp_path / "all_connectors.py"
    single.write_text("globals().update(build_connector_dags(Path(__file__).parent / 'connectors'))\n")

    assert main(["init", str(tmp_path)]) == 1

    assert f"error: {single} build every connector's DAGs with build_connector_dags" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["all_connectors.py"]


# -- validate: every connector file of a directory, each problem with its file and field -----------


def test_validate_accepts_the_repositorys_connectors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(DAGS / "connectors")]) == 0
    assert capsys.readouterr().out == f"1 connector file(s) in {DAGS / 'connectors'} valid: orders\n"


def connectors_dir(tmp_path: Path, files: dict[str, str]) -> Path:
    directory = tmp_path / "connectors"
    directory.mkdir()
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    return directory


def test_validate_prints_one_line_per_problem_with_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    orders = ORDERS.read_text()
    directory = connectors_dir(
        tmp_path,
        {
            # Two fields wrong: two lines.
            "bad.yaml": orders.replace("connector_id: orders", "connector_id: bad")
            .replace("region: us-east-1", "region: nowhere")
            .replace("initial_position: TRIM_HORIZON", "initial_position: EARLIEST"),
            "broken.yml": "connector_id: [unclosed\n",
            # Same connector id as orders.yaml, its own application name.
            "orders.yaml": orders,
            "orders_copy.yaml": orders.replace("orders-to-snowflake", "orders-copy"),
            # Same application name, connection and region as orders.yaml, its own connector id.
            "shadow.yaml": orders.replace("connector_id: orders", "connector_id: shadow"),
        },
    )

    assert main(["validate", str(directory)]) == 1

    lines = capsys.readouterr().out.splitlines()
    bad, broken, orders_copy, shadow = (
        directory / n for n in ("bad.yaml", "broken.yml", "orders_copy.yaml", "shadow.yaml")
    )
    assert f"{bad}: source.region: must be an AWS region code such as 'us-east-1' (got 'nowhere')" in lines
    assert any(line.startswith(f"{bad}: source.initial_position: ") and "'EARLIEST'" in line for line in lines)
    (yaml_error,) = [line for line in lines if line.startswith(f"{broken}: not valid YAML: ")]
    assert "line 1, column" in yaml_error, "the parser's position is on the problem's line"
    assert (
        f"{orders_copy}: connector_id 'orders' is already used by {directory / 'orders.yaml'}; give one of them "
        "another connector_id (it names the connector's DAGs)"
    ) in lines
    assert (
        f"{shadow}: source.application_name: 'orders-to-snowflake' is also the application name of "
        f"{directory / 'orders.yaml'}, with the same AWS connection (aws_default) and region (us-east-1): the two "
        "connectors would share one DynamoDB lease table; give each connector an application name of its own"
    ) in lines
    assert lines[-1] == f"5 problem(s) in the 5 connector file(s) of {directory}"
    assert not any(str(directory / "orders.yaml") == line.split(":")[0] for line in lines), "orders.yaml is valid"


def test_validate_another_region_may_reuse_an_application_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    orders = ORDERS.read_text()
    directory = connectors_dir(
        tmp_path,
        {
            "orders.yaml": orders,
            "orders_eu.yaml": orders.replace("connector_id: orders", "connector_id: orders_eu").replace(
                "region: us-east-1", "region: eu-west-1"
            ),
        },
    )
    assert main(["validate", str(directory)]) == 0
    assert capsys.readouterr().out == f"2 connector file(s) in {directory} valid: orders, orders_eu\n"


def test_validate_reports_missing_dag_files_where_the_folder_has_one_per_connector(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = connectors_dir(tmp_path, {"orders.yaml": ORDERS.read_text()})
    missing = (
        f"{directory / 'orders.yaml'}: its DAG file {tmp_path / 'kinesis_snowflake_orders.py'} is missing, so the "
        "connector has no DAGs; write it with "
        f"`python -m airflow_kinesis_snowflake dag-file {directory / 'orders.yaml'}`"
    )
    # Not a DAGs folder yet: nothing to say about DAG files.
    assert main(["validate", str(directory)]) == 0
    capsys.readouterr()

    shutil.copy(DAGS / "kinesis_snowflake_connectors.py", tmp_path)
    assert main(["validate", str(directory)]) == 1
    assert missing in capsys.readouterr().out.splitlines()

    assert main(["dag-file", str(directory / "orders.yaml")]) == 0
    assert main(["validate", str(directory)]) == 0


def test_validate_refuses_what_would_share_a_dag_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    orders = ORDERS.read_text()
    directory = connectors_dir(
        tmp_path,
        {
            "orders-eu.yaml": orders.replace("connector_id: orders", "connector_id: orders_eu"),
            "orders_eu.yaml": orders.replace("connector_id: orders", "connector_id: orders_eu2").replace(
                "orders-to-snowflake", "orders-eu2"
            ),
        },
    )
    assert main(["validate", str(directory)]) == 1
    out = capsys.readouterr().out
    assert f"{directory / 'orders_eu.yaml'}: its DAG file would be kinesis_snowflake_orders_eu.py, which is" in out


def test_validate_prints_a_deprecation_and_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = connectors_dir(
        tmp_path, {"orders.yaml": ORDERS.read_text().replace("iam_check: required", "skip_iam_check_if_denied: true")}
    )
    assert main(["validate", str(directory)]) == 0
    out = capsys.readouterr().out
    assert (
        f"warning: {directory / 'orders.yaml'}: source.skip_iam_check_if_denied is deprecated; write "
        "source.iam_check: best_effort instead"
    ) in out.splitlines()


@pytest.mark.parametrize("layout", ["missing", "empty", "a file"])
def test_validate_needs_a_directory_of_connector_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str
) -> None:
    target = tmp_path / "connectors"
    if layout == "empty":
        target.mkdir()
    elif layout == "a file":
        target.write_text("connector_id: x\n")
    assert main(["validate", str(target)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"error: {target} ")


def test_status_refuses_a_path_without_connector_files(tmp_path: Path) -> None:
    proc = run("status", str(tmp_path))
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert f"error: {tmp_path}: no connector file (*.yaml, *.yml) in {tmp_path}" in proc.stderr


DYNAMODB_CONNECTOR = """\
connector_id: orders_ddb
source:
  type: dynamodb
  region: us-east-1
  application_name: orders-ddb
  tables: [orders]
destination:
  database: ANALYTICS
  schema: RAW
"""


def test_validate_and_dag_file_take_a_dynamodb_connector_beside_a_kinesis_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = connectors_dir(tmp_path, {"orders.yaml": ORDERS.read_text(), "orders_ddb.yaml": DYNAMODB_CONNECTOR})
    assert main(["validate", str(directory)]) == 0
    assert capsys.readouterr().out == f"2 connector file(s) in {directory} valid: orders, orders_ddb\n"
    # Two connectors sharing one lease table are refused whatever their sources.
    application = load_connector_config(ORDERS).source.application_name
    (directory / "orders_ddb.yaml").write_text(DYNAMODB_CONNECTOR.replace("orders-ddb", application))
    assert main(["validate", str(directory)]) == 1
    assert f"source.application_name: {application!r} is also the application name of" in capsys.readouterr().out
    (directory / "orders_ddb.yaml").write_text(DYNAMODB_CONNECTOR)

    assert main(["dag-file", str(directory / "orders_ddb.yaml")]) == 0
    assert (tmp_path / "kinesis_snowflake_orders_ddb.py").read_text() == render_dag_file(
        directory / "orders_ddb.yaml", tmp_path
    )
