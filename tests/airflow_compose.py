"""The production configuration (docker/compose.yaml + docker/airflow.env) outside Docker: the
environment compose gives each Airflow service, with compose's variables (its ``--env-file``)
filled in, its service addresses and container paths mapped to this machine, and a throw-away
PostgreSQL server from Debian's ``postgresql`` package.

Used by tests/test_platform.py, so it runs what the compose file runs: every variable of a
service's ``env_file`` and ``environment`` is taken from the files and interpolated as compose does
(:func:`interpolate`); then only compose's service addresses (``postgres:5432``, ``redis:6379``,
``airflow-api-server:8080``: :data:`COMPOSE_ADDRESSES`) and container paths (``/data/...``,
``/opt/airflow/...``) are replaced. A value that still names a compose host or a container path
fails :func:`compose_service_env` instead of reaching a process unmapped.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"

#: compose's service addresses (HOST:PORT inside URLs) -> the key of the local server replacing each.
COMPOSE_ADDRESSES = {
    "postgres:5432": "postgres",
    "redis:6379": "redis",
    "airflow-api-server:8080": "api-server",
}


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


def worker_services(spec: dict | None = None) -> list[str]:
    """The services that run ``airflow celery worker`` (the image's entrypoint is ``airflow``)."""
    spec = compose() if spec is None else spec
    return [
        name
        for name, svc in spec["services"].items()
        if list(svc.get("command") or ()) == ["celery", "worker"]
    ]


def note_connection_user(spec: dict | None = None) -> str:
    """The user of compose's connection ``dpngram_api`` (the workers' ``AIRFLOW_CONN_DPNGRAM_API``:
    ``http://USER:${DPNGRAM_API_PASSWORD}@airflow-api-server:8080``), whose password airflow-init
    writes into the simple auth manager's passwords file."""
    spec = compose() if spec is None else spec
    conn = service_env(worker_services(spec)[0], spec)["AIRFLOW_CONN_DPNGRAM_API"]
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


_VARIABLE = re.compile(r"\$(?:\$|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\})")


def interpolate(value: str, variables: Mapping[str, str]) -> str:
    """``value`` with compose's interpolation: ``${VAR}``, ``${VAR:-default}`` (unset or empty),
    ``${VAR-default}`` (unset), ``${VAR:?message}`` / ``${VAR?message}`` (an error when unset, or
    empty with ``:``), ``$$`` (a literal ``$``). ``variables`` stands for compose's ``--env-file``.
    A required variable that is missing raises ValueError with compose's message; so does a
    plain ``${VAR}`` that is unset (compose would substitute "" with a warning)."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name"), match.group("op"), match.group("arg") or ""
        current = variables.get(name)
        if op is None:
            if current is None:
                raise ValueError(f"${{{name}}}: not set")
            return current
        if op == ":-":
            return current if current else arg
        if op == "-":
            return arg if current is None else current
        if (op == ":?" and not current) or (op == "?" and current is None):
            raise ValueError(f"{name}: {arg}")
        return current  # type: ignore[return-value]

    out = _VARIABLE.sub(one, value)
    assert "${" not in out, f"nested interpolation is not supported here: {value!r}"
    return out


def compose_service_env(
    service: str,
    *,
    variables: Mapping[str, str],
    addresses: Mapping[str, str],
    paths: Mapping[str, Path],
    spec: dict | None = None,
) -> dict[str, str]:
    """The environment compose gives ``service``, for a process on this machine: interpolated with
    ``variables`` (:func:`interpolate`); each compose address of :data:`COMPOSE_ADDRESSES` inside a
    URL (after ``@`` or ``//``) replaced by ``addresses[KEY]`` (``127.0.0.1:PORT``); each value that
    is a container path under a key of ``paths`` (``/data/worker``, ``/opt/airflow/auth``...)
    rebased onto the local directory. A value still naming a compose host or an unmapped
    container path fails here."""
    spec = compose() if spec is None else spec
    env = {k: interpolate(v, variables) for k, v in service_env(service, spec).items()}
    hosts = "|".join(re.escape(a.split(":")[0]) for a in COMPOSE_ADDRESSES)
    for key, value in env.items():
        for address, local in COMPOSE_ADDRESSES.items():
            value = re.sub(rf"(?<=[@/]){re.escape(address)}(?=/|$)", addresses[local], value)
        if value.startswith("/"):
            prefix = max(
                (p for p in paths if value == p or value.startswith(p.rstrip("/") + "/")),
                key=len,
                default=None,
            )
            assert prefix is not None, f"{service}: {key}={value} is a container path with no local directory"
            value = str(Path(paths[prefix]) / value[len(prefix) :].lstrip("/"))
        assert not re.search(rf"(?<=[@/])({hosts}):\d+", value), (
            f"{service}: {key}={value} names a compose host"
        )
        env[key] = value
    return env


def init_script(spec: dict | None = None) -> str:
    """compose's ``airflow-init`` command as a bash script for this machine: the image's ``airflow``
    and ``python`` replaced by this environment's."""
    init = (compose() if spec is None else spec)["services"]["airflow-init"]
    assert init["entrypoint"][-2:] == ["bash", "-c"], init["entrypoint"]
    script = " ".join(init["command"])
    airflow = str(Path(sys.executable).parent / "airflow")
    script = re.sub(r"(^|&& )airflow ", lambda m: m.group(1) + shlex.quote(airflow) + " ", script)
    return script.replace("python -c ", shlex.quote(sys.executable) + " -c ")


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
