"""A real multi-worker Airflow 3 deployment on this machine, without Docker.

* :class:`RedisServer`: a throw-away ``redis-server`` (Debian package ``redis-server``) on a free
  loopback port, no persistence, in a temporary directory: the Celery broker.
* :class:`S3Server`: moto's standalone S3 server (``python -m moto.server``) on a free loopback
  port, in its own process: the only storage the workers share. Usable alone from a fixture
  (about 2 s to start): see :func:`s3_server`.
* :class:`CeleryAirflow`: api-server, scheduler, dag-processor and N ``airflow celery worker``
  processes (CeleryExecutor, metadata and Celery results in a :class:`PostgresServer`), each
  worker with its own data folder (``DPNGRAM_WORKER_DIR``), its own Airflow hostname (the task
  instance's ``hostname``, through ``[core] hostname_callable``) and its own queue, each process
  in its own session so it can be stopped, or killed with everything it forked, by its id.

Usage (a test; ``dags`` is a DAG folder, the test process needs celery, redis, moto[server], s3fs)::

    pg, redis, s3 = PostgresServer(), RedisServer(), S3Server()
    pg.start(); redis.start(); s3.start(); s3.make_bucket("dpngram-e2e")
    af = CeleryAirflow(tmp_path, pg, redis, dags, env={**s3.env(), "MY_BUCKET": "dpngram-e2e"})
    try:
        af.start(); af.wait_ready(); af.unpause("my_dag")
        run = af.trigger_dag("my_dag", {"x": 1})
        assert af.wait_for_run("my_dag", run["dag_run_id"]) == "success", af.tails()
        hosts = {t: ti["hostname"] for t, ti in af.task_states("my_dag", run["dag_run_id"]).items()}
    finally:
        af.stop(); s3.stop(); redis.stop(); pg.stop()

The REST helpers (``login``, ``unpause``, ``wait_for_run``, ``task_states``...) and the process
handling come from the LocalExecutor launcher :class:`test_airflow_standalone.Airflow`; the
PostgreSQL cluster from :mod:`airflow_compose`. Nothing here imports dpngram's package code
itself (importing ``test_airflow_standalone`` does, transitively, as every test here does).

Settings chosen here (see :meth:`CeleryAirflow.settings`), measured on 2 cores:

* a task whose worker died is failed by the scheduler ``task_instance_heartbeat_timeout``
  (here 20 s) after its last heartbeat, then retried (the task's ``retries``) on a live worker;
* ``[celery] worker_prefetch_multiplier = 1`` with ``task_acks_late`` (defaults): a worker
  holds at most ``concurrency`` tasks, so a killed worker strands only the tasks it runs;
* the broker's ``visibility_timeout`` is long (6 h): the unacknowledged message of a killed
  worker's task is never redelivered during a test (the retry comes from the scheduler).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from airflow_compose import PostgresServer, free_port
from test_airflow_standalone import AIRFLOW, PASSWORD, USERNAME, Airflow, _die_with_parent

#: The module written onto the workers' PYTHONPATH; ``[core] hostname_callable`` names its function.
HOSTNAME_MODULE = "platform_worker_hostname"
#: The variable that module's ``hostname()`` returns (falls back to the machine's FQDN).
HOSTNAME_ENV = "DPNGRAM_WORKER_HOSTNAME"
#: The variable naming a worker's own data folder.
WORKER_DIR_ENV = "DPNGRAM_WORKER_DIR"


# -- processes ----------------------------------------------------------------------------------


def session_pids(sid: int) -> list[int]:
    """Every live process whose session id is ``sid`` (from /proc), ``sid`` itself included.

    A process started with ``start_new_session=True`` leads a session (sid == its pid) that
    holds everything it forks, even children that moved to a process group of their own: the
    Airflow task supervisor puts each task process in its own group (``setpgid``), so a
    ``killpg`` of a Celery worker's group would leave its running task processes alive."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # state ppid pgrp session ...
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return sorted(pids)


