"""The production configuration (docker/compose.yaml + docker/airflow.env) outside Docker: the
Airflow environment of a compose service with its host names and volumes mapped to this machine,
and a throw-away PostgreSQL server from Debian's ``postgresql`` package.

Used by tests/test_airflow_postgres.py and benchmarks/airflow_overhead_bench.py, so both run what
the compose file runs: every variable of the service's ``env_file`` and ``environment`` is taken
from the files; only the ones naming a container path, a compose host name or a secret are
replaced, and :data:`LOCAL_OVERRIDES` lists them (a new variable in compose.yaml that needs a
local value fails :func:`compose_airflow_env` instead of being silently dropped).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"

#: Variables of compose.yaml whose values are container paths or interpolated secrets: replaced.
LOCAL_OVERRIDES = frozenset(
    {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",  # host and password changed, scheme/user/db kept
        "AIRFLOW__CORE__FERNET_KEY",
        "AIRFLOW__API_AUTH__JWT_SECRET",
        "AIRFLOW__API__SECRET_KEY",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",  # host and port changed, path kept
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE",
        "AIRFLOW_CONN_DPNGRAM_API",  # host and password changed, scheme and user kept
        "DPNGRAM_API_PASSWORD",
        "DPNGRAM_DEMO_DIR",
        "DPNGRAM_OUT",
        "DPNGRAM_CONSUMER_OUT",
        "DPNGRAM_SCHEDULE",
        "DPNGRAM_PARAMS",
    }
)


def read_env_file(path: Path) -> dict[str, str]:
    """A compose ``env_file``: ``KEY=VALUE`` lines, ``#`` comments; no quoting or interpolation."""
    env = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", key) or "${" in value or value[:1] in "'\"":
            raise ValueError(f"{path}:{number}: not a plain KEY=VALUE line: {raw!r}")
        env[key] = value
    return env


def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text(encoding="utf-8"))


def api_server_health_paths(spec: dict | None = None) -> list[str]:
    """The paths compose's api-server healthcheck requests, in order (``/api/v2/monitor/health``,
    ``/execution/health``). The local launchers request them once the api-server answers, as the
    healthcheck does before compose starts the scheduler: the execution API builds its versioned
    routes on its first request, and that must not fall on the first task (issue 28, item 6)."""
    spec = compose() if spec is None else spec
    command = " ".join(spec["services"]["airflow-api-server"]["healthcheck"]["test"])
    return re.findall(r"'(/[^']+)'", command)


def note_connection_user(spec: dict | None = None) -> str:
    """The user of compose's connection ``dpngram_api`` (the scheduler's ``AIRFLOW_CONN_DPNGRAM_API``:
    ``http://USER:${DPNGRAM_API_PASSWORD}@airflow-api-server:8080``), whose password airflow-init
    writes into the simple auth manager's passwords file."""
    conn = service_env("airflow-scheduler", spec)["AIRFLOW_CONN_DPNGRAM_API"]
    found = re.fullmatch(r"http://([^:]+):\$\{DPNGRAM_API_PASSWORD:\?[^}]*\}@airflow-api-server:8080", conn)
    assert found, conn
    return found.group(1)


def service_env(service: str, spec: dict | None = None) -> dict[str, str]:
    """The environment compose gives ``service``: its env_file(s), then ``environment``
    (which wins), values as written (``${...}`` not interpolated)."""
    svc = (spec or compose())["services"][service]
    env: dict[str, str] = {}
    env_files = svc.get("env_file") or []
    for name in [env_files] if isinstance(env_files, str) else env_files:
        env.update(read_env_file(DOCKER / (name if isinstance(name, str) else name["path"])))
    env.update({k: str(v) for k, v in (svc.get("environment") or {}).items()})
    return env


