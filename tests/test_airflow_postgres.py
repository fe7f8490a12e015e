"""The production configuration tested for real (issue 28, item 8): Airflow 3 on PostgreSQL with
the LocalExecutor, configured from docker/compose.yaml and docker/airflow.env themselves
(tests/airflow_compose.py), without Docker.

One session (module fixture):

1. a PostgreSQL cluster from Debian's ``postgresql`` package (``scripts/system_deps.sh`` installs
   it) in a temporary directory on 127.0.0.1 and a free port; as root the server runs as the
   ``postgres`` system user;
2. compose's ``airflow-init`` command (``airflow db migrate`` + the one-slot pool) run as written
   in compose.yaml, then api-server, scheduler and dag-processor with the Airflow services'
   environment (LocalExecutor, parallelism 4, ...): only host names, secrets and container paths
   are replaced (``airflow_compose.LOCAL_OVERRIDES``);
3. two releases of two datasets triggered at once through the REST API: both must publish (each
   into its own ``OUT/DATASET/latest``) and both datasets' three assets must fire;
4. everything started is stopped (Airflow process groups, then ``pg_ctl stop``) and the cluster
   directory removed.

2-3 minutes on 2 shared cores (1 min 44 s at load average ~5.5; 2 min 45 s at ~7: migration 14 s, DAG
ready at 33 s, two runs one after the other, as the DAG allows one active run, done at 144 s), so
it is marked ``postgres`` and runs in ``make bench`` (``make test-postgres`` alone), not in
``make test`` (tests/conftest.py skips it there with the reason).
"""

from __future__ import annotations

import base64
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from airflow_compose import (
    PostgresServer,
    compose,
    compose_airflow_env,
    free_port,
    note_connection_user,
    postgres_bindir,
)
from test_airflow_standalone import AIRFLOW, DAG_ID, USERNAME, Airflow

from dpngram.demo import airflow_env
from dpngram.release.context import run_id_from
from dpngram.release.publish import ASSET_KINDS, asset_key

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.postgres]

DATASETS = ("pg-a", "pg-b")
SPLIT = {"dpne": 0.5, "lm_counts": 0.5}  # vocabulary, k-grams and a language model (3 assets)


#: The user compose's connection dpngram_api logs in as (a refused task writes its run's note as it).
NOTE_USER = note_connection_user()