def kill_session(sid: int, sig: int = signal.SIGKILL, timeout: float = 10.0) -> list[int]:
    """Send ``sig`` to every process of session ``sid`` (its group first, then each member, until
    none is left or ``timeout`` passes); return the pids signalled."""
    signalled: set[int] = set()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, sig)
    deadline = time.monotonic() + timeout
    while True:
        left = session_pids(sid)
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        signalled.update(left)
        if not left or sig != signal.SIGKILL or time.monotonic() > deadline:
            return sorted(signalled)
        time.sleep(0.05)


def _tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file ('' when it cannot be read)."""
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    return ""


def _start(cmd: list[str], env: Mapping[str, str], log: Path, cwd: Path) -> subprocess.Popen:
    """Start ``cmd`` in a new session (its own process group), output to ``log``; the child gets
    SIGTERM when the starting process dies (``PR_SET_PDEATHSIG``, as the standalone launcher)."""
    with log.open("w", encoding="utf-8") as fh:
        return subprocess.Popen(
            cmd,
            env=dict(env),
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=cwd,
            preexec_fn=_die_with_parent,
        )


def _stop(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM ``proc``'s process group, wait up to ``grace`` s, then SIGKILL its whole session."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    kill_session(proc.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


# -- Redis --------------------------------------------------------------------------------------


def redis_server_binary() -> str | None:
    """``redis-server`` on PATH or Debian's /usr/bin/redis-server (package ``redis-server``), or None."""
    found = shutil.which("redis-server")
    if found:
        return found
    return "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None


class _LocalServer:
    """A server process of the harness: ``proc`` started by ``start()``, its ``log`` and ``dir``
    (removed on stop); a context manager that starts and stops it."""

    dir: Path
    log: Path
    proc: subprocess.Popen | None

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        """Kill the server (its session) and remove its directory."""
        if self.proc is not None:
            _stop(self.proc, grace=5)
            self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def tail(self, lines: int = 30) -> str:
        """The end of the server's log."""
        return _tail(self.log, lines)

    def __enter__(self) -> Self:
        """Start the server."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop the server."""
        self.stop()