def compose_airflow_env(
    *,
    db_url: str,
    api_url: str,
    secrets: dict[str, str],
    paths: dict[str, Path],
    users: str,
    passwords_file: Path,
) -> dict[str, str]:
    """The union of the Airflow services' compose environment, for processes on this machine:
    ``db_url`` (``postgresql+psycopg2://USER:PASSWORD@127.0.0.1:PORT/DB``) replaces the
    ``@postgres:5432`` connection (same scheme, user and database), ``api_url`` the api-server's
    host, ``paths`` (keys ``state``, ``out``, ``consumer_out``) the volumes."""
    spec = compose()
    merged: dict[str, str] = {}
    for name in spec["services"]:
        if name.startswith("airflow-"):
            merged.update(service_env(name, spec))
    conn = merged["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    scheme, user, database = re.fullmatch(r"([^:]+)://([^:]+):.*@postgres:5432/(\w+)", conn).groups()
    wanted = re.fullmatch(r"([^:]+)://([^:]+):.*@127\.0\.0\.1:\d+/(\w+)", db_url).groups()
    assert wanted == (scheme, user, database), (wanted, (scheme, user, database))
    execution = merged["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]
    assert execution.startswith("http://airflow-api-server:8080/"), execution
    note_user = note_connection_user(spec)
    local = {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
        "AIRFLOW__CORE__FERNET_KEY": secrets["fernet_key"],
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets["jwt_secret"],
        "AIRFLOW__API__SECRET_KEY": secrets["api_secret_key"],
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": api_url
        + execution.removeprefix("http://airflow-api-server:8080"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": users,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file),
        # the user compose's airflow-init gives this password, as the connection names it
        "AIRFLOW_CONN_DPNGRAM_API": f"http://{note_user}:{secrets['api_password']}@{api_url.removeprefix('http://')}",
        "DPNGRAM_API_PASSWORD": secrets["api_password"],
        "DPNGRAM_DEMO_DIR": str(paths["state"]),
        "DPNGRAM_OUT": str(paths["out"]),
        "DPNGRAM_CONSUMER_OUT": str(paths["consumer_out"]),
        "DPNGRAM_SCHEDULE": "none",  # no scheduled refresh during a test
        "DPNGRAM_PARAMS": "",
    }
    unmapped = {
        k: v for k, v in merged.items() if k not in LOCAL_OVERRIDES and ("${" in v or v.startswith("/"))
    }
    assert not unmapped, f"compose variables with container paths or secrets, not mapped here: {unmapped}"
    assert set(local) == LOCAL_OVERRIDES
    merged.update(local)
    return merged


# -- PostgreSQL ---------------------------------------------------------------------------------


def postgres_bindir() -> Path | None:
    """Debian's PostgreSQL server binaries (package ``postgresql``: /usr/lib/postgresql/N/bin),
    ``DPNGRAM_PG_BINDIR``, or ``initdb`` on PATH."""
    if os.environ.get("DPNGRAM_PG_BINDIR"):
        return Path(os.environ["DPNGRAM_PG_BINDIR"])
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresServer:
    """A PostgreSQL cluster in a temporary directory on 127.0.0.1:PORT (password auth over TCP).
    PostgreSQL refuses to run as root: as root the server runs as the ``postgres`` system user
    that Debian's package creates (``runuser``), in a directory that user owns."""

    def __init__(self, user: str = "airflow", database: str = "airflow", password: str = "pg-test-password"):
        bindir = postgres_bindir()
        if bindir is None:
            raise FileNotFoundError("no PostgreSQL server binaries (Debian package 'postgresql')")
        self.bindir, self.user, self.database, self.password = bindir, user, database, password
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="dpngram-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self.run_as: list[str] = []
        if os.geteuid() == 0:
            import pwd

            pw = pwd.getpwnam("postgres")  # KeyError: no 'postgres' user (Debian's package makes it)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self.run_as = ["runuser", "-u", "postgres", "--"]
        self.started = False

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://{self.user}:{self.password}@127.0.0.1:{self.port}/{self.database}"

    def _run(self, *args: str, env: dict[str, str] | None = None) -> None:
        proc = subprocess.run(
            [*self.run_as, *args], capture_output=True, text=True, env=env, cwd=self.dir, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")

    def start(self) -> None:
        pwfile = self.dir / "pw"
        pwfile.write_text(self.password + "\n")
        if self.run_as:
            os.chown(pwfile, os.stat(self.dir).st_uid, -1)
        self._run(
            str(self.bindir / "initdb"),
            "-D", str(self.data), "-U", self.user, "--pwfile", str(pwfile),
            "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-sync",
        )  # fmt: skip
        pwfile.unlink()
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c max_connections=200 -c fsync=off"
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            options,
            "-w",
            "start",
        )
        self.started = True
        self._run(
            str(self.bindir / "createdb"),
            "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, self.database,
            env={**os.environ, "PGPASSWORD": self.password},
        )  # fmt: skip

    def stop(self) -> None:
        if self.started:
            with contextlib.suppress(RuntimeError):
                self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
            self.started = False
        for _ in range(3):
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(self.dir)
            if not self.dir.exists():
                return
            time.sleep(1)

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""