class PostgresAirflow(Airflow):
    """The tests' launcher with compose's configuration on a real PostgreSQL."""

    def __init__(self, base: Path, pg: PostgresServer) -> None:
        super().__init__(base)  # ports, paths, the passwords file, process handling
        self.pg = pg
        local = compose_airflow_env(
            db_url=pg.url,
            api_url=self.url,
            secrets={
                # a valid Fernet key: 32 url-safe base64-encoded bytes
                "fernet_key": base64.urlsafe_b64encode(b"dpngram-postgres-test-fernet-32b").decode(),
                "jwt_secret": "dpngram-postgres-test-secret-" + "x" * 32,
                "api_secret_key": "dpngram-postgres-test-key",
                "api_password": "dpngram-postgres-test-bot-password",
            },
            paths={
                "state": self.paths["state"],
                "out": self.paths["out"],
                "consumer_out": base / "consumer-out",
            },
            users=f"{USERNAME}:admin,{NOTE_USER}:user",
            passwords_file=base / "passwords.json",
        )
        env = airflow_env(self.paths)  # AIRFLOW_HOME and the DAG folder (the image's ENV)
        env.update(local)
        env.update(
            {
                # where compose publishes port 8080 of the api-server container; here a free port
                "AIRFLOW__API__BASE_URL": self.url,
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.paths["airflow_home"] / "logs"),
                # the scheduler's health server (compose: 8974 in its own container) on a free port
                "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT": str(free_port()),
            }
        )
        self.env = env

    def setup(self) -> None:
        """compose's airflow-init service, command as written (db migrate && pools set)."""
        init = compose()["services"]["airflow-init"]
        script = " ".join(init["command"]).replace("airflow ", shlex.quote(AIRFLOW) + " ")
        script = script.replace("python -c ", shlex.quote(sys.executable) + " -c ")  # the image's python
        log = self.logs_dir / "airflow-init.log"
        self.paths["airflow_home"].mkdir(parents=True, exist_ok=True)
        with log.open("w", encoding="utf-8") as fh:
            proc = subprocess.run(
                ["bash", "-c", script],
                env=self.env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                cwd=self.base,
                check=False,
            )
        assert proc.returncode == 0, f"airflow-init failed:\n{log.read_text()[-4000:]}"

    def tails(self, lines: int = 40) -> str:
        return super().tails(lines) + f"\n----- postgres.log\n{self.pg.tail()}"


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> dict[str, Any]:
    if postgres_bindir() is None:
        pytest.skip("no PostgreSQL server binaries: install Debian's 'postgresql' (scripts/system_deps.sh)")
    from dpngram.text.sample import write_sample

    base = tmp_path_factory.mktemp("postgres")
    sample = write_sample(base / "data" / "sample", n_users=300, seed=11, public_sentences=2000)
    out: dict[str, Any] = {"base": base, "timings": {}}
    pg = PostgresServer()
    airflow = PostgresAirflow(base, pg)
    out["airflow"], out["env"] = airflow, dict(airflow.env)
    t0 = time.monotonic()
    try:
        pg.start()
        out["timings"]["postgres_start"] = round(time.monotonic() - t0, 1)
        airflow.start()
        out["timings"]["migrate"] = round(time.monotonic() - t0, 1)
        airflow.login()
        airflow.unpause(DAG_ID)
        out["timings"]["ready"] = round(time.monotonic() - t0, 1)
        confs = {
            ds: {
                "dataset": ds,
                "input": str(sample["users"]),
                "public": str(sample["public"]),
                "out": str(base / "releases"),
                "warehouse": str(base / "warehouse.duckdb"),
                "max_n": 2,
                "stage_budget": SPLIT,
            }
            for ds in DATASETS
        }
        out["confs"] = confs
        runs = {}
        for ds in DATASETS:  # both at once: the second is queued behind the first (max_active_runs=1)
            status, run = airflow.trigger(confs[ds])
            assert status == 200, (status, run)
            runs[ds] = run
        out["runs"] = runs
        out["states"] = {ds: airflow.wait_for_run(DAG_ID, run["dag_run_id"]) for ds, run in runs.items()}
        out["timings"]["runs_done"] = round(time.monotonic() - t0, 1)
        out["dag_runs"] = {
            ds: airflow.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}")[1]
            for ds, run in runs.items()
        }
        status, events = airflow.request("GET", f"/api/v2/assets/events?source_dag_id={DAG_ID}&limit=100")
        assert status == 200, events
        out["events"] = events["asset_events"]
        # the metadata really is in PostgreSQL
        import psycopg2

        with (
            psycopg2.connect(
                host="127.0.0.1", port=pg.port, user=pg.user, password=pg.password, dbname=pg.database
            ) as db,
            db.cursor() as cur,
        ):
            cur.execute("SELECT count(*) FROM dag_run WHERE dag_id = %s", (DAG_ID,))
            out["pg_dag_runs"] = cur.fetchone()[0]
            cur.execute("SELECT slots FROM slot_pool WHERE pool = 'dpngram_warehouse'")
            out["pg_pool_slots"] = cur.fetchone()[0]
            cur.execute("SELECT count(*) FROM asset_event")
            out["pg_asset_events"] = cur.fetchone()[0]
    finally:
        out["tails"] = airflow.tails()
        airflow.stop()
        pg.stop()
        out["timings"]["total"] = round(time.monotonic() - t0, 1)
    out["pg_dir_left"] = pg.dir.exists()
    out["procs_left"] = {name: p.poll() for name, p in airflow.procs.items()}
    print(f"postgres session timings (s): {json.dumps(out['timings'])}")
    return out


def test_settings_come_from_the_compose_files(session):
    env = session["env"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor" and env["AIRFLOW__CORE__PARALLELISM"] == "4"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://airflow:")
    assert "/airflow" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert session["pg_pool_slots"] == 1  # compose's airflow-init created the pool
    assert not any(Path(session["airflow"].paths["airflow_home"]).glob("*.db"))  # no SQLite anywhere


def test_two_datasets_triggered_at_once_both_publish(session):
    assert session["states"] == {ds: "success" for ds in DATASETS}, session["tails"]
    assert session["pg_dag_runs"] == 2
    releases = Path(session["base"]) / "releases"
    for ds, run in session["runs"].items():
        release = releases / ds / "runs" / run_id_from(run["dag_run_id"])
        assert (releases / ds / "latest").resolve() == release, ds
        assert (release / "model" / "model.binary").is_file() and (release / "report.json").is_file()


def test_both_datasets_assets_fire(session):
    assert session["states"] == {ds: "success" for ds in DATASETS}, session["tails"]
    for ds, run in session["runs"].items():
        run_id = run_id_from(run["dag_run_id"])
        fired = {e["uri"] for e in session["events"] if e["extra"].get("run_id") == run_id}
        assert fired == {asset_key(ds, kind)[1] for kind in ASSET_KINDS}, (ds, fired)
    assert session["pg_asset_events"] >= 2 * len(ASSET_KINDS)


def test_everything_started_was_stopped(session):
    assert all(code is not None for code in session["procs_left"].values()), session["procs_left"]
    assert session["pg_dir_left"] is False