class RedisServer(_LocalServer):
    """A throw-away redis-server on 127.0.0.1 and a free port: no RDB/AOF files, its directory
    and log in a temporary folder removed by :meth:`stop`. Use as a context manager or
    ``start()``/``stop()``; ``url`` is the Celery broker URL (database 0)."""

    def __init__(self, port: int | None = None, binary: str | None = None) -> None:
        """Choose the port (free one by default) and the binary; start nothing yet."""
        self.binary = binary or redis_server_binary()
        if self.binary is None:
            raise FileNotFoundError("no redis-server: apt-get install -y redis-server (Debian package)")
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="dpngram-redis-"))
        self.log = self.dir / "redis.log"
        self.proc: subprocess.Popen | None = None
        self.startup_seconds: float | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def ping(self) -> bool:
        """True when the server answers PING with PONG."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def start(self, timeout: float = 20.0) -> RedisServer:
        """Start redis-server and wait until it answers PING; returns self."""
        t0 = time.monotonic()
        cmd = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.dir),
            "--logfile", str(self.log),
            "--daemonize", "no",
            "--protected-mode", "yes",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        while not self.ping():
            if self.proc.poll() is not None or time.monotonic() - t0 > timeout:
                detail = self.tail()
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}:\n{detail}")
            time.sleep(0.05)
        self.startup_seconds = round(time.monotonic() - t0, 2)
        return self


# -- S3 (moto) ----------------------------------------------------------------------------------


class S3Server(_LocalServer):
    """moto's standalone server (``python -m moto.server -H 127.0.0.1 -p PORT``) in its own process
    and session: any AWS client pointed at :attr:`endpoint` with :meth:`env` talks to it, across
    processes. Needs ``moto[s3,server]`` (flask, flask-cors) in ``python``'s environment.

    ``region`` is the AWS region the variables name; credentials are moto's dummies."""

    ACCESS_KEY = "testing"
    SECRET_KEY = "testing"

    def __init__(self, port: int | None = None, python: str | None = None, region: str = "us-east-1") -> None:
        """Choose the port (free one by default) and the interpreter; start nothing yet."""
        self.port = port or free_port()
        self.python = python or sys.executable
        self.region = region
        self.dir = Path(tempfile.mkdtemp(prefix="dpngram-s3-"))
        self.log = self.dir / "moto.log"
        self.proc: subprocess.Popen | None = None
        self.startup_seconds: float | None = None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The AWS variables that point boto3, s3fs/fsspec (through botocore) and the AWS CLI at this
        server: ``AWS_ENDPOINT_URL`` is honoured by botocore >= 1.31, so by s3fs without
        ``client_kwargs``; ``FSSPEC_S3_ENDPOINT_URL`` is set too for fsspec setups that pass their
        own ``endpoint_url`` config."""
        return {
            "AWS_ACCESS_KEY_ID": self.ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": self.SECRET_KEY,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "FSSPEC_S3_ENDPOINT_URL": self.endpoint,
            # no ~/.aws files or instance metadata lookups in tests
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def _http(self, method: str, path: str, timeout: float = 5.0) -> int:
        """One unsigned request to the server; its HTTP status."""
        req = urllib.request.Request(self.endpoint + path, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                resp.read()
                return resp.status
        except urllib.error.HTTPError as err:
            return err.code

    def ready(self) -> bool:
        """True when moto answers its management API (``/moto-api/``)."""
        try:
            return self._http("GET", "/moto-api/", timeout=1) == 200
        except OSError:
            return False

    def start(self, timeout: float = 60.0) -> S3Server:
        """Start the server and wait until it answers; returns self (``startup_seconds`` set)."""
        t0 = time.monotonic()
        cmd = [self.python, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        self.proc = _start(cmd, os.environ, self.log, self.dir)
        while not self.ready():
            if self.proc.poll() is not None or time.monotonic() - t0 > timeout:
                detail = self.tail()
                self.stop()
                raise RuntimeError(f"moto server did not start on port {self.port}:\n{detail}")
            time.sleep(0.05)
        self.startup_seconds = round(time.monotonic() - t0, 2)
        return self

    def make_bucket(self, name: str) -> str:
        """Create bucket ``name`` (3-63 characters: moto refuses shorter names with
        InvalidBucketName) with an unsigned PUT; returns ``s3://name``."""
        status = self._http("PUT", f"/{urllib.parse.quote(name)}")
        if status != 200:
            raise RuntimeError(f"creating bucket {name!r} on {self.endpoint}: HTTP {status}")
        return f"s3://{name}"

    def reset(self) -> None:
        """Forget every bucket and object (moto's reset API): a clean server between tests."""
        status = self._http("POST", "/moto-api/reset")
        if status != 200:
            raise RuntimeError(f"moto reset: HTTP {status}")

    def filesystem(self):
        """An ``s3fs.S3FileSystem`` on this server (no instance cache), for checks from the test."""
        import s3fs

        return s3fs.S3FileSystem(
            key=self.ACCESS_KEY,
            secret=self.SECRET_KEY,
            endpoint_url=self.endpoint,
            client_kwargs={"region_name": self.region},
            skip_instance_cache=True,
        )


@contextlib.contextmanager
def s3_server(bucket: str | None = None, **kwargs: Any) -> Iterator[S3Server]:
    """A started :class:`S3Server` for a fixture, its variables set in ``os.environ`` meanwhile
    (restored after), ``bucket`` created when given::

        @pytest.fixture(scope="module")
        def s3():
            with s3_server("dpngram-test") as server:
                yield server
    """
    server = S3Server(**kwargs).start()
    saved = {k: os.environ.get(k) for k in server.env()}
    try:
        os.environ.update(server.env())
        if bucket:
            server.make_bucket(bucket)
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


# -- Airflow with Celery workers ----------------------------------------------------------------


