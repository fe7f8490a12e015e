"""The production platform of docker/compose.yaml run for real, without Docker (issue 50):
Airflow 3 with the CeleryExecutor and two workers that share no disk.

The configuration is compose's own: every Airflow process gets the environment compose gives its
service (docker/compose.yaml + docker/airflow.env through tests/airflow_compose.py, with this
test's values for compose's variables: secrets, buckets, the S3 endpoint, DPNGRAM_SCHEDULE and
DPNGRAM_PARAMS), only compose's host names and container paths mapped to this machine.
:class:`PlatformAirflow` lists what the test changes besides (ports, faster heartbeat-timeout
detection and DAG parsing, 2 s retry delay, the consumer's queue). The processes:

* PostgreSQL (Debian's ``postgresql``): Airflow's metadata, Celery's results and, in a database
  compose's ``airflow-init`` command (run as written) creates, the privacy ledger
  (``AIRFLOW_CONN_DPNGRAM_LEDGER``);
* Redis (Debian's ``redis-server``): the Celery broker;
* moto's S3 server: the only storage the two workers share. Bucket ``dpngram-releases`` holds
  the releases (``DPNGRAM_OUT``), bucket ``dpngram-private`` the run store (``DPNGRAM_RUN_STORE``);
* api-server, scheduler, dag-processor (compose's triggerer is not started: no dpngram task
  defers);
* two ``airflow celery worker`` processes, ``airflow-worker-1`` and ``airflow-worker-2`` (compose's
  host names, recorded as the task instances' ``hostname``), each with a data folder of its own:
  its ``/data/worker`` (``DPNGRAM_WAREHOUSE``, ``DPNGRAM_CONSUMER_OUT``, ``XDG_CACHE_HOME``), and its
  own ``XDG_DATA_HOME``, ``TMPDIR`` and ``HOME``.

The inputs (a 300-user sample corpus, the public corpus and the consumer's held-out text) sit in
one input folder both workers read, compose's read-only volume ``dpngram-input`` at
``/data/dpngram`` (``DPNGRAM_DEMO_DIR``): it stands for a mounted input lake. Everything the
pipeline writes goes to a worker's own folder, to S3 or to PostgreSQL; the input folder is
checked to be unchanged at the end (the test runs as root on CI, where a read-only mode would
not stop a write).

Scenarios (one module fixture each, in this order; each test asserts from the REST API, the
ledger and S3):

a. the DAG is unpaused with ``DPNGRAM_SCHEDULE=@yearly`` and ``lifetime_epsilon`` in
   ``DPNGRAM_PARAMS`` (``catchup=False``): the most recent interval's run is created at once
   (``run_type`` scheduled; ``@yearly`` so that no second one can come during the test), and a
   run triggered through the REST API with an empty conf (what the trigger form sends with every
   default: the default budget split, every stage and the language model) goes with it; both
   publish;
e. meanwhile worker-2 is the downstream team's worker, serving only the queue ``consumers``
   (``DPNGRAM_CONSUMER_QUEUE``), and worker-1 serves ``default``: every release task runs on
   worker-1 and the consumer DAG on worker-2, which downloads the model from S3 into its own
   folder (SHA-256 checked against the manifest by ``fetch_verified``) and scores it; worker-2
   then serves ``default,consumers`` for the other scenarios;
b. two datasets' runs triggered together both publish into their own ``OUT/DATASET/latest.json``,
   their task intervals overlapping in time;
c. two runs racing for one dataset's last budget (lifetime 6, epsilon 4 each): exactly one
   publishes, the other is refused at ``privacy_precheck`` with the one-line reason, and the
   ledger holds the winner's charges only, nothing reserved for the loser;
d. the worker running a run's ``lm`` task (which draws no noise) is killed (``kill -9`` of its
   whole session): the task is retried on the other worker, the run publishes exactly one
   release, and the ledger has one entry per charged stage summing to the run's epsilon.

About 5 minutes on 2 cores (4 min 30 s on an idle machine, 5 min 30 s beside two busy
processes; the deployment is ready after ~30 s), so it is marked ``platform``: ``make
test-platform`` runs it (CI too, as a step of its own), ``make test`` skips it (tests/conftest.py).
A timings line is printed at the end (``-s``): start-up, each scenario, the total, the load.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import math
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow_compose import (
    DOCKER,
    ROOT,
    PostgresServer,
    compose,
    compose_service_env,
    free_port,
    init_script,
    postgres_bindir,
    read_env_file,
    worker_services,
)
from platform_harness import (
    HOSTNAME_ENV,
    HOSTNAME_MODULE,
    WORKER_DIR_ENV,
    CeleryAirflow,
    RedisServer,
    S3Server,
    Worker,
    _start,
    _stop,
    redis_server_binary,
)
from test_airflow_standalone import AIRFLOW, CONSUMER_ID, DAG_ID, PASSWORD, USERNAME

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.platform]

RELEASE_BUCKET = "dpngram-releases"
PRIVATE_BUCKET = "dpngram-private"
#: The downstream team's Celery queue (DPNGRAM_CONSUMER_QUEUE), served by worker-2 only.
CONSUMER_QUEUE = "consumers"
#: One scheduled run at the unpause, none after it during the test (next: 1 January).
SCHEDULE = "@yearly"
#: The lifetime budget of the default dataset: room for the scheduled and the triggered run (4 each).
DEFAULT_LIFETIME = 10.0
#: A cheap split that still builds a language model (vocabulary, k-grams, LM counts, model).
CHEAP = {"dpne": 0.5, "lm_counts": 0.5}
#: Seconds after its last heartbeat a dead worker's task is failed (and retried): compose keeps
#: Airflow's default (300 s); the test shortens it, as the harness does.
HEARTBEAT_TIMEOUT = 20
RUN_TIMEOUT = 600.0
W1, W2 = "airflow-worker-1", "airflow-worker-2"


# -- the deployment --------------------------------------------------------------------------------


class PlatformAirflow(CeleryAirflow):
    """:class:`platform_harness.CeleryAirflow` with compose's configuration: each process gets the
    environment compose gives its service (airflow-init, api-server, scheduler, dag-processor,
    airflow-worker-N), the workers compose's host names. What the test adds or changes is in
    :meth:`test_settings` and :meth:`worker_environment`."""

    #: compose variables the test deliberately sets to another value than compose's files
    CHANGED = frozenset({"DPNGRAM_CONSUMER_QUEUE"})

    def __init__(
        self,
        base: Path,
        pg: PostgresServer,
        redis: RedisServer,
        *,
        variables: dict[str, str],
        input_dir: Path,
        queues: dict[str, tuple[str, ...]],
        kenlm_bin: str,
    ) -> None:
        self.spec = compose()
        self.variables = dict(variables)
        self.input_dir = input_dir
        self.kenlm_bin = kenlm_bin
        self.health_port = free_port()
        #: worker host name (compose's ``hostname:``) -> its compose service
        self.worker_service = {self.spec["services"][s]["hostname"]: s for s in worker_services(self.spec)}
        workers = [
            Worker(name=host, data_dir=Path(base) / "workers" / host, queues=tuple(queues[host]))
            for host in self.worker_service
        ]
        settings = read_env_file(DOCKER / "airflow.env")
        super().__init__(
            base,
            pg,
            redis,
            ROOT / "dags",
            workers=workers,
            concurrency=int(settings["AIRFLOW__CELERY__WORKER_CONCURRENCY"]),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            local_settings=DOCKER / "airflow_local_settings.py",  # the image's $AIRFLOW_HOME/config
        )
        auth = self.base / "auth"
        auth.mkdir(exist_ok=True)
        # the admin's password (compose: generated by the api-server); airflow-init adds the bot's
        (auth / "passwords.json").write_text(json.dumps({USERNAME: PASSWORD}))

    # -- configuration -----------------------------------------------------------------------------
    def image_env(self) -> dict[str, str]:
        """What the image's ``ENV`` sets (docker/Dockerfile), for this machine."""
        return {
            "AIRFLOW_HOME": str(self.paths["airflow_home"]),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.paths["dags"]),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "DPNGRAM_KENLM_BIN": self.kenlm_bin,
            "GX_ANALYTICS_ENABLED": "False",
            "PYTHONUNBUFFERED": "1",
        }

    def test_settings(self) -> dict[str, str]:
        """The test's additions to compose's settings (every process): its ports; faster DAG
        parsing and heartbeat-timeout detection; a 2-s retry delay; the consumer's queue; no AWS
        configuration files or instance metadata of this machine."""
        home = self.paths["airflow_home"]
        return {
            # compose publishes the api-server's port 8080; here a free port
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT": str(self.health_port),
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(self.heartbeat_timeout),
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
            "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "2",
            "DPNGRAM_RETRY_DELAY_SECONDS": "2",
            "DPNGRAM_CONSUMER_QUEUE": CONSUMER_QUEUE,
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def service_environment(self, service: str, data_dir: Path | None = None) -> dict[str, str]:
        """The environment of ``service``'s process: this machine's (without Airflow, dpngram, AWS
        and XDG variables), the image's ENV, compose's environment of the service (mapped), then
        :meth:`test_settings`. ``data_dir``: the worker's folder, where compose mounts its volume
        (``/data/worker``)."""
        paths = {
            "/data/dpngram": self.input_dir,
            "/opt/airflow/auth": self.base / "auth",
            "/opt/airflow/logs": self.paths["airflow_home"] / "logs",
        }
        if data_dir is not None:
            paths["/data/worker"] = data_dir
        addresses = {
            "postgres": f"127.0.0.1:{self.pg.port}",
            "redis": f"127.0.0.1:{self.redis.port}",
            "api-server": f"127.0.0.1:{self.port}",
        }
        mapped = compose_service_env(
            service, variables=self.variables, addresses=addresses, paths=paths, spec=self.spec
        )
        extra = self.test_settings()
        changed = {k for k in set(mapped) & set(extra) if mapped[k] != extra[k]}
        assert changed <= self.CHANGED, f"the test would change compose's {sorted(changed - self.CHANGED)}"
        dropped = ("AIRFLOW", "DPNGRAM_", "AWS_", "XDG_", "FSSPEC_", "PYTHONPATH")
        env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
        env.update(self.image_env())
        if data_dir is None:  # a container's own ~/.local/share, never this machine's user's
            env["XDG_DATA_HOME"] = str(self.base / "share" / service)
        env.update(mapped)
        env.update(extra)
        return env

    def settings(self) -> dict[str, str]:
        """Each non-worker service's environment (:attr:`service_envs`); the scheduler's is
        :attr:`env` (what the harness's helpers use)."""
        self.service_envs = {
            name: self.service_environment(name)
            for name in ("airflow-init", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor")
        }
        return self.service_envs["airflow-scheduler"]

    def worker_environment(self, worker: Worker) -> dict[str, str]:
        """compose's environment of the worker's service with its volume at its own folder, plus
        what a container has of its own: the host name (here through ``hostname_callable``),
        ``HOME``, ``TMPDIR`` and ``XDG_DATA_HOME`` (in the folder too)."""
        data = worker.data_dir
        env = self.service_environment(self.worker_service[worker.name], data)
        own = {"HOME": data / "home", "TMPDIR": data / "tmp", "XDG_DATA_HOME": data / "share"}
        for path in own.values():
            path.mkdir(parents=True, exist_ok=True)
        env.update({k: str(v) for k, v in own.items()})
        env.update(
            {
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": f"{HOSTNAME_MODULE}.hostname",
                HOSTNAME_ENV: worker.name,
                WORKER_DIR_ENV: str(data),
                "PYTHONPATH": str(self.pythonpath),
            }
        )
        for key, value in worker.env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    # -- processes ---------------------------------------------------------------------------------
    def setup(self) -> None:
        """compose's airflow-init command as written (``airflow db migrate``, the ledger's role and
        database, the bot's password), with airflow-init's environment; the image's local settings."""
        home = self.paths["airflow_home"]
        (home / "logs").mkdir(parents=True, exist_ok=True)
        (home / "config").mkdir(exist_ok=True)
        (home / "config" / "airflow_local_settings.py").write_bytes(self.local_settings.read_bytes())
        log = self.logs_dir / "airflow-init.log"
        with log.open("w", encoding="utf-8") as fh:
            proc = subprocess.run(
                ["bash", "-c", init_script(self.spec)],
                env=self.service_envs["airflow-init"],
                stdout=fh,
                stderr=subprocess.STDOUT,
                cwd=self.base,
                check=False,
            )
        assert proc.returncode == 0, f"airflow-init failed:\n{log.read_text()[-4000:]}"

    def start(self) -> None:
        """airflow-init, then api-server, scheduler, dag-processor (each with its service's
        environment) and the workers, without waiting (:meth:`wait_ready`)."""
        self._t0 = time.monotonic()
        self.setup()
        self._mark("airflow_init")
        commands = {
            "api-server": (
                "airflow-api-server",
                ["api-server", "--host", "127.0.0.1", "--port", str(self.port)],
            ),
            "scheduler": ("airflow-scheduler", ["scheduler"]),
            "dag-processor": ("airflow-dag-processor", ["dag-processor"]),
        }
        for name, (service, args) in commands.items():
            assert self.spec["services"][service]["command"] == args[:1], service
            self.procs[name] = _start(
                [AIRFLOW, *args], self.service_envs[service], self.logs_dir / f"{name}.log", self.base
            )
        for i in range(len(self.workers)):
            self.start_worker(i)

    def serve(self, host: str, queues: tuple[str, ...]) -> float | None:
        """Make worker ``host`` consume ``queues``: restarted (a warm shutdown first: it is idle)
        if it serves others or is not running. Returns the seconds to ``ready.``, None if no
        restart was needed."""
        i = self.worker_index(host)
        worker = self.workers[i]
        if worker.queues == tuple(queues) and worker.key in self.procs:
            return None
        proc = self.procs.pop(worker.key, None)
        if proc is not None:
            _stop(proc, grace=20)
        worker.queues = tuple(queues)
        self.start_worker(i)
        return self.wait_worker_ready(i)

    def ledger_url(self) -> str:
        """The ledger the workers charge (compose's AIRFLOW_CONN_DPNGRAM_LEDGER, mapped)."""
        return self.worker_environment(self.workers[0])["AIRFLOW_CONN_DPNGRAM_LEDGER"]

    # -- REST helpers ------------------------------------------------------------------------------
    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        status, body = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        assert status == 200, (status, body)
        return body

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        status, body = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100&order_by=run_after")
        assert status == 200, (status, body)
        return body["dag_runs"]

    def finish(self, dag_id: str, run_ids: list[str], timeout: float = RUN_TIMEOUT) -> dict[str, str]:
        """Wait until every run is success or failed; their states."""

        def done() -> dict[str, str] | None:
            states = {r: self.dag_run(dag_id, r)["state"] for r in run_ids}
            return states if all(s in ("success", "failed") for s in states.values()) else None

        return self.wait_until(f"runs {run_ids} of {dag_id}", done, timeout, interval=2)


# -- S3 and files ----------------------------------------------------------------------------------


def _files(folder: Path) -> list[str]:
    """Every file under ``folder``, relative, sorted."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def _s3_json(fs, path: str) -> Any:
    fs.invalidate_cache()
    return json.loads(fs.cat_file(path))


def _run_id(dag_run_id: str) -> str:
    from dpngram.release.context import run_id_from

    return run_id_from(dag_run_id)


def _out() -> str:
    return f"s3://{RELEASE_BUCKET}/releases"


def _published(fs, dataset: str) -> list[str]:
    """The run ids with a MANIFEST.json under OUT/DATASET/runs/ (complete releases)."""
    fs.invalidate_cache()
    found = fs.glob(f"{RELEASE_BUCKET}/releases/{dataset}/runs/*/MANIFEST.json")
    return sorted(p.split("/")[-2] for p in found)


def _spans(af: PlatformAirflow, run_id: str) -> list[tuple[float, float, str, str]]:
    """(start, end, task id, host) of every task instance of a run that ran."""
    import datetime as dt

    def ts(text: str) -> float:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

    return [
        (ts(ti["start_date"]), ts(ti["end_date"]), task, ti["hostname"])
        for task, ti in af.task_states(DAG_ID, run_id).items()
        if ti.get("start_date") and ti.get("end_date") and ti["state"] != "skipped"
    ]


# -- fixtures: the platform, then one per scenario ----------------------------------------------------


def compose_variables(pg: PostgresServer, s3: S3Server, **overrides: str) -> dict[str, str]:
    """Values for compose's variables (a deployment's ``docker/.env``): the test's secrets, the
    local S3 server and its buckets, no schedule and no Param defaults unless ``overrides`` say."""
    variables = {
        "POSTGRES_PASSWORD": pg.password,
        "AIRFLOW_FERNET_KEY": base64.urlsafe_b64encode(b"dpngram-platform-test-fernet-32b").decode(),
        "AIRFLOW_JWT_SECRET": "dpngram-platform-test-secret-" + "x" * 40,  # >= 64 bytes (HS512)
        "AIRFLOW_API_SECRET_KEY": "dpngram-platform-test-key",
        "AIRFLOW_ADMIN_USER": USERNAME,
        "DPNGRAM_API_PASSWORD": "dpngram-platform-test-bot-password",
        "DPNGRAM_LEDGER_PASSWORD": "dpngram-platform-test-ledger-password",
        "AWS_ACCESS_KEY_ID": S3Server.ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": S3Server.SECRET_KEY,
        "AWS_DEFAULT_REGION": s3.region,
        "DPNGRAM_S3_ENDPOINT": s3.endpoint,
        "DPNGRAM_RELEASE_BUCKET": RELEASE_BUCKET,
        "DPNGRAM_PRIVATE_BUCKET": PRIVATE_BUCKET,
        "DPNGRAM_SCHEDULE": "none",
        "DPNGRAM_PARAMS": "",
    }
    variables.update(overrides)
    return variables


@contextlib.contextmanager
def running_platform(
    base: Path,
    input_dir: Path,
    *,
    queues: dict[str, tuple[str, ...]] | None = None,
    **variables: str,
) -> Iterator[dict[str, Any]]:
    """PostgreSQL, Redis and S3 (both buckets made) started, then the deployment (ready, logged in);
    everything stopped on leaving. ``input_dir``: the input lake (``/data/dpngram``); ``queues``:
    each worker's Celery queues (default: ``default``); ``variables``: compose variables to
    override (:func:`compose_variables`). Yields a dict: ``af`` (:class:`PlatformAirflow`), ``s3``,
    ``pg``, ``fs`` (s3fs on the S3 server), ``ledger_url``, ``variables``, ``timings``."""
    from dpngram.lm.kenlm_bin import kenlm_binary

    t0 = time.monotonic()
    timings: dict[str, Any] = {}
    pg = PostgresServer(user="airflow", database="airflow", password="platform-test-pg-password")
    redis, s3 = RedisServer(), S3Server()
    af: PlatformAirflow | None = None
    out: dict[str, Any] = {"timings": timings, "pg": pg, "s3": s3}
    try:
        pg.start()
        redis.start()
        s3.start()
        for bucket in (RELEASE_BUCKET, PRIVATE_BUCKET):
            s3.make_bucket(bucket)
        timings["servers"] = round(time.monotonic() - t0, 1)
        out["variables"] = compose_variables(pg, s3, **variables)
        af = PlatformAirflow(
            base,
            pg,
            redis,
            variables=out["variables"],
            input_dir=input_dir,
            queues=queues or {W1: ("default",), W2: ("default",)},
            kenlm_bin=str(kenlm_binary("lmplz").parent),
        )
        out.update(af=af, fs=s3.filesystem(), ledger_url=af.ledger_url())
        af.start()
        af.wait_ready()
        timings["ready"] = round(time.monotonic() - t0, 1)
        timings["startup"] = dict(af.timings)
        yield out
    finally:
        out["tails"] = af.tails() if af is not None else ""
        if af is not None:
            af.stop()
        s3.stop()
        redis.stop()
        pg.stop()
        timings["total"] = round(time.monotonic() - t0, 1)


def write_input_lake(lake: Path, n_users: int = 300, seed: int = 50) -> dict[str, Path]:
    """The input lake: the sample corpus, its public corpus and held-out users in ``lake/sample``
    (the DAG's default input and public corpus under ``DPNGRAM_DEMO_DIR``), and the consumer's
    default held-out text ``heldout_users.txt`` (one document a line)."""
    import gzip

    from dpngram.text.sample import write_sample

    sample = write_sample(
        lake / "sample", n_users=n_users, seed=seed, public_sentences=2000, heldout_users=30
    )
    with gzip.open(sample["heldout_users"], "rt", encoding="utf-8") as src:
        (lake / "sample" / "heldout_users.txt").write_text(
            "".join(json.loads(line)["text"].replace("\n", " ") + "\n" for line in src)
        )
    return sample


@pytest.fixture(scope="module")
def platform(tmp_path_factory):
    """The deployment, started with the schedule and Param defaults of scenario a, worker-2 on the
    consumers' queue only (scenario e); the release DAG unpaused, which creates the scheduled run at
    once. Yields :func:`running_platform`'s dict plus ``lake``, ``lake_before`` (the input files'
    modification times) and ``unpaused_at``; prints the timings line at the end."""
    if postgres_bindir() is None:
        pytest.skip("no PostgreSQL server binaries: install Debian's 'postgresql' (scripts/system_deps.sh)")
    if redis_server_binary() is None:
        pytest.skip("no redis-server: install Debian's 'redis-server' (scripts/system_deps.sh)")
    base = tmp_path_factory.mktemp("platform")
    # the input lake (compose's read-only volume dpngram-input at /data/dpngram = DPNGRAM_DEMO_DIR)
    lake = base / "input"
    write_input_lake(lake)
    lake_before = {p: (lake / p).stat().st_mtime_ns for p in _files(lake)}
    timings: dict[str, Any] = {}
    try:
        with running_platform(
            base,
            lake,
            queues={W1: ("default",), W2: (CONSUMER_QUEUE,)},  # scenario e first
            DPNGRAM_SCHEDULE=SCHEDULE,
            # the deployment's Param defaults: a small T and the default dataset's lifetime budget
            # (the input and public corpus default to DPNGRAM_DEMO_DIR/sample/)
            DPNGRAM_PARAMS=json.dumps({"max_n": 2, "lifetime_epsilon": DEFAULT_LIFETIME}),
        ) as out:
            timings = out["timings"]
            out.update(lake=lake, lake_before=lake_before)
            out["af"].unpause(DAG_ID)  # with the schedule: the scheduled run is created now
            out["unpaused_at"] = time.monotonic()
            yield out
    finally:
        load = [round(x, 2) for x in os.getloadavg()]
        print(f"\nplatform timings (s): {json.dumps(timings)} load={load}")


def _timed(platform: dict[str, Any], name: str, t0: float) -> None:
    platform["timings"][name] = round(time.monotonic() - t0, 1)


@pytest.fixture(scope="module")
def default_runs(platform) -> dict[str, Any]:
    """Scenarios a and e: the scheduled run the unpause created and a REST-triggered run with
    every default, while worker-2 serves only the consumers' queue; then the consumer's runs."""
    af: PlatformAirflow = platform["af"]
    t0 = time.monotonic()
    af.serve(W2, (CONSUMER_QUEUE,))  # (already so, unless another scenario ran first)
    triggered = af.trigger_dag(DAG_ID, {})  # what the trigger form sends with every default

    def scheduled() -> dict[str, Any] | None:
        runs = [r for r in af.dag_runs(DAG_ID) if r["run_type"] == "scheduled"]
        return runs[0] if runs else None

    sched = af.wait_until("the scheduled run", scheduled, 60, interval=0.5)
    out: dict[str, Any] = {"triggered": triggered, "scheduled": sched}
    out["scheduled_after_unpause"] = round(
        time.monotonic() - platform["unpaused_at"], 1
    )  # upper bound (polling)
    ids = [triggered["dag_run_id"], sched["dag_run_id"]]
    out["states"] = af.finish(DAG_ID, ids)
    out["tasks"] = {r: af.task_states(DAG_ID, r) for r in ids}
    fs = platform["fs"]
    out["pointer"] = (
        _s3_json(fs, f"{RELEASE_BUCKET}/releases/default/latest.json")
        if fs.exists(f"{RELEASE_BUCKET}/releases/default/latest.json")
        else None
    )
    _timed(platform, "a_release_runs", t0)

    # the consumer: a run per model event, or one for several that came together. Done when
    # its runs are finished, no event waits for it, and that stays so for 5 s. (Not "until it
    # scored the release latest.json names": two models of one dataset published within
    # milliseconds of each other can leave the second event with no consumer run at all, an
    # Airflow race between an event's queue row and the run the scheduler is creating.)
    def consumed() -> list[str] | None:
        runs = af.dag_runs(CONSUMER_ID)
        if not runs or any(r["state"] not in ("success", "failed") for r in runs):
            return None
        status, queued = af.request("GET", f"/api/v2/dags/{CONSUMER_ID}/assets/queuedEvents")
        if status == 200 and queued.get("total_entries"):
            return None
        return [r["dag_run_id"] for r in runs]

    def settled() -> list[str] | None:
        before = consumed()
        if not before:
            return None
        time.sleep(5)
        return before if consumed() == before else None

    if all(s == "success" for s in out["states"].values()):
        af.wait_until("the consumer's runs", settled, 300, interval=2)
        out["consumer_runs"] = af.dag_runs(CONSUMER_ID)
        out["consumer"] = {
            r["dag_run_id"]: {
                "run": r,
                "ti": af.task_instance(CONSUMER_ID, r["dag_run_id"], "perplexity"),
                "xcom": af.xcom(CONSUMER_ID, r["dag_run_id"], "perplexity"),
            }
            for r in out["consumer_runs"]
        }
    status, events = af.request("GET", f"/api/v2/assets/events?source_dag_id={DAG_ID}&limit=100")
    out["events"] = events.get("asset_events", []) if status == 200 else events
    # each model event and the consumer runs it created (none: the race above)
    out["model_events"] = {
        e["extra"]["run_id"]: [r["run_id"] for r in e.get("created_dagruns", [])]
        for e in out["events"]
        if isinstance(e, dict) and e["uri"].endswith("/latest/model")
    }
    platform["timings"]["e_model_events_without_consumer_run"] = sum(
        not created for created in out["model_events"].values()
    )
    # what each worker's folder holds now (worker-2 is restarted for the next scenarios)
    out["files"] = {w.name: _files(w.data_dir) for w in af.workers}
    _timed(platform, "a_e_total", t0)
    return out


@pytest.fixture(scope="module")
def both_workers(platform) -> None:
    """Scenarios b-d: worker-2 serves the default queue too (restarted once)."""
    took = platform["af"].serve(W2, ("default", CONSUMER_QUEUE))
    if took is not None:
        platform["timings"]["worker2_restart"] = took


@pytest.fixture(scope="module")
def two_datasets(platform, both_workers) -> dict[str, Any]:
    """Scenario b: two datasets' runs triggered together."""
    af: PlatformAirflow = platform["af"]
    t0 = time.monotonic()
    runs = {
        ds: af.trigger_dag(DAG_ID, {"dataset": ds, "stage_budget": CHEAP, "epsilon": 2.0})
        for ds in ("platform-a", "platform-b")
    }
    out: dict[str, Any] = {"runs": runs}
    out["states"] = af.finish(DAG_ID, [r["dag_run_id"] for r in runs.values()])
    out["spans"] = {ds: _spans(af, r["dag_run_id"]) for ds, r in runs.items()}
    _timed(platform, "b_two_datasets", t0)
    return out


@pytest.fixture(scope="module")
def race(platform, both_workers) -> dict[str, Any]:
    """Scenario c: two runs of one dataset racing for its last budget (6 = 4 + 2 left for one)."""
    af: PlatformAirflow = platform["af"]
    t0 = time.monotonic()
    conf = {
        "dataset": "platform-race",
        "lifetime_epsilon": 6.0,
        "epsilon": 4.0,
        "stage_budget": {"dpne": 1.0},
    }
    runs = [af.trigger_dag(DAG_ID, conf) for _ in range(2)]
    ids = [r["dag_run_id"] for r in runs]
    out: dict[str, Any] = {"runs": runs, "conf": conf}
    out["states"] = af.finish(DAG_ID, ids)
    out["tasks"] = {r: af.task_states(DAG_ID, r) for r in ids}
    out["notes"] = {r: af.dag_run(DAG_ID, r).get("note") for r in ids}
    out["logs"] = {r: af.task_log(DAG_ID, r, "privacy_precheck") for r in ids}
    _timed(platform, "c_race", t0)
    return out


@pytest.fixture(scope="module")
def killed_worker(platform, both_workers) -> dict[str, Any]:
    """Scenario d: kill -9 of the worker running the run's ``lm`` task (no noise drawn there)."""
    af: PlatformAirflow = platform["af"]
    t0 = time.monotonic()
    run = af.trigger_dag(DAG_ID, {"dataset": "platform-kill", "stage_budget": CHEAP, "epsilon": 2.0})
    rid = run["dag_run_id"]
    out: dict[str, Any] = {"run": run}
    ti = af.wait_for_task(
        DAG_ID,
        rid,
        "lm",
        lambda t: t["state"] == "running" and t.get("hostname"),
        timeout=RUN_TIMEOUT,
        interval=0.2,
    )
    time.sleep(0.5)  # into the task, not at its first instant
    out["victim"] = ti["hostname"]
    out["lm_state_at_kill"] = af.task_instance(DAG_ID, rid, "lm")["state"]
    killed_at = time.monotonic()
    out["killed_pids"] = af.kill_worker(af.worker_index(ti["hostname"]))
    out["state"] = af.finish(DAG_ID, [rid])[rid]
    out["kill_to_end"] = round(time.monotonic() - killed_at, 1)
    out["tries"] = af.task_tries(DAG_ID, rid, "lm")
    out["tasks"] = af.task_states(DAG_ID, rid)
    platform["timings"]["d_kill_to_run_end"] = out["kill_to_end"]
    # back to two workers (the harness restarts it with its queues)
    i = af.worker_index(out["victim"])
    af.start_worker(i)
    platform["timings"]["d_worker_restart"] = af.wait_worker_ready(i)
    _timed(platform, "d_killed_worker", t0)
    return out


# -- scenario a: a triggered default run and a scheduled run publish ---------------------------------


def test_a_triggered_default_run_and_scheduled_run_publish(platform, default_runs):
    from dpngram.config import DEFAULT_STAGE_BUDGET
    from dpngram.release.ledger import open_ledger

    af, fs = platform["af"], platform["fs"]
    states = default_runs["states"]
    assert set(states.values()) == {"success"}, (states, af.tails())
    triggered, sched = default_runs["triggered"], default_runs["scheduled"]
    assert triggered["run_type"] == "manual" and sched["run_type"] == "scheduled"
    # the scheduled run came with the unpause (catchup=False: the most recent interval only)
    assert default_runs["scheduled_after_unpause"] < 60
    assert len([r for r in af.dag_runs(DAG_ID) if r["run_type"] == "scheduled"]) == 1
    for dag_run_id in (triggered["dag_run_id"], sched["dag_run_id"]):
        tasks = default_runs["tasks"][dag_run_id]
        # the default budget split: every stage ran (triehh is folded into dpne.k1), and the model
        assert {t: ti["state"] for t, ti in tasks.items() if ti["state"] != "success"} == {}, tasks
        run_id = _run_id(dag_run_id)
        release = f"{RELEASE_BUCKET}/releases/default/runs/{run_id}"
        manifest = _s3_json(fs, f"{release}/MANIFEST.json")
        assert manifest["run_id"] == run_id
        for rel in (
            "report.json",
            "released/vocabulary.parquet",
            "released/kgrams.parquet",
            "model/model.binary",
        ):
            assert rel in manifest["files"], rel
        # the bytes on S3 are the manifest's
        model = fs.cat_file(f"{release}/model/model.binary")
        assert hashlib.sha256(model).hexdigest() == manifest["files"]["model/model.binary"]["sha256"]
        report = _s3_json(fs, f"{release}/report.json")
        assert report["parameters"]["stage_budget"] == dict(DEFAULT_STAGE_BUDGET)
        assert report["parameters"]["max_n"] == 2 and report["validation"]["success"] is True
        # the run store's prefix of the run is gone once it published
        assert not fs.exists(f"{PRIVATE_BUCKET}/runs/{run_id}")
    # latest.json names one of the two (the one published last)
    pointer = default_runs["pointer"]
    assert pointer["run_id"] in {_run_id(triggered["dag_run_id"]), _run_id(sched["dag_run_id"])}
    # the ledger (PostgreSQL): both runs closed, each charged at most its epsilon (4)
    with open_ledger(platform["ledger_url"]) as ledger:
        assert ledger.location.startswith("postgresql://dpngram_ledger:***@127.0.0.1:")
        for dag_run_id in (triggered["dag_run_id"], sched["dag_run_id"]):
            run_id = _run_id(dag_run_id)
            assert ledger.run(run_id)["state"] == "closed"
            assert 0 < ledger.spent("default", run_id).epsilon <= 4.0 * (1 + 1e-9)
        assert ledger.lifetime("default")[0] == DEFAULT_LIFETIME
    # the asset events: the dataset's three assets on S3, each run's
    uris = {e["uri"] for e in default_runs["events"]}
    latest = f"s3://{RELEASE_BUCKET}/releases/default/latest"
    assert {latest, f"{latest}/released", f"{latest}/model"} <= uris, uris


# -- scenario e: the consumer on the other worker scores the model -----------------------------------


def test_e_consumer_on_the_other_worker_scores_the_model_from_s3(platform, default_runs):
    af, fs = platform["af"], platform["fs"]
    assert set(default_runs["states"].values()) == {"success"}, af.tails()
    # every release task ran on worker-1 (worker-2 served only the consumers' queue)
    hosts = {
        ti["hostname"]
        for tasks in default_runs["tasks"].values()
        for ti in tasks.values()
        if ti["state"] == "success"
    }
    assert hosts == {W1}, hosts
    releases = {_run_id(r) for r in default_runs["states"]}
    consumer = default_runs["consumer"]
    assert consumer
    worker2 = af.workers[af.worker_index(W2)].data_dir
    for record in consumer.values():
        assert record["run"]["state"] == "success" and record["run"]["run_type"] == "asset_triggered", record
        assert record["ti"]["hostname"] == W2 and record["ti"]["queue"] == CONSUMER_QUEUE, record["ti"]
        value = record["xcom"]
        assert value["run_id"] in releases and value["dataset"] == "default"
        assert value["release"] == f"s3://{RELEASE_BUCKET}/releases/default/runs/{value['run_id']}"
        assert math.isfinite(value["perplexity"]) and value["perplexity"] > 1
        assert 0 <= value["oov_rate"] <= 1 and value["refused"] is None
        # the model it scored is worker-2's download, whose bytes match the release's manifest
        model = Path(value["model"])
        assert model.is_relative_to(worker2) and model.is_file(), model
        manifest = _s3_json(fs, f"{RELEASE_BUCKET}/releases/default/runs/{value['run_id']}/MANIFEST.json")
        assert (
            hashlib.sha256(model.read_bytes()).hexdigest()
            == manifest["files"]["model/model.binary"]["sha256"]
        )
    # a model event of each release; every consumer run scored the release whose event created
    # it, or one published after that (the DAG scores the dataset's newest release: Airflow may
    # fold two close events into one run)
    assert set(default_runs["model_events"]) == releases, default_runs["model_events"]

    def published_at(run_id: str) -> str:
        path = f"{RELEASE_BUCKET}/releases/default/runs/{run_id}/MANIFEST.json"
        return _s3_json(fs, path)["published_at"]

    for dag_run_id, record in consumer.items():
        triggered_by = {r for r, runs in default_runs["model_events"].items() if dag_run_id in runs}
        scored = record["xcom"]["run_id"]
        assert triggered_by, (dag_run_id, default_runs["model_events"])
        assert scored in triggered_by or all(published_at(scored) > published_at(r) for r in triggered_by), (
            dag_run_id,
            scored,
            triggered_by,
        )
    # worker-2 never held the releases otherwise: only the consumer's downloads and records
    files = default_runs["files"][W2]
    assert files and all(f.startswith("consumer/") for f in files), files
    assert not any(f.endswith(".duckdb") or "/staging/" in f for f in files)
    # worker-1 ran every release task, and removed each published run's private tables
    assert not any(
        f.startswith("warehouse/runs/") and f.endswith(".duckdb") for f in default_runs["files"][W1]
    )


# -- scenario b: two datasets at once --------------------------------------------------------------


def test_b_two_datasets_run_at_once_and_publish_into_their_own_latest(platform, two_datasets):
    af, fs = platform["af"], platform["fs"]
    assert set(two_datasets["states"].values()) == {"success"}, (two_datasets["states"], af.tails())
    for ds, run in two_datasets["runs"].items():
        run_id = _run_id(run["dag_run_id"])
        pointer = _s3_json(fs, f"{RELEASE_BUCKET}/releases/{ds}/latest.json")
        assert pointer["run_id"] == run_id and pointer["dataset"] == ds
        assert _published(fs, ds) == [run_id]
    # the run store carried state between the workers: a run's tasks ran on both (the tasks of
    # each run go to whichever worker is free: all on one for both runs has odds of ~2^-24)
    hosts = {ds: {host for *_, host in spans} for ds, spans in two_datasets["spans"].items()}
    platform["timings"]["b_hosts"] = {ds: sorted(h) for ds, h in hosts.items()}
    assert any(h == {W1, W2} for h in hosts.values()), hosts
    a, b = two_datasets["spans"].values()
    overlap = max((min(ea, eb) - max(sa, sb), ta, tb) for sa, ea, ta, _ in a for sb, eb, tb, _ in b)
    assert overlap[0] > 0, f"no task of one run overlapped a task of the other: {two_datasets['spans']}"
    platform["timings"]["b_overlap_s"] = round(overlap[0], 1)


# -- scenario c: two runs racing for one dataset's last budget ----------------------------------------


def test_c_two_runs_racing_for_the_last_budget_exactly_one_publishes(platform, race):
    from dpngram.release.ledger import open_ledger

    af, fs = platform["af"], platform["fs"]
    states = race["states"]
    assert sorted(states.values()) == ["failed", "success"], (states, af.tails())
    winner = next(r for r, s in states.items() if s == "success")
    loser = next(r for r, s in states.items() if s == "failed")
    tasks = race["tasks"][loser]
    assert tasks["privacy_precheck"]["state"] == "failed" and tasks["privacy_precheck"]["try_number"] == 1
    assert tasks["ingest"]["state"] in ("upstream_failed", None), tasks["ingest"]
    reason = (
        "privacy pre-check refused the run: dataset 'platform-race' has spent epsilon=4 of its lifetime 6"
    )
    assert race["notes"][loser].startswith(f"Refused at privacy_precheck: {reason}"), race["notes"][loser]
    assert reason in race["logs"][loser] and "Traceback" not in race["logs"][loser]
    assert _published(fs, "platform-race") == [_run_id(winner)]
    with open_ledger(platform["ledger_url"]) as ledger:
        entries = ledger.entries("platform-race")
        assert entries and {e["run_id"] for e in entries} == {_run_id(winner)}, entries
        assert ledger.run(_run_id(loser)) is None  # nothing reserved for the loser
        assert [r["run_id"] for r in ledger.runs_of("platform-race")] == [_run_id(winner)]
        assert ledger.spent("platform-race").epsilon <= 4.0 * (1 + 1e-9)
        assert ledger.committed("platform-race").epsilon <= 4.0 * (1 + 1e-9)


# -- scenario d: a worker killed mid-task ------------------------------------------------------------


def test_d_a_killed_workers_task_is_retried_on_the_other_without_a_double_charge(platform, killed_worker):
    from dpngram.release.ledger import open_ledger

    af, fs = platform["af"], platform["fs"]
    assert killed_worker["state"] == "success", af.tails()
    victim = killed_worker["victim"]
    assert killed_worker["lm_state_at_kill"] == "running" and len(killed_worker["killed_pids"]) >= 3
    tries = killed_worker["tries"]
    assert [t["try_number"] for t in tries] == [1, 2], tries
    assert tries[0]["hostname"] == victim and tries[0]["state"] == "failed"
    assert tries[1]["hostname"] not in (victim, "", None) and tries[1]["state"] == "success"
    run_id = _run_id(killed_worker["run"]["dag_run_id"])
    assert _published(fs, "platform-kill") == [run_id]  # exactly one release
    assert _s3_json(fs, f"{RELEASE_BUCKET}/releases/platform-kill/latest.json")["run_id"] == run_id
    with open_ledger(platform["ledger_url"]) as ledger:
        entries = [e for e in ledger.entries("platform-kill") if e["run_id"] == run_id]
        stages = [e["stage"] for e in entries]
        assert len(stages) == len(set(stages)) and stages, entries  # one entry per charged stage
        assert all(ledger.entry("platform-kill", run_id, s)["status"] == "final" for s in stages), entries
        assert sum(e["epsilon"] for e in entries) == pytest.approx(2.0, rel=1e-6)  # the run's epsilon
        assert ledger.spent("platform-kill", run_id).epsilon == pytest.approx(2.0, rel=1e-6)
        assert ledger.run(run_id)["state"] == "closed"


def test_every_process_stayed_up_and_nothing_was_written_to_the_input(platform):
    """Last: every process the deployment started is still running (a killed worker was started
    again), and the input folder (the read-only input volume) holds the same files as before."""
    platform["af"].check_alive()
    lake = platform["lake"]
    assert {p: (lake / p).stat().st_mtime_ns for p in _files(lake)} == platform["lake_before"]
