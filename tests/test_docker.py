"""docker/ against the rest of the repository, statically (no Docker engine runs here).

tests/test_setup.py checks the Dockerfile and compose file on their own (base image, COPY sources,
secrets). This file checks that they agree with what ``make`` and the DAGs do: the same
constraints file and KenLM version/max order as the Makefile (read from the Makefile, not
repeated here), the DAGs folder in the image, one Postgres metadata DB for every Airflow
component, the multi-worker topology of issue 50 (CeleryExecutor on Redis, workers that share
no writable volume, each with its own data volume where the DAG's worker-local paths point, the
releases and the run store on S3, the privacy ledger in its own PostgreSQL database that the init
job creates, no Airflow pool). tests/test_platform.py runs the same configuration for real.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from airflow_compose import read_env_file, service_env, worker_services

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
AIRFLOW_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")


def makefile_variables() -> dict[str, str]:
    """``NAME := value`` assignments of the Makefile (first definition wins)."""
    out: dict[str, str] = {}
    for line in (ROOT / "Makefile").read_text().splitlines():
        match = re.match(r"^([A-Z_]+)\s*:?=\s*(.*?)\s*$", line)
        if match and match.group(1) not in out:
            out[match.group(1)] = match.group(2)
    return out


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuations joined and comments dropped."""
    lines = [ln for ln in (DOCKER / "Dockerfile").read_text().splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [
        (word.upper(), rest.strip())
        for word, _, rest in (ln.strip().partition(" ") for ln in joined.splitlines() if ln.strip())
    ]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def airflow_services(compose: dict) -> dict[str, dict]:
    return {name: svc for name, svc in compose["services"].items() if name.startswith("airflow-")}


def test_image_builds_kenlm_and_installs_exactly_as_make_does():
    make = makefile_variables()
    instructions = dockerfile()
    args = dict(rest.split("=", 1) for word, rest in instructions if word == "ARG" and "=" in rest)
    assert args["KENLM_VERSION"] == make["KENLM_VERSION"]
    assert args["KENLM_MAX_ORDER"] == make["KENLM_MAX_ORDER"]
    from dpngram.lm.kenlm_bin import KENLM_MAX_ORDER

    assert int(make["KENLM_MAX_ORDER"]) == KENLM_MAX_ORDER  # binaries and Python module agree
    runs = [rest for word, rest in instructions if word == "RUN"]
    # the same scripts `make setup` runs for the Debian packages and the KenLM tools
    recipe = (ROOT / "Makefile").read_text()
    for script in ("scripts/system_deps.sh", "scripts/build_kenlm.sh"):
        assert script in recipe
        assert any(script in r for r in runs), script
    # every pip/uv install is pinned by the Makefile's constraints file, which is copied in
    constraints = make["CONSTRAINTS"]
    installs = [r for r in runs if re.search(r"\b(pip|uv pip) install\b", r)]
    assert installs
    for run in installs:
        for command in re.split(r"&&", run):
            if re.search(r"\binstall\b", command):
                assert f"-c {constraints}" in command, command
    assert any(word == "COPY" and constraints in rest.split() for word, rest in instructions)
    # Python of the image = the constraints file's Python
    py_version = re.search(r"constraints-(\d+\.\d+)\.txt", constraints).group(1)
    assert args["PYTHON_IMAGE"].startswith(f"python:{py_version}-")


def test_image_holds_the_dags_folder_airflow_reads():
    instructions = dockerfile()
    env = " ".join(rest for word, rest in instructions if word == "ENV")
    dags_folder = re.search(r"AIRFLOW__CORE__DAGS_FOLDER=(\S+)", env).group(1)
    # the DAGs are copied into the (build-stage) workdir that the runtime stage copies whole
    workdirs = [rest for word, rest in instructions if word == "WORKDIR"]
    build_workdir = workdirs[0]
    copies = [rest.split() for word, rest in instructions if word == "COPY"]
    assert ["dags/", "dags/"] in copies
    assert str(Path(build_workdir) / "dags") == dags_folder.rstrip("/")
    assert any(c[0] == "--from=build" and c[1] == build_workdir for c in copies)
    for dag_file in ("dpngram_release.py", "dpngram_consume_lm.py"):
        assert (ROOT / "dags" / dag_file).is_file()


def test_compose_runs_every_airflow_component_on_one_postgres(compose):
    services = airflow_services(compose)
    commands = {tuple(svc.get("command") or ()) for svc in services.values()}
    for component in AIRFLOW_COMPONENTS:
        assert (component,) in commands, component
    conns = {svc["environment"]["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] for svc in services.values()}
    assert len(conns) == 1  # the same metadata DB for every component
    (conn,) = conns
    assert conn.startswith("postgresql+psycopg2://") and "@postgres:5432/" in conn
    postgres = compose["services"]["postgres"]["environment"]
    assert conn.endswith("/" + postgres["POSTGRES_DB"]) and f"//{postgres['POSTGRES_USER']}:" in conn
    secrets = {svc["environment"]["AIRFLOW__API_AUTH__JWT_SECRET"] for svc in services.values()}
    assert len(secrets) == 1
    executors = {service_env(name, compose)["AIRFLOW__CORE__EXECUTOR"] for name in services}
    assert executors == {"CeleryExecutor"}


def test_celery_workers_on_redis_with_results_in_the_metadata_db(compose):
    """Two (or more) ``airflow celery worker`` services; the broker is the redis service, and task
    states go to the metadata database through psycopg2 (a bare ``db+postgresql://`` would need
    psycopg 3, which the image does not install)."""
    workers = worker_services(compose)
    assert len(workers) >= 2, workers
    redis = compose["services"]["redis"]
    assert redis["image"].startswith("redis:") and "healthcheck" in redis
    for name in airflow_services(compose):
        env = service_env(name, compose)
        assert env["AIRFLOW__CELERY__BROKER_URL"] == "redis://redis:6379/0", name
        backend = env["AIRFLOW__CELERY__RESULT_BACKEND"]
        assert backend == "db+" + env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], name
        assert backend.startswith("db+postgresql+psycopg2://"), name
        if name != "airflow-init":
            assert compose["services"][name]["depends_on"]["redis"]["condition"] == "service_healthy", name
    for name in workers:
        worker = compose["services"][name]
        assert worker["depends_on"]["airflow-api-server"]["condition"] == "service_healthy"
        assert "inspect ping" in " ".join(worker["healthcheck"]["test"])


def test_plain_settings_are_in_the_env_file_the_platform_test_reads(compose):
    """docker/airflow.env is every Airflow service's env_file and the settings source of
    tests/test_platform.py (through airflow_compose), so the two cannot drift."""
    settings = read_env_file(DOCKER / "airflow.env")
    assert settings["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    # the deployment's task slots hold every worker's
    slots = len(worker_services(compose)) * int(settings["AIRFLOW__CELERY__WORKER_CONCURRENCY"])
    assert int(settings["AIRFLOW__CORE__PARALLELISM"]) >= slots
    # a worker holds only what it runs; a dead worker's task is retried, not redelivered early
    assert settings["AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER"] == "1"
    assert settings["AIRFLOW__CELERY__TASK_ACKS_LATE"] == "True"
    assert settings["AIRFLOW__CELERY__POOL"] == "prefork"  # 'threads' cannot run Airflow's supervisor
    assert int(settings["AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT"]) >= 6 * 3600
    for name, svc in airflow_services(compose).items():
        assert svc["env_file"] == ["airflow.env"], name
        env = service_env(name, compose)
        assert {k: env[k] for k in settings} == settings, name  # not overridden by environment:


def test_no_pool_the_init_job_creates_the_ledger_database(compose):
    """The tasks of one run take turns through the ledger (no Airflow pool any more): the init job
    migrates, creates the role and database that ``AIRFLOW_CONN_DPNGRAM_LEDGER`` names, and
    writes the bot's password; every Airflow service waits for it."""
    source = (ROOT / "dags" / "dpngram_release.py").read_text()
    assert not re.search(r"\bpool\s*=", source)  # no task is put in a pool
    init = compose["services"]["airflow-init"]
    script = " ".join(init["command"])
    commands = [shlex.split(c) for c in script.split("&&")]
    assert ["airflow", "db", "migrate"] in commands
    assert not any(c[:2] == ["airflow", "pools"] for c in commands)
    ledger = init["environment"]["AIRFLOW_CONN_DPNGRAM_LEDGER"]
    for worker in worker_services(compose):
        assert service_env(worker, compose)["AIRFLOW_CONN_DPNGRAM_LEDGER"] == ledger, worker
    assert 'os.environ["AIRFLOW_CONN_DPNGRAM_LEDGER"]' in script
    assert "CREATE DATABASE" in script and "ROLE" in script
    for name in airflow_services(compose):
        if name != "airflow-init":
            depends = compose["services"][name]["depends_on"]
            assert depends["airflow-init"]["condition"] == "service_completed_successfully", name


def test_the_ledger_is_a_postgres_database_of_its_own(compose):
    """``AIRFLOW_CONN_DPNGRAM_LEDGER`` (the connection the DAG's tasks look up) names a database on
    the postgres service other than Airflow's, with its own user and a required password: a
    shared ledger, as a deployment with a run store must have."""
    from dpngram.orchestration.task import LEDGER_CONNECTION
    from dpngram.release.ledger_store import is_shared

    variable = f"AIRFLOW_CONN_{LEDGER_CONNECTION.upper()}"
    assert variable == "AIRFLOW_CONN_DPNGRAM_LEDGER"
    holders = [n for n in airflow_services(compose) if variable in service_env(n, compose)]
    assert sorted(holders) == sorted(["airflow-init", *worker_services(compose)])  # not the others
    url = service_env(worker_services(compose)[0], compose)[variable]
    found = re.fullmatch(r"postgresql://(\w+):\$\{DPNGRAM_LEDGER_PASSWORD:\?[^}]+\}@postgres:5432/(\w+)", url)
    assert found, url
    user, database = found.groups()
    postgres = compose["services"]["postgres"]["environment"]
    assert database != postgres["POSTGRES_DB"] and user != postgres["POSTGRES_USER"]
    assert is_shared(url.replace("${", "").replace("}", ""))


def test_workers_share_only_s3_and_postgres(compose):
    """Each worker has a data volume of its own (no writable volume is shared by two workers but
    Airflow's logs), where ``DPNGRAM_WAREHOUSE``, the consumer's output and the cache point; the
    input volume is read-only; releases (``DPNGRAM_OUT``) and the run store are on S3, whose
    endpoint and credentials compose passes on; only the workers hold the S3 credentials and the
    run store."""
    workers = worker_services(compose)
    hostnames = [compose["services"][w]["hostname"] for w in workers]
    assert len(set(hostnames)) == len(workers)
    named = set(compose["volumes"])
    writable: dict[str, list[str]] = {}
    for name in workers:
        svc = compose["services"][name]
        env = service_env(name, compose)
        mounts = {}
        for volume in svc["volumes"]:
            source, target, *mode = volume.split(":")
            assert source in named, volume
            mounts[target] = source
            if mode != ["ro"]:
                writable.setdefault(source, []).append(name)
        assert f"{env['DPNGRAM_DEMO_DIR']}:ro" in {":".join(v.split(":")[1:]) for v in svc["volumes"]}
        data = next(t for t in mounts if t == "/data/worker")
        for variable in ("DPNGRAM_WAREHOUSE", "DPNGRAM_CONSUMER_OUT", "XDG_CACHE_HOME"):
            assert env[variable].startswith(data + "/"), (name, variable)
        assert env["DPNGRAM_OUT"].startswith("s3://${DPNGRAM_RELEASE_BUCKET:?")
        assert env["DPNGRAM_RUN_STORE"].startswith("s3://${DPNGRAM_PRIVATE_BUCKET:?")
        assert env["AWS_ENDPOINT_URL"] == "${DPNGRAM_S3_ENDPOINT:-}"  # empty: AWS itself
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert env[key] == f"${{{key}:?set {key}}}", key
    shared = {volume: users for volume, users in writable.items() if len(users) > 1}
    assert set(shared) == {"airflow-logs"}, shared  # Airflow's task logs only
    # the DAG's worker-local paths: the warehouse is no Param default any more, and OUT is the
    # same string for the dag-processor (asset URIs, Param default) and the workers
    source = (ROOT / "dags" / "dpngram_release.py").read_text()
    assert '"warehouse":' not in source.split("def _param_defaults")[1].split("return defaults")[0]
    outs = {service_env(n, compose)["DPNGRAM_OUT"] for n in airflow_services(compose)}
    assert len(outs) == 1
    for name in airflow_services(compose):
        if name not in workers:
            env = service_env(name, compose)
            assert not {"AWS_SECRET_ACCESS_KEY", "DPNGRAM_RUN_STORE"} & set(env), name
    image = " ".join(rest for word, rest in dockerfile() if word == "VOLUME")
    assert '"/data/worker"' in image and '"/data/dpngram"' in image


def test_local_settings_preload_only_where_tasks_are_forked():
    # The image installs it where Airflow looks for local settings: $AIRFLOW_HOME/config.
    dockerfile = (DOCKER / "Dockerfile").read_text()
    home = re.search(r"AIRFLOW_HOME=(\S+)", dockerfile).group(1)
    assert re.search(
        rf"^COPY .*docker/airflow_local_settings\.py {re.escape(home)}/config/airflow_local_settings\.py$",
        dockerfile,
        re.M,
    )
    text = (DOCKER / "airflow_local_settings.py").read_text()
    assert "__all__" in text  # Airflow copies public names of local settings into its settings
    compiled = compile(text, "airflow_local_settings.py", "exec")
    namespace: dict = {"__name__": "airflow_local_settings"}
    import sys

    argv = sys.argv
    try:
        sys.argv = ["airflow", "api-server"]
        before = set(sys.modules)
        exec(compiled, namespace)  # noqa: S102 - our own file
        assert namespace["_is_scheduler"]() is False
        sys.argv = ["airflow", "scheduler"]
        assert namespace["_is_scheduler"]() is True
        sys.argv = ["airflow", "celery", "worker", "--concurrency", "2"]  # the Celery workers fork tasks
        assert namespace["_is_scheduler"]() is True
        sys.argv = ["airflow", "celery", "flower"]
        assert namespace["_is_scheduler"]() is False
    finally:
        sys.argv = argv
    assert not {m for m in set(sys.modules) - before if m.startswith("dpngram")}
    for module in namespace["PRELOAD"]:
        assert (ROOT / "src" / (module.replace(".", "/") + ".py")).is_file(), module


def test_the_execution_api_is_warm_before_the_scheduler_starts(compose):
    """The execution API builds its routes on its first request (seconds): compose's api-server
    healthcheck makes that request, and the scheduler waits for the healthcheck, so the first task
    does not pay it (issue 28, item 6). The local launchers ask the same paths."""
    from airflow_compose import api_server_health_paths

    paths = api_server_health_paths(compose)
    assert "/execution/health" in paths and "/api/v2/monitor/health" in paths
    api = compose["services"]["airflow-api-server"]["healthcheck"]
    assert int(api["timeout"].removesuffix("s")) > 30  # the first request takes seconds under load
    depends = compose["services"]["airflow-scheduler"]["depends_on"]
    assert depends["airflow-api-server"]["condition"] == "service_healthy"


def test_the_note_connection_logs_in_as_a_user_init_gives_a_password(compose):
    """A refused task writes its DAG run's note through the REST API with connection dpngram_api:
    the workers (which run the tasks) have it, its user is a simple-auth-manager user allowed to
    edit DAG runs, and airflow-init writes that user's password where the api-server reads it."""
    from airflow_compose import note_connection_user

    user = note_connection_user(compose)
    listed = service_env("airflow-api-server", compose)["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"]
    users = dict(entry.rsplit(":", 1) for entry in listed.split(","))  # USER:ROLE; USER may be ${...}
    assert users[user] in ("user", "op", "admin")  # USER and above may edit DAG runs
    init = compose["services"]["airflow-init"]
    script = " ".join(init["command"])
    assert f'"{user}": os.environ["DPNGRAM_API_PASSWORD"]' in script
    assert init["environment"]["DPNGRAM_API_PASSWORD"].startswith("${DPNGRAM_API_PASSWORD:?")
    api = service_env("airflow-api-server", compose)
    assert (
        init["environment"]["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
        == (api["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"])
    )
    api_mounts = set(compose["services"]["airflow-api-server"]["volumes"])
    auth = [v for v in init["volumes"] if v.split(":")[1] == "/opt/airflow/auth"]
    assert auth and auth[0] in api_mounts  # the same volume
    # only the services that run tasks hold the credentials
    holders = [n for n in airflow_services(compose) if "AIRFLOW_CONN_DPNGRAM_API" in service_env(n, compose)]
    assert holders == worker_services(compose)
