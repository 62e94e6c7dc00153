"""The local stack's wiring: docker-compose.yml and the Dockerfiles it builds, checked without Docker.

Compose variables (``${NAME:-default}``) are read with their defaults, which is what a plain
``docker compose up`` uses.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

REPO_ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"

AIRFLOW_SERVICES = {
    "airflow-init": None,
    "airflow-apiserver": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
}
LONG_RUNNING_AIRFLOW = [name for name, command in AIRFLOW_SERVICES.items() if command]
EMULATORS = ["moto", "fakesnow", "spark-master", "spark-worker"]
REQUIRED_SERVICES = {"postgres", *AIRFLOW_SERVICES, *EMULATORS}
CONNECTION_VARS = ["AIRFLOW_CONN_AWS_DEFAULT", "AIRFLOW_CONN_SNOWFLAKE_DEFAULT", "AIRFLOW_CONN_SPARK_DEFAULT"]

_VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<default>[^}]*))?\}")


def interpolate(value: str) -> str:
    """A compose value as ``docker compose`` reads it with no variables set: defaults, ``$$`` -> ``$``."""
    marker = "\0"
    value = value.replace("$$", marker)
    value = _VARIABLE.sub(lambda m: m.group("default") if m.group("op") in (":-", "-") else "", value)
    return value.replace(marker, "$")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = compose["services"]
    return result


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): interpolate(str(v)) for k, v in env.items()}


def command_args(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return [interpolate(str(a)) for a in (command.split() if isinstance(command, str) else command)]


def option(args: list[str], flag: str) -> str:
    assert flag in args, f"{flag} missing from {args}"
    return args[args.index(flag) + 1]


def container_ports(service: dict[str, Any]) -> set[int]:
    """Container-side ports a service publishes or exposes."""
    ports: set[int] = set()
    for entry in service.get("ports") or []:
        target = entry["target"] if isinstance(entry, dict) else interpolate(str(entry)).rsplit(":", 1)[-1]
        ports.add(int(str(target).split("/")[0]))
    ports.update(int(str(p).split("/")[0]) for p in service.get("expose") or [])
    return ports


def depends_on(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {name: {"condition": "service_started"} for name in deps}
    return {name: spec or {} for name, spec in deps.items()}


def healthcheck_text(service: dict[str, Any]) -> str:
    test = (service.get("healthcheck") or {}).get("test")
    assert test, "no healthcheck test"
    return " ".join(test) if isinstance(test, list) else str(test)


def parse_dockerfile(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, rest = line.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    assert not pending, f"{path} ends inside a continued line"
    return instructions


def resolved_from_images(path: Path) -> list[str]:
    """Images of the FROM lines, with ARG defaults declared before them substituted."""
    args: dict[str, str] = {}
    images = []
    for keyword, rest in parse_dockerfile(path):
        if keyword == "ARG" and "=" in rest:
            name, default = rest.split("=", 1)
            args.setdefault(name.strip(), default.strip().strip('"'))
        elif keyword == "FROM":
            ref = rest.split()[0]
            images.append(re.sub(r"\$\{?(\w+)\}?", lambda m: args[m.group(1)], ref))
    return images


def assert_pinned(ref: str) -> None:
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    assert ":" in last, f"image {ref!r} has no tag"
    tag = last.rsplit(":", 1)[1]
    assert tag and tag != "latest", f"image {ref!r} is not pinned"
    assert "$" not in ref, f"image {ref!r} has an unresolved variable"


def dockerfile_of(service: dict[str, Any]) -> Path:
    build = service["build"]
    context = REPO_ROOT / (build if isinstance(build, str) else build.get("context", "."))
    dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
    return context / dockerfile


def listen_port_from_cmd(dockerfile: Path, flag: str) -> int:
    (cmd,) = [json.loads(rest) for keyword, rest in parse_dockerfile(dockerfile) if keyword == "CMD"]
    return int(option(cmd, flag))


def pyproject() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    return project


def connection(services: dict[str, dict[str, Any]], var: str) -> dict[str, Any]:
    conn: dict[str, Any] = json.loads(environment(services["airflow-scheduler"])[var])
    return conn


# --- services -------------------------------------------------------------------------------------


def test_required_services_exist_and_use_the_local_executor(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    assert REQUIRED_SERVICES <= set(services), f"missing: {sorted(REQUIRED_SERVICES - set(services))}"
    assert "x-airflow-common" in compose
    assert environment(compose["x-airflow-common"])["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    # No Celery: nothing needs a broker or a separate worker.
    assert not {"redis", "airflow-worker", "flower"} & set(services)


def test_airflow_services_run_their_component(services: dict[str, dict[str, Any]]) -> None:
    for name in LONG_RUNNING_AIRFLOW:
        assert command_args(services[name]) == [AIRFLOW_SERVICES[name]], name


def test_every_service_has_a_pinned_image_or_a_build_from_pinned_images(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        if "build" in service:
            dockerfile = dockerfile_of(service)
            assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"
            images = resolved_from_images(dockerfile)
            assert images, f"{dockerfile} has no FROM"
            for ref in images:
                assert_pinned(ref)
        else:
            assert_pinned(interpolate(service["image"]))


def test_emulator_images_are_the_expected_ones(services: dict[str, dict[str, Any]]) -> None:
    assert interpolate(services["moto"]["image"]).startswith("motoserver/moto:")
    assert interpolate(services["postgres"]["image"]).startswith("postgres:")
    assert dockerfile_of(services["fakesnow"]) == REPO_ROOT / "docker" / "fakesnow.Dockerfile"


# --- the Airflow image and the common configuration ----------------------------------------------


def test_airflow_services_share_the_common_config(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    common = compose["x-airflow-common"]
    common_env = environment(common)
    assert dockerfile_of(common) == REPO_ROOT / "docker" / "Dockerfile"
    for name in AIRFLOW_SERVICES:
        service = services[name]
        assert service["image"] == common["image"], name
        assert dockerfile_of(service) == REPO_ROOT / "docker" / "Dockerfile", name
        env = environment(service)
        assert common_env.items() <= env.items(), f"{name} drops or changes common environment variables"
        assert "./dags:/opt/airflow/dags" in service["volumes"], name
    assert (REPO_ROOT / "dags" / "kinesis_snowflake_connectors.py").is_file()


def host_file(service: dict[str, Any], container_path: str) -> Path:
    """The host file a container sees at ``container_path``: the most specific bind mount over it wins."""
    mounts = []
    for volume in service.get("volumes") or []:
        source, target = str(volume).split(":")[:2]
        if source.startswith(".") and (container_path == target or container_path.startswith(target + "/")):
            mounts.append((len(target), REPO_ROOT / source / container_path[len(target) :].lstrip("/")))
    assert mounts, f"nothing mounted at {container_path}"
    return max(mounts)[1].resolve()


def test_the_stack_skips_the_iam_check_it_cannot_run_and_the_template_requires_it(
    services: dict[str, dict[str, Any]],
) -> None:
    template_path = REPO_ROOT / "dags" / "connectors" / "orders.yaml"
    template = yaml.safe_load(template_path.read_text())
    assert template["source"]["iam_check"] == "required", "the shipped template is for AWS"
    for name in AIRFLOW_SERVICES:
        seen = host_file(services[name], "/opt/airflow/dags/connectors/orders.yaml")
        assert seen == REPO_ROOT / "docker" / "connectors" / "orders.yaml", name
    stack_copy = yaml.safe_load(seen.read_text())
    # The stock moto image has no SimulatePrincipalPolicy: required would fail provisioning there.
    assert stack_copy["source"].pop("iam_check") == "best_effort"
    template["source"].pop("iam_check")
    assert stack_copy == template, "docker/connectors/orders.yaml differs from the template in more than iam_check"


def test_airflow_init_migrates_the_database(services: dict[str, dict[str, Any]]) -> None:
    assert environment(services["airflow-init"])["_AIRFLOW_DB_MIGRATE"] == "true"
    for name in LONG_RUNNING_AIRFLOW:
        assert depends_on(services[name])["airflow-init"]["condition"] == "service_completed_successfully", name


def test_components_share_their_secrets(compose: dict[str, Any]) -> None:
    env = environment(compose["x-airflow-common"])
    for key in ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY"):
        assert len(env[key]) >= 64, f"{key} needs a value every component shares"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith("http://airflow-apiserver:8080/")


def test_airflow_dockerfile_installs_the_project() -> None:
    dockerfile = REPO_ROOT / "docker" / "Dockerfile"
    instructions = parse_dockerfile(dockerfile)
    (base,) = resolved_from_images(dockerfile)
    match = re.fullmatch(r"apache/airflow:(\d+\.\d+\.\d+)-python3\.11", base)
    assert match, f"unexpected base image {base!r}"
    airflow_req = next(Requirement(r) for r in pyproject()["dependencies"] if Requirement(r).name == "apache-airflow")
    assert Version(match.group(1)) in airflow_req.specifier, f"{base} does not satisfy {airflow_req}"

    copied: list[str] = []
    for keyword, rest in instructions:
        if keyword == "COPY":
            *sources, _ = [a for a in rest.split() if not a.startswith("--")]
            copied.extend(s.rstrip("/") for s in sources)
    assert {"pyproject.toml", "README.md", "airflow_kinesis_snowflake"} <= set(copied)
    # Every link of the package resolves inside what is copied (spark_jobs -> ../spark_jobs).
    package = REPO_ROOT / "airflow_kinesis_snowflake"
    for link in (p for p in package.rglob("*") if p.is_symlink()):
        target = link.resolve().relative_to(REPO_ROOT).as_posix()
        assert any(target == c or target.startswith(f"{c}/") for c in copied), f"{link} points out of the image"
    # The files the package metadata names (the readme, the license) are in the image's build of it.
    metadata_files = {pyproject()["readme"], *pyproject()["license-files"]}
    assert metadata_files <= set(copied), f"the image builds the package without {metadata_files - set(copied)}"
    for source in copied:
        assert (REPO_ROOT / source).exists(), f"COPY source {source} is not in the build context"

    runs = [rest for keyword, rest in instructions if keyword == "RUN"]
    assert any(re.search(r"\b(default-jre-headless|openjdk-\d+-jre-headless)\b", r) for r in runs), "no Java"
    (install,) = [r for r in runs if "pip install" in r]
    assert '"apache-airflow==${AIRFLOW_VERSION}"' in install
    # Its workers run spark-submit and its Spark daemons the job: the project with its pyspark extra.
    assert '".[spark-submit]"' in install.split(), "pip install does not install the project with pyspark"
    users = [rest for keyword, rest in instructions[: instructions.index(("RUN", install))] if keyword == "USER"]
    assert users and users[-1] == "airflow", "pip install must run as the airflow user"


def test_no_pip_additional_requirements() -> None:
    for path in (COMPOSE_FILE, REPO_ROOT / "docker" / "Dockerfile"):
        assert "_PIP_ADDITIONAL_REQUIREMENTS" not in path.read_text(), path


def test_fakesnow_dockerfile_matches_the_project_pin() -> None:
    dockerfile = REPO_ROOT / "docker" / "fakesnow.Dockerfile"
    (base,) = resolved_from_images(dockerfile)
    assert base.startswith("python:3.11-slim")
    runs = " ".join(rest for keyword, rest in parse_dockerfile(dockerfile) if keyword == "RUN")
    pins = {Requirement(m).name: Requirement(m) for m in re.findall(r'"([^"]+)"', runs)}
    dev = {Requirement(r).name: Requirement(r) for r in pyproject()["optional-dependencies"]["dev"]}
    assert pins["fakesnow"].extras == {"server"}
    (pinned,) = [Version(s.version) for s in pins["fakesnow"].specifier if s.operator == "=="]
    assert pinned in dev["fakesnow"].specifier, "the image's fakesnow differs from the one the tests use"
    assert Version("5.0") not in pins["snowflake-connector-python"].specifier
    cmd = next(json.loads(rest) for keyword, rest in parse_dockerfile(dockerfile) if keyword == "CMD")
    assert option(cmd, "--host") == "0.0.0.0"


# --- connections point at the services -----------------------------------------------------------


def test_connections_are_json_for_the_default_ids(services: dict[str, dict[str, Any]]) -> None:
    env = environment(services["airflow-scheduler"])
    for var in CONNECTION_VARS:
        conn = json.loads(env[var])
        assert isinstance(conn, dict) and conn["conn_type"], var
    # Every connection a connector file names is defined.
    for path in sorted((REPO_ROOT / "dags" / "connectors").glob("*.yaml")):
        connector = yaml.safe_load(path.read_text())
        for conn_id in (connector.get("connections") or {}).values():
            assert f"AIRFLOW_CONN_{conn_id.upper()}" in env, f"{path.name}: {conn_id} is not defined"


def test_aws_connection_points_at_moto(services: dict[str, dict[str, Any]]) -> None:
    conn = connection(services, "AIRFLOW_CONN_AWS_DEFAULT")
    assert conn["conn_type"] == "aws"
    endpoint = urlsplit(conn["extra"]["endpoint_url"])
    moto = services["moto"]
    moto_port = int(environment(moto).get("MOTO_PORT", "5000"))
    assert (endpoint.scheme, endpoint.hostname, endpoint.port) == ("http", "moto", moto_port)
    assert moto_port in container_ports(moto)
    assert f":{moto_port}/" in healthcheck_text(moto)
    assert conn["login"] and conn["password"] and conn["extra"]["region_name"]


def test_snowflake_connection_points_at_fakesnow_over_http(services: dict[str, dict[str, Any]]) -> None:
    conn = connection(services, "AIRFLOW_CONN_SNOWFLAKE_DEFAULT")
    assert conn["conn_type"] == "snowflake"
    extra = conn["extra"]
    fakesnow = services["fakesnow"]
    port = listen_port_from_cmd(dockerfile_of(fakesnow), "-p")
    assert (extra["host"], int(extra["port"]), extra["protocol"]) == ("fakesnow", port, "http")
    assert port in container_ports(fakesnow)
    assert str(port) in healthcheck_text(fakesnow)
    assert extra["account"] and extra["database"] == "ANALYTICS"


def test_spark_connection_points_at_the_master(services: dict[str, dict[str, Any]]) -> None:
    conn = connection(services, "AIRFLOW_CONN_SPARK_DEFAULT")
    master_args = command_args(services["spark-master"])
    assert master_args[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    host, port = option(master_args, "--host"), int(option(master_args, "--port"))
    assert host == "spark-master", "the master must bind the name the others use to reach it"
    assert port in container_ports(services["spark-master"])
    assert conn["conn_type"] == "spark" and conn["port"] == port
    assert conn["host"] in (host, f"spark://{host}")

    worker_args = command_args(services["spark-worker"])
    assert worker_args[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    assert f"spark://{host}:{port}" in worker_args


def test_spark_runs_the_airflow_image(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    """Executors run the Python that the driver in the scheduler names, with the provider's dependencies."""
    for name in ("spark-master", "spark-worker"):
        assert services[name]["image"] == compose["x-airflow-common"]["image"], name
        assert dockerfile_of(services[name]) == REPO_ROOT / "docker" / "Dockerfile", name