@dataclasses.dataclass
class Worker:
    """One ``airflow celery worker``: ``name`` is its Celery node name (``celery@NAME``), the
    hostname Airflow records on its task instances and a queue only it consumes; ``data_dir`` its
    own data folder (``DPNGRAM_WORKER_DIR``); ``env`` its overrides of the common environment (a
    value None removes the variable); ``queues`` default to ``default`` and ``name``."""

    name: str
    data_dir: Path
    env: dict[str, str | None] = dataclasses.field(default_factory=dict)
    queues: tuple[str, ...] = ()
    proc: subprocess.Popen | None = None
    killed_at: float | None = None
    killed_pids: list[int] = dataclasses.field(default_factory=list)

    @property
    def key(self) -> str:
        """The name of its process (and log file) in the launcher."""
        return f"worker-{self.name}" if not self.name.startswith("worker") else self.name


class CeleryAirflow(Airflow):
    """api-server, scheduler, dag-processor and Celery workers of one Airflow 3 deployment on
    PostgreSQL (metadata and Celery results) and Redis (broker), each process in its own session.

    ``workers``: names (or :class:`Worker` objects); each gets ``base/workers/NAME`` as data folder,
    ``NAME`` as Airflow hostname and Celery node name, and queues ``default`` + ``NAME`` (pin a task
    to a worker with ``@task(queue=NAME)``). ``env`` and ``worker_env`` add to or override the common
    environment (all processes) and every worker's; ``concurrency`` is each worker's number of task
    slots. ``heartbeat_timeout`` is ``[scheduler] task_instance_heartbeat_timeout``: how long after a
    worker's death its running tasks are failed (and retried, if the task has retries).

    ``start()`` returns at once; ``wait_ready()`` waits for the api-server (and logs in), the
    scheduler's and dag-processor's health, and every worker's ``ready.``. Timings of each step go
    to ``timings`` (seconds since ``start()``)."""

    def __init__(
        self,
        base: Path,
        pg: PostgresServer,
        redis: RedisServer,
        dags: Path,
        *,
        workers: Sequence[str | Worker] = ("worker-1", "worker-2"),
        concurrency: int = 1,
        heartbeat_timeout: int = 20,
        env: Mapping[str, str] | None = None,
        worker_env: Mapping[str, str | None] | None = None,
        local_settings: Path | None = None,
    ) -> None:
        """Lay out ``base`` (AIRFLOW_HOME, process logs, worker folders) and build the environment;
        start nothing (``pg`` and ``redis`` must be started before :meth:`start`)."""
        # Airflow.__init__ is not called: it builds dpngram's demo environment; the attributes its
        # methods use (base, port, url, paths, logs_dir, env, procs, token) are set here.
        self.base = Path(base)
        self.pg, self.redis = pg, redis
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.paths = {"airflow_home": self.base / "home", "dags": Path(dags)}
        self.logs_dir = self.base / "process-logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.local_settings = local_settings
        self.procs: dict[str, subprocess.Popen] = {}
        self.killed: dict[str, subprocess.Popen] = {}
        self.worker_logs: dict[str, Path] = {}  # worker key -> its current log file
        self.token: str | None = None
        self.timings: dict[str, float] = {}
        self._t0: float | None = None
        passwords = self.base / "passwords.json"
        passwords.write_text(json.dumps({USERNAME: PASSWORD}))
        pythonpath = self.base / "pythonpath"
        pythonpath.mkdir(exist_ok=True)
        (pythonpath / f"{HOSTNAME_MODULE}.py").write_text(
            '"""[core] hostname_callable of the test workers: the hostname Airflow records."""\n'
            "import os\nimport socket\n\n\n"
            "def hostname() -> str:\n"
            f'    """${HOSTNAME_ENV}, else the machine\'s FQDN."""\n'
            f'    return os.environ.get("{HOSTNAME_ENV}") or socket.getfqdn()\n',
            encoding="utf-8",
        )
        self.pythonpath = pythonpath
        self.concurrency = concurrency
        self.heartbeat_timeout = heartbeat_timeout
        self.env = self.settings()
        self.env.update(env or {})
        self.workers: list[Worker] = []
        for spec in workers:
            if not isinstance(spec, Worker):
                spec = Worker(name=spec, data_dir=self.base / "workers" / spec)
            worker = spec
            worker.data_dir.mkdir(parents=True, exist_ok=True)
            if not worker.queues:
                worker.queues = (self.env["AIRFLOW__OPERATORS__DEFAULT_QUEUE"], worker.name)
            worker.env = {**dict(worker_env or {}), **worker.env}
            self.workers.append(worker)
        names = [w.name for w in self.workers]
        assert len(set(names)) == len(names), f"worker names must differ: {names}"

    # -- configuration ---------------------------------------------------------------------------
    def settings(self) -> dict[str, str]:
        """The environment every process gets: this process's environment without its AIRFLOW*
        variables, then the deployment's settings (CeleryExecutor on Redis, results and metadata
        in PostgreSQL, the simple auth manager, fast DAG parsing and heartbeat-timeout detection)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        pg = self.pg
        env.update(
            {
                "AIRFLOW_HOME": str(self.paths["airflow_home"]),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.paths["dags"]),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
                "AIRFLOW__CORE__PARALLELISM": "16",
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
                "AIRFLOW__CORE__FERNET_KEY": "ZHBuZ3JhbS1wbGF0Zm9ybS10ZXN0LWZlcm5ldC0zMmI=",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": pg.url,
                # every component must share the secret, or task tokens are rejected
                "AIRFLOW__API_AUTH__JWT_SECRET": "dpngram-platform-test-secret-" + "x" * 32,
                "AIRFLOW__API__SECRET_KEY": "dpngram-platform-test-key",
                "AIRFLOW__API__BASE_URL": self.url,
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__WORKERS": "1",
                # the workers' task supervisors call this; default {base_url}/execution/
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USERNAME}:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.base / "passwords.json"),
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
                "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
                "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.paths["airflow_home"] / "logs"),
                "AIRFLOW__OPERATORS__DEFAULT_QUEUE": "default",
                # Celery: broker Redis, results in the metadata database (psycopg2)
                "AIRFLOW__CELERY__BROKER_URL": self.redis.url,
                # the driver named: SQLAlchemy 2.1 maps a bare postgresql:// to psycopg (3), not installed
                "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + pg.url,
                "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(self.concurrency),
                "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "1",
                "AIRFLOW__CELERY__TASK_ACKS_LATE": "True",
                "AIRFLOW__CELERY__POOL": "prefork",
                # an unacknowledged task of a killed worker is not redelivered within a test
                "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": "21600",
                # a dead worker's running tasks fail heartbeat_timeout s after their last heartbeat
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(self.heartbeat_timeout),
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
                "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "2",
            }
        )
        return env

    def worker_environment(self, worker: Worker) -> dict[str, str]:
        """The environment of one worker: the common one, its hostname callable, data folder and
        PYTHONPATH, then its own overrides."""
        env = dict(self.env)
        env.update(
            {
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": f"{HOSTNAME_MODULE}.hostname",
                HOSTNAME_ENV: worker.name,
                WORKER_DIR_ENV: str(worker.data_dir),
                "PYTHONPATH": os.pathsep.join(
                    p for p in (str(self.pythonpath), self.env.get("PYTHONPATH", "")) if p
                ),
            }
        )
        for key, value in worker.env.items():  # None unsets a variable for this worker
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    # -- processes -------------------------------------------------------------------------------
    def _mark(self, what: str) -> float:
        """Record ``what`` in :attr:`timings` (seconds since :meth:`start`)."""
        self.timings[what] = round(time.monotonic() - (self._t0 or time.monotonic()), 2)
        return self.timings[what]

    def setup(self) -> None:
        """``airflow db migrate`` into the PostgreSQL database (log: process-logs/setup.log)."""
        home = self.paths["airflow_home"]
        (home / "logs").mkdir(parents=True, exist_ok=True)
        if self.local_settings is not None:
            (home / "config").mkdir(exist_ok=True)
            shutil.copy(self.local_settings, home / "config" / "airflow_local_settings.py")
        log = self.logs_dir / "setup.log"
        with log.open("w", encoding="utf-8") as fh:
            proc = subprocess.run(
                [AIRFLOW, "db", "migrate"], env=self.env, stdout=fh, stderr=subprocess.STDOUT, cwd=self.base
            )
        if proc.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{_tail(log, 60)}")

    def start(self) -> None:
        """Migrate the database, then start api-server, scheduler, dag-processor and every worker
        (without waiting for them: see :meth:`wait_ready`)."""
        self._t0 = time.monotonic()
        self.setup()
        self._mark("migrate")
        commands = {
            "api-server": [AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", str(self.port)]
            + ["--workers", "1"],
            "scheduler": [AIRFLOW, "scheduler"],
            "dag-processor": [AIRFLOW, "dag-processor"],
        }
        for name, cmd in commands.items():
            self.procs[name] = _start(cmd, self.env, self.logs_dir / f"{name}.log", self.base)
        for i in range(len(self.workers)):
            self.start_worker(i)

    def worker_command(self, worker: Worker) -> list[str]:
        """``airflow celery worker`` with the worker's node name, queues and concurrency; its log
        server is skipped (every worker would bind the same ``worker_log_server_port``; the
        api-server reads the task logs from the shared log folder)."""
        return [
            AIRFLOW, "celery", "worker",
            "--celery-hostname", worker.name,
            "--queues", ",".join(worker.queues),
            "--concurrency", str(self.concurrency),
            "--skip-serve-logs",
            "--without-mingle",
            "--without-gossip",
        ]  # fmt: skip

    def start_worker(self, i: int) -> None:
        """Start worker ``i`` (again, after :meth:`kill_worker`: a new log file ``NAME.N.log``)."""
        worker = self.workers[i]
        if worker.key in self.procs:
            raise RuntimeError(f"{worker.key} is running")
        log = self.logs_dir / f"{worker.key}.log"
        n = 1
        while log.exists():
            n += 1
            log = self.logs_dir / f"{worker.key}.{n}.log"
        worker.proc = _start(self.worker_command(worker), self.worker_environment(worker), log, self.base)
        worker.killed_at = None
        self.procs[worker.key] = worker.proc
        self.worker_logs[worker.key] = log

    def worker_ready(self, i: int) -> bool:
        """True when worker ``i`` has logged Celery's ``celery@NAME ready.``."""
        worker = self.workers[i]
        log = self.worker_logs[worker.key]
        with contextlib.suppress(OSError):
            return f"celery@{worker.name} ready." in log.read_text(encoding="utf-8", errors="replace")
        return False

    def health(self) -> dict[str, Any]:
        """``/api/v2/monitor/health`` (metadatabase, scheduler, dag_processor, triggerer)."""
        status, body = self.request("GET", "/api/v2/monitor/health", token=False)
        return body if status == 200 and isinstance(body, dict) else {}

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Wait for the api-server (then log in), a healthy scheduler and dag-processor, and every
        running worker's ``ready.``; each moment goes to :attr:`timings`."""
        pending = {"api_server", "scheduler", "dag_processor"}
        pending |= {w.key for w in self.workers if w.key in self.procs}
        deadline = time.monotonic() + timeout

        def progress() -> bool:
            """Record whatever became ready since the last poll; True when nothing is pending."""
            try:
                health = self.health()
            except (urllib.error.URLError, ConnectionError, OSError):
                health = {}
            if health and "api_server" in pending:
                pending.discard("api_server")
                self._mark("api_server")
            for part in ("scheduler", "dag_processor"):
                if part in pending and (health.get(part) or {}).get("status") == "healthy":
                    pending.discard(part)
                    self._mark(part)
            for i, worker in enumerate(self.workers):
                if worker.key in pending and self.worker_ready(i):
                    pending.discard(worker.key)
                    self._mark(worker.key)
            return not pending

        self.wait_until(
            "the api-server, scheduler, dag-processor and workers",
            progress,
            max(1.0, deadline - time.monotonic()),
            0.5,
        )
        self.login()  # warms /execution/health (the execution API's first request) and gets a token
        self._mark("logged_in")

    def wait_worker_ready(self, i: int, timeout: float = 120.0) -> float:
        """Wait until worker ``i`` logs ``ready.``; the seconds it took from now."""
        t0 = time.monotonic()
        self.wait_until(f"{self.workers[i].key} ready", lambda: self.worker_ready(i), timeout, 0.25)
        return round(time.monotonic() - t0, 2)

    def worker_pids(self, i: int) -> list[int]:
        """Every live process of worker ``i``: Celery's main process, its pool processes, their
        task supervisors and task processes (its session)."""
        proc = self.workers[i].proc
        return session_pids(proc.pid) if proc is not None else []

    def kill_worker(self, i: int) -> list[int]:
        """``kill -9`` of worker ``i`` and everything it forked (its whole session: process group
        and the task processes the supervisor moved to groups of their own), as if its machine
        died; returns the pids killed. The worker leaves :attr:`procs` (``check_alive`` ignores
        it) and :meth:`start_worker` may start it again."""
        worker = self.workers[i]
        assert worker.proc is not None and worker.key in self.procs, f"{worker.key} is not running"
        worker.killed_at = time.monotonic()
        worker.killed_pids = kill_session(worker.proc.pid)
        worker.proc.wait(timeout=10)
        self.killed[f"{worker.key}@{worker.killed_at:.0f}"] = self.procs.pop(worker.key)
        return worker.killed_pids

    def stop(self) -> None:
        """SIGTERM every process group (workers first: a warm shutdown waits for running tasks, so
        their grace is short), SIGKILL what is left of each session, reap killed workers."""
        for worker in self.workers:
            proc = self.procs.pop(worker.key, None)
            if proc is not None:
                _stop(proc, grace=5)
        for name in list(self.procs):
            _stop(self.procs[name], grace=15)
        for proc in self.killed.values():
            kill_session(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self.killed.update({f"stopped-{k}": p for k, p in self.procs.items()})
        self.procs.clear()

    def tails(self, lines: int = 40) -> str:
        """The last lines of every process log, PostgreSQL's and Redis's (for failure messages)."""
        return (
            super().tails(lines)
            + f"\n----- postgres.log\n{self.pg.tail()}"
            + f"\n----- redis.log\n{self.redis.tail()}"
        )

    # -- REST API --------------------------------------------------------------------------------
    def trigger_dag(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Trigger ``dag_id`` now (``logical_date`` null) with ``conf``; the new DAG run."""
        status, body = self.request(
            "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": dict(conf or {})}
        )
        assert status == 200, (status, body)
        return body

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        """One task instance (``state``, ``hostname``, ``try_number``, ``start_date``...)."""
        status, body = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")
        assert status == 200, (status, body)
        return body

    def task_tries(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        """Every try of a task instance (finished tries from the history, then the current one),
        each with its ``try_number``, ``state`` and ``hostname``."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/tries"
        status, body = self.request("GET", path)
        assert status == 200, (status, body)
        return body["task_instances"]

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        """A task's XCom value (deserialized), or None when it has none."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        status, body = self.request("GET", path + "?deserialize=true")
        return body.get("value") if status == 200 else None

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """The log of one try as the api-server serves it (its ``event`` lines joined): read from
        the shared log folder, as the workers skip their log servers."""
        status, body = self.request(
            "GET",
            f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/{task_id}"
            f"/logs/{try_number}?full_content=true",
        )
        assert status == 200, (status, body)
        content = body.get("content", []) if isinstance(body, dict) else []
        return "\n".join(str(c.get("event", c)) if isinstance(c, dict) else str(c) for c in content)

    def wait_for_task(
        self, dag_id: str, run_id: str, task_id: str, condition, timeout: float = 120.0, interval: float = 0.5
    ) -> dict[str, Any]:
        """Poll a task instance until ``condition(ti)`` is true; the task instance then."""

        def check() -> dict[str, Any] | None:
            """The task instance if ``condition`` holds for it now, else None."""
            ti = self.task_instance(dag_id, run_id, task_id)
            return ti if condition(ti) else None

        return self.wait_until(f"{dag_id}/{run_id}/{task_id}", check, timeout, interval)

    def worker_index(self, hostname: str) -> int:
        """The index of the worker whose Airflow hostname is ``hostname``."""
        for i, worker in enumerate(self.workers):
            if worker.name == hostname:
                return i
        raise KeyError(hostname)
