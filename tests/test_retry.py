"""Safe retries: a DAG run killed with SIGKILL mid-stage, then re-run, charges the privacy ledger
exactly once per stage, reuses the noisy outputs it had persisted (no fresh noise), publishes
once, and until then leaves ``OUT/latest`` at the previous release with no partial release
directory other than ``RUN_ID.staging``. A stage killed after drawing its noise but before its
output was persisted is never drawn again: the re-run is refused (issue 17) and the ledger keeps
the stage's charge (an over-charge, never an under-charge).

Deterministic kills: the DAG runs through ``DAG.test()`` (what ``airflow dags test`` calls; tasks
run in-process) inside a driver subprocess that wraps one pipeline function to SIGKILL its own
process at a named point:

* ``commit:STAGE``: the stage's noisy outputs and report part are persisted, the ledger's final
  charge is next (the pending charge, an upper bound, was recorded before the draw);
* ``write:PATH``: the stage has drawn its noise and written ``PATH`` to its temporary file, the
  atomic rename is next (the output is not persisted).

The driver passes the same ``logical_date`` and ``run_after`` each time, so the re-run is the same
Airflow run id, hence the same dpngram run (what clearing and re-running a failed DAG run does).
The kill switch lives only in this test's driver script, never in the pipeline.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dpngram.config import RunConfig
from dpngram.demo import airflow_env
from dpngram.orchestration.plan import run_release
from dpngram.release.context import RunContext, run_id_from
from dpngram.release.ledger import open_ledger

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
AIRFLOW = str(Path(sys.executable).parent / "airflow")
LOGICAL_DATE = "2026-03-02T00:00:00+00:00"
AIRFLOW_RUN_ID = f"manual__{LOGICAL_DATE}"  # DagRun.generate_run_id(MANUAL, logical_date, run_after)
SECOND_DATE = "2026-03-03T00:00:00+00:00"  # a second DAG run, killed mid-draw
MARKER = "zqxmarker7741"

DRIVER = textwrap.dedent(
    """
    import json, os, signal, sys
    from contextlib import contextmanager

    import pytest  # noqa: F401  (this is test code: the kill switch below exists only here)

    kill = os.environ.get("KILL_AT", "")
    if kill.startswith("commit:"):
        from dpngram.release.ledger import Ledger

        stage = kill.split(":", 1)[1]
        finalize = Ledger.finalize

        def killing_finalize(self, dataset, run_id, name, *args, **kwargs):
            if name == stage:
                print(f"KILLING before the ledger commit of {name}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return finalize(self, dataset, run_id, name, *args, **kwargs)

        Ledger.finalize = killing_finalize
    elif kill.startswith("write:"):
        from dpngram.release.layout import Release

        target = kill.split(":", 1)[1]
        writing = Release.writing

        @contextmanager
        def killing_writing(self, *parts):
            with writing(self, *parts) as tmp:
                yield tmp
                if "/".join(parts) == target:
                    print(f"KILLING before the rename of {target}", flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)

        Release.writing = killing_writing

    import pendulum
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    dag = bag.get_dag("dpngram_release")
    when = pendulum.parse(sys.argv[2])
    run = dag.test(logical_date=when, run_after=when, run_conf=json.loads(sys.argv[1]))
    print("DAG RUN STATE", run.state, flush=True)
    sys.exit(0 if run.state == "success" else 1)
    """
)


@pytest.fixture(scope="module")
def setting(tmp_path_factory) -> dict:
    from dpngram.text.sample import write_sample

    base = tmp_path_factory.mktemp("retry")
    files = write_sample(base / "sample", n_users=300, seed=5, public_sentences=200)
    users = base / "users.jsonl.gz"
    with gzip.open(files["users"], "rt") as src, gzip.open(users, "wt") as dst:
        dst.writelines(src)
        dst.write(json.dumps({"user_id": "u-marker", "text": f"only i wrote {MARKER} here"}) + "\n")
    paths = {
        "airflow_home": base / "home",
        "dags": ROOT / "dags",
        "state": base / "state",
        "out": base / "out",
    }
    env = airflow_env(paths)
    env["DPNGRAM_SCHEDULE"] = "none"
    proc = subprocess.run([AIRFLOW, "db", "migrate"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    conf = {
        "dataset": "retrytest",
        "input": str(users),
        "out": str(base / "out"),
        "warehouse": str(base / "wh.duckdb"),
        "max_n": 3,
        # the vocabulary reads the public corpus (its public domain), so point at the sample's
        "public": str(files["public"]),
        # the DPNE levels' retries are under test: no other stage (the default split runs all)
        "stage_budget": {"dpne": 1.0},
    }
    return {"base": base, "env": env, "conf": conf, "outputs": []}


def drive(
    setting: dict, kill_at: str | None, logical_date: str = LOGICAL_DATE
) -> subprocess.CompletedProcess:
    env = dict(setting["env"])
    if kill_at:
        env["KILL_AT"] = kill_at
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(setting["conf"]), logical_date],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=setting["base"],
    )
    setting["outputs"].append(proc.stdout + proc.stderr)
    return proc


def ledger(setting: dict, run_id: str) -> list[tuple[str, float, float]]:
    with open_ledger() as ledger:  # the module's ledger, which the Airflow tasks charged
        entries = ledger.entries(setting["conf"]["dataset"])
    return sorted((e["stage"], e["epsilon"], e["delta"]) for e in entries if e["run_id"] == run_id)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def release_dirs(out: Path) -> set[str]:
    return {p.name for p in (out / "runs").iterdir()}  # out is OUT/DATASET


def test_killed_stages_are_charged_once_and_published_once(setting):
    out = Path(setting["conf"]["out"]) / setting["conf"]["dataset"]  # OUT/DATASET
    # a previous release of the same dataset (CLI path, in-process)
    previous = run_release(RunConfig.build(**setting["conf"], run_id="previous-release"))
    previous_dir = Path(previous["release"])
    assert (out / "latest").resolve() == previous_dir

    run_id = run_id_from(AIRFLOW_RUN_ID)
    release = RunContext(RunConfig.build(**setting["conf"], run_id=run_id)).release
    level2 = release.staging / "released" / "kgrams" / "k=2.parquet"
    level3 = "released/kgrams/k=3.parquet"

    # 1. killed after level 2 persisted its noisy output, before its final ledger charge
    first = drive(setting, "commit:dpne.k2")
    assert first.returncode == -9, first.stdout[-3000:] + first.stderr[-3000:]
    assert "KILLING before the ledger commit of dpne.k2" in first.stdout
    # level 2 was charged (pending, an upper bound) before it drew its noise
    assert [s for s, _, _ in ledger(setting, run_id)] == ["dpne.k1", "dpne.k2"]
    assert level2.is_file() and (release.staging / "report.parts" / "dpne.k2.json").is_file()
    persisted = digest(level2)
    assert (out / "latest").resolve() == previous_dir
    assert release_dirs(out) == {previous_dir.name, f"{run_id}.staging"}

    # 2. the re-run reuses level 2 (finalizing its charge) and completes
    second = drive(setting, None)
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    assert release.published and not release.staging.exists()
    assert (out / "latest").resolve() == release.final
    assert release_dirs(out) == {previous_dir.name, run_id}
    final_level2 = release.final / "released" / "kgrams" / "k=2.parquet"
    assert digest(final_level2) == persisted  # reused, not redrawn
    assert not [p for p in release.final.rglob("*") if p.name.endswith((".partial", ".tmp"))]

    entries = ledger(setting, run_id)
    assert [s for s, _, _ in entries] == ["dpne.k1", "dpne.k2", "dpne.k3"]  # one charge per stage
    report = json.loads((release.final / "report.json").read_text())
    assert report["validation"]["success"] is True and report["run_id"] == run_id
    charged = report["privacy"]["ledger_charged"]
    assert charged["entries"] == 3
    assert sum(e for _, e, _ in entries) == pytest.approx(charged["epsilon_exact"], rel=1e-9)
    assert sum(e for _, e, _ in entries) <= RunConfig.build(**setting["conf"]).epsilon * (1 + 1e-6)
    # each stage's charge is the one its persisted report part recorded when the noise was drawn
    parts = {p.stem: json.loads(p.read_text()) for p in (release.final / "report.parts").glob("dpne.k*.json")}
    for stage, epsilon, _ in entries:
        assert epsilon == pytest.approx(parts[stage]["privacy"]["charged_epsilon"], rel=1e-12), stage
    # the previous release is untouched and still complete
    assert (previous_dir / "report.json").is_file()

    # 3. another DAG run is killed mid-level-3: noise drawn, written to a temporary file, not renamed
    other_id = run_id_from(f"manual__{SECOND_DATE}")
    other = RunContext(RunConfig.build(**setting["conf"], run_id=other_id)).release
    killed = drive(setting, f"write:{level3}", SECOND_DATE)
    assert killed.returncode == -9, killed.stdout[-3000:] + killed.stderr[-3000:]
    assert f"KILLING before the rename of {level3}" in killed.stdout
    charged_k3 = dict((s, e) for s, e, _ in ledger(setting, other_id))["dpne.k3"]
    # 4. its re-run refuses to draw level 3 again (one line, no retry); the charge stays
    refused = drive(setting, None, SECOND_DATE)
    assert refused.returncode == 1
    assert "drew its noise before a crash" in refused.stdout + refused.stderr
    assert dict((s, e) for s, e, _ in ledger(setting, other_id))["dpne.k3"] == charged_k3
    assert charged_k3 >= parts["dpne.k3"]["privacy"]["charged_epsilon"]  # over-charged, not under
    assert not other.published and (out / "latest").resolve() == release.final


def test_marker_text_is_in_no_dag_test_output_or_log(setting):
    """The drivers' output is what `dpngram demo` writes to its demo-log."""
    if not setting["outputs"]:  # run on its own (e.g. -k marker): produce the outputs first
        test_killed_stages_are_charged_once_and_published_once(setting)
    assert setting["outputs"]
    for output in setting["outputs"]:
        assert MARKER not in output
    logs = Path(setting["env"]["AIRFLOW_HOME"]) / "logs"
    for path in logs.rglob("*") if logs.is_dir() else []:
        if path.is_file():
            assert MARKER.encode() not in path.read_bytes(), path
    for path in Path(setting["conf"]["out"]).rglob("*"):
        if path.is_file():
            assert MARKER.encode() not in path.read_bytes(), path