def test_connections_resolve_through_the_hooks(services: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    """The provider's own hooks read the compose connections as the services expect them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_CONN_", "AIRFLOW__"))}
    env.update({var: environment(services["airflow-scheduler"])[var] for var in CONNECTION_VARS})
    env["AIRFLOW_HOME"] = str(tmp_path)
    script = """
import json
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook

snowflake = KinesisSnowflakeHook(snowflake_conn_id="snowflake_default")._get_conn_params()
kinesis = KinesisStreamHook(aws_conn_id="aws_default")
print(json.dumps({
    "spark_master": SparkSubmitHook(conn_id="spark_default")._connection["master"],
    "snowflake": {k: snowflake.get(k) for k in ("host", "port", "protocol", "account", "database")},
    "kinesis_job_env": {k: v for k, v in kinesis.job_environment().items() if "SECRET" not in k},
}))
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    resolved = json.loads(proc.stdout.strip().splitlines()[-1])
    assert resolved["spark_master"] == "spark://spark-master:7077"
    assert resolved["snowflake"] == {
        "host": "fakesnow",
        "port": 8000,
        "protocol": "http",
        "account": "fakesnow",
        "database": "ANALYTICS",
    }
    assert resolved["kinesis_job_env"]["AWS_ENDPOINT_URL_KINESIS"] == "http://moto:5000"
    assert resolved["kinesis_job_env"]["AWS_DEFAULT_REGION"] == "us-east-1"


# --- start order ---------------------------------------------------------------------------------


def test_depends_on_only_defined_services_with_matching_conditions(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for target, spec in depends_on(service).items():
            assert target in services, f"{name} depends on undefined service {target}"
            assert target != name
            condition = spec.get("condition", "service_started")
            if condition == "service_healthy":
                assert services[target].get("healthcheck"), f"{name} waits for {target}, which has no healthcheck"
            elif condition == "service_completed_successfully":
                assert "healthcheck" not in services[target] and "restart" not in services[target], target
            else:
                assert condition == "service_started", f"{name} -> {target}: {condition}"


def test_services_with_healthchecks_are_waited_for_as_healthy(services: dict[str, dict[str, Any]]) -> None:
    for name in ["postgres", *EMULATORS, *LONG_RUNNING_AIRFLOW]:
        assert healthcheck_text(services[name]), name
    for name, service in services.items():
        for target, spec in depends_on(service).items():
            if services[target].get("healthcheck"):
                assert spec.get("condition") == "service_healthy", f"{name} does not wait for {target} to be healthy"


def test_tasks_wait_for_the_emulators(services: dict[str, dict[str, Any]]) -> None:
    scheduler = depends_on(services["airflow-scheduler"])
    assert {"postgres", "moto", "fakesnow", "spark-worker"} <= set(scheduler)
    assert "spark-master" in depends_on(services["spark-worker"])
    for name in AIRFLOW_SERVICES:
        assert "postgres" in depends_on(services[name]), name


# --- the Compose Specification --------------------------------------------------------------------

# Vendored from compose-spec/compose-spec (Apache-2.0): see tests/compose_spec/README.md.
COMPOSE_SCHEMA = Path(__file__).resolve().parent / "compose_spec" / "compose-spec.json"


def interpolated(value: Any) -> Any:
    """The whole document as ``docker compose`` reads it with no variables set."""
    if isinstance(value, str):
        return interpolate(value)
    if isinstance(value, dict):
        return {key: interpolated(item) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolated(item) for item in value]
    return value


def schema_errors(document: Any) -> list[str]:
    validator = jsonschema.Draft7Validator(json.loads(COMPOSE_SCHEMA.read_text()))
    return sorted(
        f"{'/'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in validator.iter_errors(document)
    )


def test_the_compose_file_follows_the_compose_specification(compose: dict[str, Any]) -> None:
    assert schema_errors(compose) == []
    assert schema_errors(interpolated(compose)) == []
    # The schema does catch mistakes: a misspelt service key, a volume that is not a mapping.
    broken = copy.deepcopy(compose)
    broken["services"]["moto"]["helthcheck"] = broken["services"]["moto"].pop("healthcheck")
    broken["volumes"]["airflow-backups"] = "local"
    assert [error.split(":")[0] for error in schema_errors(broken)] == ["services/moto", "volumes/airflow-backups"]


# --- backups -------------------------------------------------------------------------------------


def test_backups_outlive_the_containers_on_a_named_volume(
    compose: dict[str, Any], services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_kinesis_snowflake.backups import default_backup_dir

    # The apache/airflow image's AIRFLOW_HOME, unless the stack sets another.
    monkeypatch.setenv("AIRFLOW_HOME", environment(compose["x-airflow-common"]).get("AIRFLOW_HOME", "/opt/airflow"))
    target = default_backup_dir()
    assert target == "/opt/airflow/kinesis_snowflake_backups"
    for name in AIRFLOW_SERVICES:
        mounts = {str(v).split(":")[1]: str(v).split(":")[0] for v in services[name]["volumes"]}
        assert mounts.get(target) in (compose.get("volumes") or {}), f"{name}: {target} is not on a named volume"
    # Docker creates the volume's directory as root: airflow-init hands it to the user the tasks run as.
    script = command_args(services["airflow-init"])[-1]
    assert f"mkdir -p /opt/airflow/logs {target}" in script
    assert f'chown -R "50000:0" /opt/airflow/logs {target}' in script


# --- the README's commands for the stack ---------------------------------------------------------

README = REPO_ROOT / "README.md"
STACK_CONNECTOR = REPO_ROOT / "docker" / "connectors" / "orders.yaml"


def readme_stack_commands() -> list[list[str]]:
    """The commands of the README's "Local stack" block, as a shell splits them (comments dropped)."""
    section = README.read_text().split("\n## Local stack\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    commands, pending = [], ""
    for line in block.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line + "\n"
        if pending.count('"') % 2 == 0:  # a double-quoted python -c program spans lines
            commands.append(shlex.split(pending, comments=True))
            pending = ""
    assert not pending, "unclosed quote in the README's stack commands"
    return commands


def exec_commands() -> list[list[str]]:
    """What runs in the services: each ``docker compose exec SERVICE ...`` after ``docker compose up``."""
    commands = readme_stack_commands()
    assert commands[0][:3] == ["docker", "compose", "up"]
    inside = []
    for command in commands[1:]:
        assert command[:3] == ["docker", "compose", "exec"], command
        service = command[3]
        assert service in LONG_RUNNING_AIRFLOW, f"{service} is not an Airflow service of the stack"
        inside.append(command[4:])
    return inside


def test_the_readme_provisions_then_ingests_the_stacks_connector(services: dict[str, dict[str, Any]]) -> None:
    from airflow_kinesis_snowflake.config import load_connector_config
    from airflow_kinesis_snowflake.dags import ingest_dag_id, provision_dag_id

    config = load_connector_config(STACK_CONNECTOR)
    inside = exec_commands()
    dag_commands = [(c[2], c[3]) for c in inside if c[:2] == ["airflow", "dags"]]
    programs = [c[2] for c in inside if c[:2] == ["python", "-c"]]
    assert len(dag_commands) + len(programs) == len(inside), "only airflow dags and python -c commands"

    provision, ingest = provision_dag_id(config), ingest_dag_id(config)
    triggered = [dag_id for action, dag_id in dag_commands if action == "trigger"]
    assert triggered == [provision, ingest], "provisioning (which creates the table) runs before ingestion"
    for dag_id in triggered:
        # A run of a paused DAG stays queued.
        assert dag_commands.index(("unpause", dag_id)) < dag_commands.index(("trigger", dag_id)), dag_id
        assert ("list-runs", dag_id) in dag_commands, f"nothing shows how {dag_id}'s run went"

    for program in programs:
        compile(program, "README.md", "exec")
    stream_program, count_program = programs
    assert f"StreamName='{config.source.stream_name}'" in stream_program
    assert f"aws_conn_id='{config.connections.aws}'" in stream_program
    assert f"snowflake_conn_id='{config.connections.snowflake}'" in count_program
    d = config.destination
    assert f"FROM {d.database}.{d.schema_}.{d.table}" in count_program
    # What the connector's DAG ids are once the stack loads them.
    for var in (
        f"AIRFLOW_CONN_{config.connections.aws.upper()}",
        f"AIRFLOW_CONN_{config.connections.snowflake.upper()}",
    ):
        assert var in environment(services["airflow-scheduler"])


def test_the_readme_stream_command_creates_the_stream_and_puts_the_orders(emulators: Any, tmp_path: Path) -> None:
    """The README's first program, run as in the scheduler container, with aws_default on the test moto."""
    (stream_program, _) = [c[2] for c in exec_commands() if c[:2] == ["python", "-c"]]
    stream = f"readme-orders-{os.getpid()}-{tmp_path.name}"[:128]
    program = stream_program.replace("StreamName='orders'", f"StreamName='{stream}'")
    assert program != stream_program
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_CONN_", "AIRFLOW__"))}
    env.update(emulators.airflow_env())
    env["AIRFLOW_HOME"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    kinesis = emulators.boto3_client("kinesis")
    shards = kinesis.list_shards(StreamName=stream)["Shards"]
    assert len(shards) == 2
    orders = []
    for shard in shards:
        iterator = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        orders += [json.loads(r["Data"]) for r in kinesis.get_records(ShardIterator=iterator)["Records"]]
    assert sorted(o["order_id"] for o in orders) == list(range(100))
    columns = set(yaml.safe_load(STACK_CONNECTOR.read_text())["snowflake"]["columns"])
    assert all({key.upper() for key in order} == columns for order in orders), "the orders fill the table's columns"
