"""The Airflow DAG: imports cleanly, Params mirror RunConfig, and `airflow dags test` publishes a release.

Airflow runs in subprocesses with a temporary AIRFLOW_HOME (SQLite metadata DB migrated once per
session), so this process's Airflow configuration is never touched.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dpngram.config import RunConfig
from dpngram.config.budget_plan import DEFAULT_STAGE_BUDGET
from dpngram.demo import airflow_env
from dpngram.orchestration.form import ESSENTIALS, SECTION_ORDER
from dpngram.release.context import PUBLIC_SUMMARY_KEYS

pytestmark = pytest.mark.airflow

ROOT = Path(__file__).resolve().parent.parent
DAG_ID = "dpngram_release"
AIRFLOW = str(Path(sys.executable).parent / "airflow")


@pytest.fixture(scope="session")
def airflow(tmp_path_factory) -> dict:
    """A migrated Airflow home shared by the session's Airflow tests."""
    base = tmp_path_factory.mktemp("airflow")
    paths = {
        "airflow_home": base / "home",
        "dags": ROOT / "dags",
        "state": base / "state",
        "out": base / "default-out",
    }
    env = airflow_env(paths)
    for name in ("DPNGRAM_SCHEDULE", "DPNGRAM_PARAMS", "DPNGRAM_TASK_RETRIES", "DPNGRAM_RETRY_DELAY_SECONDS"):
        env.pop(name, None)  # the DAG's defaults are under test
    proc = subprocess.run([AIRFLOW, "db", "migrate"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"env": env, "base": base, "db": paths["airflow_home"] / "airflow.db"}


@pytest.fixture(scope="session")
def sample(tmp_path_factory) -> dict[str, Path]:
    from dpngram.text.sample import write_sample

    return write_sample(tmp_path_factory.mktemp("dag-sample"), n_users=300, seed=11, public_sentences=300)


def dags_test(airflow: dict, conf: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [AIRFLOW, "dags", "test", DAG_ID, "-c", json.dumps(conf)],
        env=airflow["env"],
        capture_output=True,
        text=True,
        timeout=900,
    )


DAGBAG_SCRIPT = textwrap.dedent("""
    import json, os
    from airflow.dag_processing.dagbag import DagBag
    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    out = {"errors": {k: str(v)[-500:] for k, v in bag.import_errors.items()}, "dags": {}}
    for dag_id, dag in bag.dags.items():
        info = {"params": {name: {"schema": dag.params.get_param(name).schema,
                                  "description": dag.params.get_param(name).description,
                                  "default": dag.params.get_param(name).value}
                           for name in dag.params.keys()}}
        info["tasks"] = {t.task_id: {"pool": t.pool, "retries": t.retries,
                                     "trigger_rule": getattr(t.trigger_rule, "value", str(t.trigger_rule)),
                                     "outlets": sorted(getattr(a, "uri", None) or f"alias:{a.name}"
                                                       for a in t.outlets),
                                     "label": t.task_display_name,
                                     "group": t.task_group.group_id if t.task_group else None,
                                     "upstream": sorted(t.upstream_task_ids)} for t in dag.tasks}
        info["schedule"] = dag.schedule if isinstance(dag.schedule, (str, type(None))) else repr(dag.schedule)
        info["catchup"] = dag.catchup
        out["dags"][dag_id] = info
    print("RESULT" + json.dumps(out, default=str))
""")


def dagbag(airflow: dict, **env: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", DAGBAG_SCRIPT],
        env={**airflow["env"], **env},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=airflow["base"],
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(line[len("RESULT") :])


HEAVY = ("numpy", "scipy", "duckdb", "polars", "pyarrow", "pandas", "great_expectations", "kenlm", "pyspark")


def test_graph_groups_fold_the_chains_around_the_parallel_stages():
    """The graph's groups come from the plan's edges: runs of tasks with nothing beside them fold
    (so that the graph is 4 nodes long and readable at the default zoom), the parallel stages stay
    visible; a new branch changes the groups without anyone writing them."""
    from dpngram.orchestration.plan import dag_upstreams, graph_groups

    assert graph_groups() == {
        "prepare": ("privacy_precheck", "ingest"),
        "release": ("validation", "lm", "report", "publish", "publish_lm"),
        "dpne": ("dpne.k1", "dpne.kgrams"),
    }
    upstreams = dag_upstreams()
    # a hypothetical step beside everything from ingest to publish: only what is still on the
    # chain folds
    names = list(upstreams)
    beside = dict(upstreams)
    beside["publish"] = (*upstreams["publish"], "audit")
    branched = {name: beside[name] for name in names[:2]} | {"audit": ("ingest",)}
    branched |= {name: beside[name] for name in names[2:]}
    assert graph_groups(branched) == {
        "prepare": ("privacy_precheck", "ingest"),
        "release": ("publish", "publish_lm"),
        "dpne": ("dpne.k1", "dpne.kgrams"),
    }
    # only a chain at the end: it is the release, not the preparation
    tail_only = {"privacy_precheck": ()} | {name: upstreams[name] for name in names[1:]}
    tail_only["ingest"] = ()
    tail_only["dpne.k1"] = ("ingest", "privacy_precheck")
    assert graph_groups(tail_only)["release"] == ("validation", "lm", "report", "publish", "publish_lm")
    assert "prepare" not in graph_groups(tail_only)
    # a chain in the middle too: no name for it
    chained = {name: upstreams[name] for name in names[: names.index("synth") + 1]}
    chained |= {"check_a": ("lm_counts", "bayes", "synth"), "check_b": ("check_a",), "fan": ("check_b",)}
    chained |= {"fan_b": ("check_b",), "validation": ("fan", "fan_b")}
    chained |= {name: upstreams[name] for name in names[names.index("lm") :]}
    with pytest.raises(ValueError, match=r"a chain in the middle of the graph \(check_a \.\. check_b\)"):
        graph_groups(chained)


def test_parsing_the_dag_files_imports_no_heavy_library(airflow):
    """Every task process parses the DAG file before it runs (the cold start of issue 28, item 6):
    parsing must not import the pipeline's heavy libraries; the tasks import them when they run."""
    script = textwrap.dedent(f"""
        import importlib.util, json, sys, time
        start = time.perf_counter()
        for name in ("dpngram_release", "dpngram_consume_lm"):
            spec = importlib.util.spec_from_file_location(name, "{ROOT / "dags"}/" + name + ".py")
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        print("RESULT" + json.dumps({{"heavy": sorted(m for m in {HEAVY!r} if m in sys.modules),
                                      "seconds": time.perf_counter() - start}}))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], env=airflow["env"], capture_output=True, text=True, timeout=300
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert json.loads(line[len("RESULT") :])["heavy"] == []


def test_dag_imports_and_params_mirror_run_config(airflow):
    bag = dagbag(airflow)
    assert bag["errors"] == {} and set(bag["dags"]) == {DAG_ID, "dpngram_consume_lm"}
    info = bag["dags"][DAG_ID]
    # default: no schedule (no lifetime budget is configured: a refresh could only be refused)
    assert info["schedule"] is None and info["catchup"] is False

    schema = RunConfig.param_schema()
    params = info["params"]
    assert set(params) == set(schema) - {"run_id"}  # run_id comes from the Airflow run
    for name, param in params.items():
        for key in ("enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            expected = schema[name].get(key)
            if key == "enum" and expected is not None:
                expected = [*expected, None]  # emptied dropdown: the default
            assert param["schema"].get(key) == expected, (name, key)
        assert param["schema"]["title"] == schema[name]["title"], name
        # every field is described, and its description carries the schema's bounds
        assert param["description"].startswith(schema[name]["description"]), name
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if key in schema[name]:
                assert "Allowed:" in param["description"], name
        # only what RunConfig requires is required in the form (Airflow: a type without null)
        types = param["schema"]["type"]
        assert ("null" not in types) == (name in ("input", "out")), (name, types)
        # no two-type text areas: number-or-'auto' fields are one-line strings suggesting 'auto'
        if isinstance(schema[name].get("type"), list) and len(set(schema[name]["type"]) - {"null"}) > 1:
            assert types[0] == "string" and param["schema"]["examples"] == ["auto"], name
    assert "Allowed: 0 < value ≤ 100." in params["epsilon"]["description"]
    assert "Allowed: 1 ≤ value ≤ 12." in params["max_n"]["description"]
    assert "Allowed: 0 < value < 1." in params["delta"]["description"]
    assert params["epsilon"]["default"] == RunConfig.model_fields["epsilon"].default
    # the whole product by default: every stage has a share, so the run builds a language model
    assert params["stage_budget"]["default"] == DEFAULT_STAGE_BUDGET
    assert set(DEFAULT_STAGE_BUDGET) == {"dpne", "lm_counts", "bayes", "synth"}
    # the essentials come first and have no section (Airflow's open first section)
    names = list(params)
    assert names[: len(ESSENTIALS)] == list(ESSENTIALS)
    assert all("section" not in params[n]["schema"] for n in ESSENTIALS)
    sections = [params[n]["schema"]["section"] for n in names[len(ESSENTIALS) :]]
    assert list(dict.fromkeys(sections)) == list(SECTION_ORDER)
    assert params["bayes_clip_count"]["schema"]["section"] == "Stage: Bayesian trigram distribution"
    assert params["lifetime_epsilon"]["schema"]["section"] == "Privacy details"
    for name in ("input", "public", "out"):
        assert Path(params[name]["default"]).is_absolute(), name
    # no warehouse default: each worker's own directory (DPNGRAM_WAREHOUSE) when the run names none
    assert params["warehouse"]["default"] is None

    tasks = info["tasks"]
    # TrieHH runs in the vocabulary task and the levels 2..T in the k-gram task: no task is
    # skipped in a default run
    order = [
        "privacy_precheck",
        "ingest",
        "dpne.k1",
        "dpne.kgrams",
        "lm_counts",
        "bayes",
        "synth",
        "validation",
        "lm",
        "report",
        "publish",
        "publish_lm",
    ]
    assert set(tasks) == set(order)
    # the real flow (derived from what each step reads): the stages that build on the DPNE
    # release fan out after it and join at validation; synth needs only the vocabulary
    upstream = {name: tasks[name]["upstream"] for name in order}
    assert upstream == {
        "privacy_precheck": [],
        "ingest": ["privacy_precheck"],
        "dpne.k1": ["ingest"],
        "dpne.kgrams": ["dpne.k1"],
        "lm_counts": ["dpne.kgrams"],
        "bayes": ["dpne.kgrams"],
        "synth": ["dpne.k1"],
        "validation": ["bayes", "lm_counts", "synth"],
        "lm": ["validation"],
        "report": ["lm"],
        "publish": ["report"],
        "publish_lm": ["publish"],
    }
    labels = {name: tasks[name]["label"] for name in order}
    assert labels["bayes"] == "Bayesian trigram distribution" and labels["synth"] == "Synthetic text"
    assert labels["lm_counts"] == "LM counts" and labels["dpne.k1"] == "Vocabulary"
    assert labels["validation"] == "Validation" and labels["publish"] == "Publish"
    assert len(set(labels.values())) == len(order)  # every task has a plain name of its own
    # the graph folds the chains before and after the parallel stages (readable at default zoom)
    groups = {name: tasks[name]["group"] for name in order}
    assert groups == {
        "privacy_precheck": "prepare",
        "ingest": "prepare",
        "dpne.k1": "dpne",
        "dpne.kgrams": "dpne",
        "lm_counts": None,
        "bayes": None,
        "synth": None,
        "validation": "release",
        "lm": "release",
        "report": "release",
        "publish": "release",
        "publish_lm": "release",
    }
    # run after skipped tasks, never after a failure
    relaxed = set(order[2:-2])  # every step after ingest
    for name in order:
        assert tasks[name]["trigger_rule"] == ("none_failed" if name in relaxed else "all_success"), name
    # no task is in a one-slot pool any more (issue 50): each run has a warehouse of its own and
    # the tasks of one run take turns through the run's lock in the ledger, so two datasets' runs
    # go on side by side
    assert all(tasks[t]["pool"] == "default_pool" for t in order)
    assert all(tasks[t]["retries"] == 2 for t in order)
    # per-dataset assets, emitted through aliases (the dataset is a run parameter)
    assert tasks["publish"]["outlets"] == ["alias:dpngram_ngrams_events", "alias:dpngram_release_events"]
    assert tasks["publish_lm"]["outlets"] == ["alias:dpngram_language_model_events"]
    assert all(not tasks[t]["outlets"] for t in order[:-2])

    consumer = bag["dags"]["dpngram_consume_lm"]
    # the consumer subscribes to ONE dataset's model (DPNGRAM_CONSUMER_DATASET, default 'default')
    out_uri = "file://" + str(Path(airflow["env"]["DPNGRAM_OUT"]).resolve())
    assert f"{out_uri}/default/latest/model" in json.dumps(consumer["schedule"])
    other = dagbag(airflow, DPNGRAM_CONSUMER_DATASET="chats")["dags"]["dpngram_consume_lm"]
    assert f"{out_uri}/chats/latest/model" in json.dumps(other["schedule"])
    assert f"{out_uri}/default/" not in json.dumps(other["schedule"])
    assert set(consumer["tasks"]) == {"perplexity"}


def test_schedule_and_param_defaults_come_from_the_environment(airflow):
    bag = dagbag(
        airflow,
        DPNGRAM_SCHEDULE="none",
        DPNGRAM_PARAMS=json.dumps({"dataset": "support-chats", "lifetime_epsilon": 40}),
        DPNGRAM_TASK_RETRIES="5",
    )
    assert bag["errors"] == {}
    info = bag["dags"][DAG_ID]
    assert info["schedule"] is None
    assert info["params"]["dataset"]["default"] == "support-chats"
    assert info["params"]["lifetime_epsilon"]["default"] == 40
    assert info["tasks"]["ingest"]["retries"] == 5
    capped = json.dumps({"lifetime_epsilon": 40})
    # with a lifetime budget the default is a weekly refresh, or the schedule the deployment sets
    assert dagbag(airflow, DPNGRAM_PARAMS=capped)["dags"][DAG_ID]["schedule"] == "@weekly"
    custom = dagbag(airflow, DPNGRAM_SCHEDULE="0 3 * * 1", DPNGRAM_PARAMS=capped)
    assert custom["dags"][DAG_ID]["schedule"] == "0 3 * * 1"
    # a schedule without a lifetime budget could only be refused run after run: an import error
    uncapped = dagbag(airflow, DPNGRAM_SCHEDULE="0 3 * * 1")
    assert DAG_ID not in uncapped["dags"]
    assert any("needs a lifetime budget" in e for e in uncapped["errors"].values()), uncapped["errors"]
    # a typo in the deployment's defaults is an import error naming the variable, not a silent default
    broken = dagbag(airflow, DPNGRAM_PARAMS=json.dumps({"epsilonn": 1}))
    assert DAG_ID not in broken["dags"]
    assert any("DPNGRAM_PARAMS: unknown parameter(s) ['epsilonn']" in e for e in broken["errors"].values())


def test_dags_test_publishes_a_release(airflow, sample):
    """Only paths and T are set: every other Param keeps its default, which must deliver the whole
    product (k-grams, noisy counts, trigram distribution, synthetic text, language model)."""
    out = airflow["base"] / "out"
    conf = {
        "input": str(sample["users"]),
        "public": str(sample["public"]),
        "out": str(out),
        "warehouse": str(airflow["base"] / "wh.duckdb"),
        "max_n": 3,
        "dataset": "dagtest",
    }
    proc = dags_test(airflow, conf)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    release = (out / "dagtest" / "latest").resolve()
    assert release.parent == out / "dagtest" / "runs" and release.name.startswith("manual__")
    for name in (
        "report.json",
        "report.html",
        "released/vocabulary.parquet",
        "released/kgrams.parquet",
        "validation/data_docs/index.html",
    ):
        assert (release / name).is_file(), name
    report = json.loads((release / "report.json").read_text())
    assert report["run_id"] == release.name
    assert report["parameters"]["max_n"] == 3 and report["validation"]["success"] is True
    assert set(report["released"]["ngrams_per_k"]) <= {"1", "2", "3"}
    assert report["privacy"]["total"]["epsilon"] <= report["parameters"]["epsilon"] * (1 + 1e-6)

    with sqlite3.connect(airflow["db"]) as db:
        run_ids = [r[0] for r in db.execute("SELECT run_id FROM dag_run WHERE dag_id = ?", (DAG_ID,))]
        assert len(run_ids) == 1
        states = dict(
            db.execute(
                "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?",
                (DAG_ID, run_ids[0]),
            )
        )
        xcoms = db.execute(
            "SELECT task_id, value FROM xcom WHERE dag_id = ? AND run_id = ?", (DAG_ID, run_ids[0])
        ).fetchall()
    # every default (the full budget split): no task is skipped and a language model is published
    assert {t for t, s in states.items() if s != "success"} == set(), states
    assert (release / "model" / "model.binary").is_file()
    # timings are operator-only: in the run's operator report beside the warehouse, not the release
    assert "timings_seconds" not in report
    (operator_report,) = (airflow["base"] / "wh.duckdb" / "operator").glob("*/operator_report.json")
    timings = json.loads(operator_report.read_text())["timings_seconds"]
    assert set(timings) >= {"dpne.k1", "lm_counts", "bayes", "synth", "validation", "lm"}
    # the level steps keep their names (timings) though they run in one task; none beyond T
    assert {"dpne.k2", "dpne.k3"} <= set(timings)
    assert "dpne.k4" not in timings
    # XCom carries only paths, released row counts, epsilon/delta and identifiers.
    assert xcoms
    for task_id, value in xcoms:
        payload = json.loads(value)
        assert isinstance(payload, dict), task_id
        assert set(payload) <= set(PUBLIC_SUMMARY_KEYS), (task_id, payload)


@pytest.mark.spark
def test_dags_test_on_the_spark_engine(airflow, sample):
    """The DAG's engine Params select Spark: every task that reads private tables opens a Spark
    session (local[2] here, a cluster master in production), the release validates and is
    published, and the run's private tables, under spark_warehouse, are removed at publish (no DuckDB
    file of the run is left; the ledger is its own store)."""
    from dpngram.engines.spark import java_available
    from dpngram.engines.sql import run_schema_name

    if not java_available():
        pytest.skip("Spark needs a Java runtime (none on PATH/JAVA_HOME)")
    base = airflow["base"] / "spark-run"
    conf = {
        "input": str(sample["users"]),
        "public": str(sample["public"]),
        "out": str(base / "out"),
        "warehouse": str(base / "wh.duckdb"),
        "spark_warehouse": str(base / "tables"),
        "engine": "spark",
        "spark_master": "local[2]",
        "spark_conf": "spark.sql.shuffle.partitions=4,spark.driver.memory=2g",
        "stage_budget": {"dpne": 0.6, "bayes": 0.2, "synth": 0.2},
        "synth_n_max": 3,
        "lm_route": "off",
        "max_n": 3,
        "dataset": "dagspark",
    }
    proc = dags_test(airflow, conf)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    release = (base / "out" / "dagspark" / "latest").resolve()
    report = json.loads((release / "report.json").read_text())
    assert report["parameters"]["engine"] == "spark" and report["validation"]["success"] is True
    for name in (
        "released/kgrams.parquet",
        "released/trigram_dist.parquet",
        "released/synthetic_sequences.parquet",
    ):
        assert (release / name).is_file(), name
    # Spark kept the run's tables under spark_warehouse (its root is there); publish removed them
    assert (base / "tables").is_dir() and not (base / "tables" / run_schema_name(release.name)).exists()
    from dpngram.release.ledger import open_ledger

    # no DuckDB file of the run is left in the warehouse directory, and the ledger (the tasks' own,
    # the per-user default of the Airflow environment) holds the charges
    assert not list((base / "wh.duckdb" / "runs").glob("*.duckdb"))
    with open_ledger(str(Path(airflow["env"]["XDG_DATA_HOME"]) / "dpngram" / "ledger.duckdb")) as ledger:
        assert ledger.spent("dagspark").epsilon > 0


def test_invalid_conf_fails_the_dag_test(airflow, sample):
    out = airflow["base"] / "out-invalid"
    conf = {
        "input": str(sample["users"]),
        "out": str(out),
        "warehouse": str(airflow["base"] / "wh2.duckdb"),
        "epsilon": -1,
    }
    proc = dags_test(airflow, conf)
    assert proc.returncode != 0
    assert "epsilon" in proc.stdout + proc.stderr
    assert not (out / "default" / "latest").exists() and not (out / "latest").exists()


PRECHECK_SCRIPT = textwrap.dedent("""
    import json, os, types
    from airflow.dag_processing.dagbag import DagBag
    from dpngram.orchestration.plan import TaskRefused
    dag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"]).dags["dpngram_release"]
    precheck = dag.get_task("privacy_precheck").python_callable
    params = {name: dag.params[name] for name in dag.params.keys()}
    out = {}
    cases = [("scheduled", "scheduled", None), ("scheduled_capped", "scheduled", 40.0),
             ("manual", "manual", None)]
    for label, run_type, lifetime in cases:
        context = {"params": {**params, "lifetime_epsilon": lifetime},
                   "run_id": f"{run_type}__2026-01-05T00:00:00+00:00",
                   "dag_run": types.SimpleNamespace(run_type=run_type)}
        try:
            out[label] = {"ok": precheck(**context)}
        except TaskRefused as err:
            out[label] = {"refused": str(err)}
    print("RESULT" + json.dumps(out))
""")


def _run_precheck(airflow, params: dict) -> tuple[dict, str]:
    """PRECHECK_SCRIPT with DPNGRAM_PARAMS = ``params``: (its result per case, everything logged).
    Each call has a ledger of its own, beside its warehouse directory: the cases reuse run ids."""
    ledger = str(params["warehouse"]) + ".ledger.duckdb"
    proc = subprocess.run(
        [sys.executable, "-c", PRECHECK_SCRIPT],
        env={**airflow["env"], "DPNGRAM_PARAMS": json.dumps(params), "DPNGRAM_LEDGER": ledger},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=airflow["base"],
    )
    logged = proc.stdout + proc.stderr
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(line[len("RESULT") :]), logged


def test_scheduled_refresh_without_a_lifetime_budget_is_refused(airflow, tmp_path):
    """A weekly schedule with no lifetime cap would spend without bound: privacy_precheck refuses
    scheduled runs unless lifetime_epsilon is set; triggered runs are not affected."""
    public = tmp_path / "public.txt"
    public.write_text("a public sentence .\n")  # the default split's stages read it: it must exist
    users = tmp_path / "users.jsonl"
    users.write_text('{"user_id": "u", "text": "hello"}\n')  # the pre-check refuses a missing input
    defaults = {
        "input": str(users),
        "out": str(tmp_path / "out"),
        "warehouse": str(tmp_path / "wh.duckdb"),
        "dataset": "weekly",
        "public": str(public),
    }
    result, logged = _run_precheck(airflow, defaults)
    assert "a scheduled refresh needs a lifetime budget" in result["scheduled"]["refused"]
    assert "ok" in result["scheduled_capped"], result
    assert "ok" in result["manual"], result
    assert "note:" not in logged  # with a public corpus and the default split: nothing to note

    # without a public corpus the pre-check's log says what that costs, as `dpngram run` does
    no_public = {
        **defaults,
        "public": None,
        "out": str(tmp_path / "out2"),
        "warehouse": str(tmp_path / "w2.db"),
    }
    result, logged = _run_precheck(airflow, no_public)
    assert "ok" in result["manual"], result
    assert "note: bayes will not run: no public corpus" in logged, logged[-3000:]
    assert "note: no public corpus: the language model's vocabulary is the DP vocabulary" in logged

    # issue 28: a missing input is refused before anything is reserved (the schema cannot say it)
    missing = {**defaults, "input": str(tmp_path / "nowhere.jsonl"), "warehouse": str(tmp_path / "w3.db")}
    result, logged = _run_precheck(airflow, missing)
    assert result["manual"]["refused"] == (
        f"privacy pre-check refused the run: input: {tmp_path / 'nowhere.jsonl'} does not exist; "
        "nothing was reserved"
    ), result
    assert "the run's note is not set: no Airflow connection 'dpngram_api'" in logged
