"""Airflow 3 the way users run it: api-server + scheduler + dag-processor as separate processes on
loopback, a temporary AIRFLOW_HOME (SQLite metadata DB, LocalExecutor), the simple auth manager
with a users+passwords file, and the REST API the UI's trigger form uses.

One session (module fixture) runs, in order:

1. a release triggered from the UI's trigger form in a real browser (headless Chromium driven by
   Playwright: log in, open the DAG, *Trigger*, keep every default, *Trigger*) on a corpus in which
   one user's text holds a marker string. The deployment's defaults (``DPNGRAM_PARAMS``) give only
   the paths, T = 2 and a lifetime budget; every other parameter keeps its default, which must
   publish report.json, the released parquet files and a KenLM model. The form itself is checked
   as a user sees it (essentials in the open first section, the rest in collapsed sections, only
   input and output marked required, bounds shown) and a screenshot is saved
   (``DPNGRAM_SCREENSHOTS``, default: the test's temporary directory). Without a Chromium binary
   the run is triggered through the REST API with an empty conf (what the form sends with the
   defaults) and the form test is skipped with the reason;
2. the asset events (n-grams, release, language model) with their ``extra`` metadata, and the
   consumer DAG ``dpngram_consume_lm`` run triggered by the model asset;
3. a second release of the same dataset that would exceed its lifetime epsilon: it must fail at
   ``privacy_precheck`` with the ledger's reason and read nothing;
4. an invalid conf (epsilon -1), which the API must refuse with the Param validation error;
   budget splits out of bounds ({"dpne": 2}, an unknown stage), refused before a run exists;
5. (issue 28) a mostly malformed input of another dataset, refused at ingest, queued together with
   a release of a second dataset (``OTHER_DATASET``) into the same OUT; then, in Chromium, the
   malformed run's ``ingest`` log page (the quarantine summary), the Assets page (both datasets'
   assets), the graph view at default zoom (``graph.png``; the fan-out from the nodes' positions,
   the labels' size on screen),
   the trigger form refusing ``{"dpne": 2}`` typed into *Budget split*, and the vocabulary's
   new-words Params in *Privacy details* (defaults, descriptions, a share of 1.5 refused).

Then the marker must appear in no Airflow log, no XCom value and no released file, and XCom must
hold no exact private count. The processes are killed (process groups) whatever happens; on a
failure the tails of their logs are part of the assertion message.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from airflow_compose import api_server_health_paths
from conftest import chromium_path

from dpngram.demo import airflow_env, ensure_airflow
from dpngram.engines.sql import run_schema_name
from dpngram.release.context import run_id_from

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
AIRFLOW = str(Path(sys.executable).parent / "airflow")
DAG_ID = "dpngram_release"
CONSUMER_ID = "dpngram_consume_lm"
MARKER = "zqxmarker7741"
MARKER_USER = "zqxuser9931"
USERNAME, PASSWORD = "dpngram-test", "not-a-secret-test-password"
RUN_TIMEOUT = 300.0  # seconds for one DAG run to finish
MALFORMED_LINES = 25  # of 125 rows: 20% quarantined, above the default max_quarantine_fraction 5%
OTHER_DATASET = "standalone-b"  # a second dataset released into the same OUT
OTHER_SPLIT = {"dpne": 0.5, "lm_counts": 0.5}  # cheap, but with a language model (and its asset)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_marker_corpus(directory: Path) -> dict[str, Path]:
    """The synthetic sample (300 users) plus one user whose text holds :data:`MARKER`."""
    from dpngram.text.sample import write_sample

    files = write_sample(directory / "sample", n_users=300, seed=7, public_sentences=2000, heldout_users=30)
    users = directory / "users_with_marker.jsonl.gz"
    with (
        gzip.open(files["users"], "rt", encoding="utf-8") as src,
        gzip.open(users, "wt", encoding="utf-8") as dst,
    ):
        for line in src:
            dst.write(line)
        record = {
            "user_id": MARKER_USER,
            "text": f"my secret word is {MARKER} and nobody may know {MARKER} .",
        }
        dst.write(json.dumps(record) + "\n")
    # the consumer's held-out text: users never ingested, one document a line (never the public corpus)
    heldout = directory / "heldout.txt"
    with gzip.open(files["heldout_users"], "rt", encoding="utf-8") as src:
        heldout.write_text("".join(json.loads(line)["text"].replace("\n", " ") + "\n" for line in src))
    malformed = directory / "users_malformed.jsonl.gz"  # issue 28: mostly garbage, refused at ingest
    with gzip.open(files["users"], "rt", encoding="utf-8") as src:
        good = src.read().splitlines()[:100]
    with gzip.open(malformed, "wt", encoding="utf-8") as dst:
        dst.write("\n".join([*good, *(["{not json"] * MALFORMED_LINES)]) + "\n")
    return {"users": users, "public": files["public"], "heldout": heldout, "malformed": malformed}


def _die_with_parent() -> None:
    """In the child before exec: ask Linux to SIGTERM it when the test process dies, so a pytest
    killed by a timeout or Ctrl-C (finalizers skipped) leaves no Airflow servers behind."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class Airflow:
    """api-server, scheduler and dag-processor in their own process groups."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.paths = {
            "airflow_home": base / "home",
            "dags": ROOT / "dags",
            "state": base / "state",
            "out": base / "out",
        }
        self.logs_dir = base / "process-logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        passwords = base / "passwords.json"
        passwords.write_text(json.dumps({USERNAME: PASSWORD}))
        env = airflow_env(self.paths)
        env.update(
            {
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": "2",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                "AIRFLOW__API__BASE_URL": self.url,
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__WORKERS": "1",
                # every component must share the secret, or task tokens are rejected
                "AIRFLOW__API_AUTH__JWT_SECRET": "dpngram-standalone-test-secret-" + "x" * 32,
                "AIRFLOW__API__SECRET_KEY": "dpngram-standalone-test-key",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USERNAME}:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
                "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
                "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.paths["airflow_home"] / "logs"),
                "DPNGRAM_SCHEDULE": "none",  # no scheduled refresh may start during the test
                "DPNGRAM_RETRY_DELAY_SECONDS": "3",
                "DPNGRAM_CONSUMER_OUT": str(base / "consumer-out"),
                # the credentials a refused task uses to write its DAG run's note (REST API)
                "AIRFLOW_CONN_DPNGRAM_API": f"http://{USERNAME}:{PASSWORD}@127.0.0.1:{self.port}",
            }
        )
        self.env = env
        self.procs: dict[str, subprocess.Popen] = {}
        self.token: str | None = None

    # -- processes ---------------------------------------------------------------------------
    def setup(self) -> None:
        ensure_airflow(self.paths, self.env, self.logs_dir / "setup.log")  # migrate + pool, as make demo does

    def start(self) -> None:
        self.setup()
        # the deployment's local settings (docker/): the scheduler pre-imports the pipeline
        config = self.paths["airflow_home"] / "config"
        config.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "docker" / "airflow_local_settings.py", config / "airflow_local_settings.py")
        commands = {
            "api-server": [
                AIRFLOW,
                "api-server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            "scheduler": [AIRFLOW, "scheduler"],
            "dag-processor": [AIRFLOW, "dag-processor"],
        }
        for name, cmd in commands.items():
            log = (self.logs_dir / f"{name}.log").open("w", encoding="utf-8")
            self.procs[name] = subprocess.Popen(
                cmd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.base,
                preexec_fn=_die_with_parent,
            )
            log.close()

    def stop(self) -> None:  # a killed pytest never gets here: see _die_with_parent
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    def tails(self, lines: int = 40) -> str:
        out = []
        for path in sorted(self.logs_dir.glob("*.log")):
            text = path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
            out.append(f"----- {path.name} (last {lines} lines)\n" + "\n".join(text))
        return "\n".join(out)

    def check_alive(self) -> None:
        dead = {name: p.returncode for name, p in self.procs.items() if p.poll() is not None}
        assert not dead, f"Airflow process(es) exited: {dead}\n{self.tails()}"

    # -- REST API ----------------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, token: bool = True) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if token and self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        try:
            return status, json.loads(raw) if raw else None
        except json.JSONDecodeError:
            return status, raw.decode(errors="replace")

    def wait_until(self, what: str, condition, timeout: float, interval: float = 2.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            try:
                result = condition()
            except (urllib.error.URLError, ConnectionError, OSError):
                result = None
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{self.tails()}")
            time.sleep(interval)

    def login(self) -> None:
        self.wait_until(
            "the api-server",
            lambda: self.request("GET", "/api/v2/monitor/health", token=False)[0] == 200,
            120,
        )
        # what compose's api-server healthcheck asks before the scheduler may start: the execution
        # API builds its versioned routes on its first request (seconds, blocking the server),
        # which would otherwise fall on the first task of the first run (issue 28, item 6)
        for path in api_server_health_paths():
            status, body = self.request("GET", path, token=False)
            assert status == 200, (path, status, body)
        status, body = self.request(
            "POST", "/auth/token", {"username": USERNAME, "password": PASSWORD}, token=False
        )
        assert status == 201 and body.get("access_token"), (status, body)
        self.token = body["access_token"]

    def unpause(self, dag_id: str) -> None:
        self.wait_until(
            f"the dag-processor to parse {dag_id}",
            lambda: self.request("GET", f"/api/v2/dags/{dag_id}")[0] == 200,
            120,
        )
        status, body = self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        assert status == 200 and body["is_paused"] is False, (status, body)

    def trigger(self, conf: dict[str, Any]) -> tuple[int, Any]:
        return self.request("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None, "conf": conf})

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = RUN_TIMEOUT) -> str:
        """The run's final state; AssertionError (with the logs' tails) after ``timeout`` seconds
        (default :data:`RUN_TIMEOUT`, sized for the tests' small corpora; a benchmark's runs pass
        their own)."""

        def finished() -> str | None:
            status, body = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            return body["state"] if status == 200 and body["state"] in ("success", "failed") else None

        return self.wait_until(f"run {run_id} of {dag_id}", finished, timeout, interval=3)

    def newest_run(self, dag_id: str) -> dict[str, Any]:
        def newest() -> dict[str, Any] | None:
            status, body = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=-run_after&limit=1")
            runs = body.get("dag_runs", []) if status == 200 else []
            return runs[0] if runs else None

        return self.wait_until(f"a run of {dag_id}", newest, 60)

    def task_states(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        status, body = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")
        assert status == 200, body
        return {ti["task_id"]: ti for ti in body["task_instances"]}


#: Fields whose visibility the form test checks: essentials (open) and section fields (folded).
FORM_PROBES = ("dataset", "input", "epsilon", "delta", "max_n", "lifetime_epsilon", "bayes_S", "memory_limit")


def _ui_login(page, airflow: Airflow) -> None:
    page.goto(f"{airflow.url}/")
    page.fill("input[name=username]", USERNAME)
    page.fill("input[name=password]", PASSWORD)
    page.keyboard.press("Enter")
    page.wait_for_url(f"{airflow.url}/", timeout=60_000)


def _screenshots(base: Path) -> Path:
    shots = Path(os.environ.get("DPNGRAM_SCREENSHOTS", str(base / "screenshots")))
    shots.mkdir(parents=True, exist_ok=True)
    return shots


#: The nodes of the graph view whose places show the fan-out after the DPNE group.
FAN_OUT = ("lm_counts", "bayes", "synth")
#: The window the graph is looked at in: a common laptop screen.
GRAPH_VIEWPORT = {"width": 1440, "height": 900}
#: The smallest readable label at default zoom: 11 px text.
MIN_LABEL_FONT_PX = 11

#: The Params of the vocabulary's new-words round (issue 52), in the order the form shows them.
NEW_WORDS = ("dpsu_new_words", "dpsu_new_words_share")
#: From a form field to the (Chakra) accordion item of its section.
SECTION_OF_FIELD = "xpath=ancestor::*[@data-scope='accordion' and @data-part='item'][1]"


def look_at_the_new_words_params(page, airflow: Airflow, shots: Path) -> dict[str, Any]:
    """A fresh trigger form: where the new-words Params are (hidden while their section is folded,
    then in *Privacy details*), what each row shows (label, description, default), what the
    widget makes of a negative m, and the refusal of a share of 1.5 (saved as
    ``trigger_form_new_words.png``)."""
    page.goto(f"{airflow.url}/dags/{DAG_ID}")
    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text("Run Parameters").wait_for(timeout=60_000)
    fields = {name: dialog.locator(f"[name=element_{name}]") for name in NEW_WORDS}
    out: dict[str, Any] = {"visible_folded": {name: field.is_visible() for name, field in fields.items()}}
    dialog.get_by_role("button", name="Privacy details").click()
    fields["dpsu_new_words"].wait_for(state="visible", timeout=30_000)
    out["section_text"] = fields["dpsu_new_words"].locator(SECTION_OF_FIELD).inner_text()
    out["rows"] = {}
    for name, field in fields.items():
        item = field.locator(SECTION_OF_FIELD)
        row = field.locator("xpath=ancestor::*[@data-scope='field' and @data-part='root'][1]")
        out["rows"][name] = {
            "section": item.locator("[data-part=item-trigger]").first.inner_text().strip(),
            "text": " ".join(row.inner_text().split()),
            "value": field.input_value(),
            "visible": field.is_visible(),
        }
    # Airflow's number widget clamps a value outside inclusive bounds when the field loses focus
    fields["dpsu_new_words"].fill("-1")
    fields["dpsu_new_words"].press("Tab")
    out["negative_m_becomes"] = fields["dpsu_new_words"].input_value()
    # exclusive bounds are not clamped: the form sends the value and the API refuses it
    fields["dpsu_new_words_share"].fill("1.5")
    fields["dpsu_new_words_share"].press("Tab")
    out["share_sent"] = fields["dpsu_new_words_share"].input_value()
    dialog.get_by_role("button", name="Trigger").click()
    dialog.get_by_text("Invalid input for param dpsu_new_words_share").wait_for(timeout=60_000)
    out["refused_dialog"] = dialog.inner_text()
    out["refused_dialog_open"] = dialog.is_visible()
    page.screenshot(path=str(shots / "trigger_form_new_words.png"))
    return out


def look_in_the_browser(airflow: Airflow, base: Path, malformed_run_id: str) -> dict[str, Any]:
    """What an operator sees in the UI after the runs (issue 28): the ``ingest`` task's log page
    of the malformed run, the Assets page, the release DAG's graph view at default zoom (saved as
    ``graph.png``), the trigger form refusing ``{"dpne": 2}``, and the new-words Params
    (:func:`look_at_the_new_words_params`). Returns what the tests check."""
    import urllib.parse

    from conftest import CHROMIUM_ARGS
    from playwright.sync_api import sync_playwright

    shots = _screenshots(base)
    out: dict[str, Any] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            _ui_login(page, airflow)
            # 1. the malformed run's ingest log, as the UI renders it (the Logs tab is the default)
            run = urllib.parse.quote(malformed_run_id, safe="")
            page.goto(f"{airflow.url}/dags/{DAG_ID}/runs/{run}/tasks/ingest")
            page.get_by_text("rows read were quarantined").first.wait_for(timeout=60_000)
            out["ingest_log_page"] = page.inner_text("body")
            page.screenshot(path=str(shots / "ingest_log.png"))
            # 2. the Assets page lists each dataset's assets under their own names
            page.goto(f"{airflow.url}/assets")
            page.get_by_text("dpngram_standalone_ngrams").first.wait_for(timeout=60_000)
            out["assets_page"] = page.inner_text("body")
            # 3. the graph view at its default zoom (fit to the panel), details panel as it opens,
            # in a common laptop window
            page.set_viewport_size(GRAPH_VIEWPORT)
            page.goto(f"{airflow.url}/dags/{DAG_ID}")
            page.get_by_role("button", name="Show Graph (Press g)").click()
            page.locator(".react-flow__node").first.wait_for(timeout=60_000)
            page.wait_for_timeout(2000)  # the fit-view animation
            out["graph_nodes"] = {
                node.get_attribute("data-id"): node.bounding_box()
                for node in page.locator(".react-flow__node").all()
            }
            # what one task label measures on screen at default zoom (CSS px): its font size times
            # the view's scale, and its line box
            label = page.locator(".react-flow__node[data-id=lm_counts]").get_by_text("LM counts")
            out["graph_label_px"] = label.bounding_box()["height"]
            out["graph_label_font_px"] = label.evaluate(
                """element => {
                    const viewport = element.closest('.react-flow__viewport');
                    const scale = new DOMMatrixReadOnly(getComputedStyle(viewport).transform).a;
                    return parseFloat(getComputedStyle(element).fontSize) * scale;
                }"""
            )
            out["graph_text"] = page.locator(".react-flow").inner_text()
            out["graph_screenshot"] = str(shots / "graph.png")
            page.screenshot(path=out["graph_screenshot"])
            page.set_viewport_size({"width": 1400, "height": 1000})
            # 4. the trigger form with a budget fraction above 1: the form sends it, the API refuses
            # it (Param schema), the dialog shows the error and stays open; no run is created
            page.get_by_role("button", name="Trigger").first.click()
            dialog = page.get_by_role("dialog")
            dialog.get_by_text("Run Parameters").wait_for(timeout=60_000)
            dialog.locator("#element_stage_budget .view-lines").click()  # a Monaco JSON editor
            page.keyboard.press("Control+A")
            # typed, not pasted: Monaco closes brackets and quotes, and typing over them keeps the
            # text exact; anything after the cursor is then removed
            page.keyboard.type('{"dpne": 2}')
            page.keyboard.press("Shift+Control+End")
            page.keyboard.press("Delete")
            # Monaco renders indentation with no-break spaces
            editor = dialog.locator("#element_stage_budget .view-lines").inner_text()
            out["refused_editor"] = editor.replace("\xa0", " ")
            dialog.get_by_role("button", name="Trigger").click()
            dialog.get_by_text("Invalid input for param stage_budget").wait_for(timeout=60_000)
            out["refused_dialog"] = dialog.inner_text()
            page.screenshot(path=str(shots / "trigger_form_refused.png"))
            out["refused_dialog_open"] = dialog.is_visible()
            # 5. the vocabulary's new-words Params, in a fresh form
            out["new_words"] = look_at_the_new_words_params(page, airflow, shots)
        finally:
            browser.close()
    return out


def trigger_with_the_form(airflow: Airflow, base: Path) -> dict[str, Any]:
    """Log in to the UI, open the release DAG's trigger form, record what it shows, save a
    screenshot, and trigger with every default. Returns what the form tests check."""
    from conftest import CHROMIUM_ARGS
    from playwright.sync_api import sync_playwright

    shots = _screenshots(base)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            _ui_login(page, airflow)
            page.goto(f"{airflow.url}/dags/{DAG_ID}")
            page.get_by_role("button", name="Trigger").first.click()
            dialog = page.get_by_role("dialog")
            dialog.get_by_text("Run Parameters").wait_for(timeout=60_000)
            dialog.get_by_text("Dataset name").wait_for()
            form = {
                "text": dialog.inner_text(),
                # field labels carry a red star when Airflow considers them required
                "required": sorted(
                    label.strip().removesuffix("*").strip()
                    for label in dialog.locator("label:has(span)").all_inner_texts()
                    if label.strip().endswith("*")
                ),
                "visible_fields": [
                    name
                    for name in (
                        "dataset",
                        "input",
                        "epsilon",
                        "delta",
                        "stage_budget",
                        "max_n",
                        "bayes_S",
                        "engine",
                    )
                    if dialog.locator(f"[name=element_{name}]").is_visible()
                ],
                "screenshot": str(shots / "trigger_form.png"),
            }
            page.set_viewport_size({"width": 1400, "height": 2600})  # the whole dialog, sections folded
            page.wait_for_timeout(500)
            page.screenshot(path=form["screenshot"])
            dialog.get_by_role("button", name="Trigger").click()
            dialog.wait_for(state="hidden", timeout=60_000)
        finally:
            browser.close()
    return form


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> dict[str, Any]:
    """Start Airflow, run the scenario of the module docstring, stop Airflow; the tests check it."""
    base = tmp_path_factory.mktemp("standalone")
    corpus = write_marker_corpus(base / "data")
    airflow = Airflow(base)
    airflow.env["DPNGRAM_CONSUMER_TEXT"] = str(corpus["heldout"])  # the consumer's held-out text
    airflow.env["DPNGRAM_CONSUMER_DATASET"] = "standalone"  # the one dataset the consumer follows
    out = {"airflow": airflow, "corpus": corpus, "base": base}
    # the deployment's Param defaults: paths, a small T, and a lifetime budget with room for one
    # run at the default epsilon (4), not two. Everything else is RunConfig's default.
    conf = {
        "dataset": "standalone",
        "input": str(corpus["users"]),
        "public": str(corpus["public"]),
        "out": str(base / "releases"),
        "warehouse": str(base / "warehouse.duckdb"),
        "max_n": 2,
        "lifetime_epsilon": 6.0,
    }
    airflow.env["DPNGRAM_PARAMS"] = json.dumps(conf)
    # the consumer follows the assets of the releases under the deployment's OUT (their URIs name it)
    airflow.env["DPNGRAM_OUT"] = conf["out"]
    out["conf"] = conf
    try:
        airflow.start()
        airflow.login()
        airflow.unpause(DAG_ID)
        # the consumer is unpaused at creation (is_paused_upon_creation=False), although this
        # deployment pauses new DAGs by default: nobody has to remember to unpause it
        airflow.wait_until(
            f"the dag-processor to parse {CONSUMER_ID}",
            lambda: airflow.request("GET", f"/api/v2/dags/{CONSUMER_ID}")[0] == 200,
            120,
        )
        status, consumer = airflow.request("GET", f"/api/v2/dags/{CONSUMER_ID}")
        assert status == 200 and consumer["is_paused"] is False, (status, consumer)

        if chromium_path() is not None:
            out["form"] = trigger_with_the_form(airflow, base)
            run = airflow.newest_run(DAG_ID)
        else:
            out["form"] = None
            status, run = airflow.trigger({})  # what the form sends when every default is kept
            assert status == 200, (status, run)
        out["run"] = run
        out["state"] = airflow.wait_for_run(DAG_ID, run["dag_run_id"])
        out["tasks"] = airflow.task_states(DAG_ID, run["dag_run_id"])

        def consumer_runs() -> list[dict[str, Any]] | None:
            status, body = airflow.request("GET", f"/api/v2/dags/{CONSUMER_ID}/dagRuns")
            runs = body.get("dag_runs", []) if status == 200 else []
            done = [r for r in runs if r["state"] in ("success", "failed")]
            return done or None

        if out["state"] == "success":
            out["consumer_runs"] = airflow.wait_until(
                "the consumer DAG run", consumer_runs, RUN_TIMEOUT, interval=3
            )
            consumer = out["consumer_runs"][0]
            status, xcom = airflow.request(
                "GET",
                f"/api/v2/dags/{CONSUMER_ID}/dagRuns/{consumer['dag_run_id']}/taskInstances/perplexity/"
                "xcomEntries/return_value?deserialize=true",
            )
            out["consumer_xcom"] = (status, xcom)

        # After the consumer run has started: Airflow 3.3's /assets/events answers 500 while an
        # event's triggered run is still queued (its start_date is None, which the response model
        # rejects), as happened under load.
        status, events = airflow.request("GET", f"/api/v2/assets/events?source_dag_id={DAG_ID}&limit=50")
        assert status == 200, events
        out["events"] = events["asset_events"]

        # a second run of the same dataset would take it past lifetime_epsilon
        status, second = airflow.trigger({})
        assert status == 200, (status, second)
        out["second_run"] = second
        out["second_state"] = airflow.wait_for_run(DAG_ID, second["dag_run_id"])
        out["second_tasks"] = airflow.task_states(DAG_ID, second["dag_run_id"])

        out["invalid"] = airflow.trigger({"epsilon": -1})

        # issue 28: the budget split's bounds are refused at trigger time, and no run is created
        def run_count() -> int:
            return airflow.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?limit=1")[1]["total_entries"]

        before = run_count()
        out["bad_budgets"] = [
            airflow.trigger({"stage_budget": b}) for b in ({"dpne": 2}, {"nosuchstage": 0.5})
        ]
        out["run_counts"] = (before, run_count())
        # issue 28: a mostly malformed input (another dataset: its budget is untouched) is refused at
        # ingest, with the reason in the run's note and the quarantine summary in the task log
        status, malformed = airflow.trigger(
            {"dataset": "standalone-malformed", "input": str(corpus["malformed"])}
        )
        assert status == 200, (status, malformed)
        # issue 28: a second dataset, queued at the same time (the pool runs one task at a time):
        # its own `latest` and assets, and the consumer (which follows 'standalone') stays idle
        status, other = airflow.trigger({"dataset": OTHER_DATASET, "stage_budget": OTHER_SPLIT})
        assert status == 200, (status, other)
        out["other_run"] = other
        out["malformed_run"] = malformed
        out["malformed_state"] = airflow.wait_for_run(DAG_ID, malformed["dag_run_id"])
        out["malformed_tasks"] = airflow.task_states(DAG_ID, malformed["dag_run_id"])
        out["other_state"] = airflow.wait_for_run(DAG_ID, other["dag_run_id"])
        status, events = airflow.request("GET", f"/api/v2/assets/events?source_dag_id={DAG_ID}&limit=100")
        assert status == 200, events
        out["all_events"] = events["asset_events"]

        # /api/v2/assets lists an asset first emitted through an alias only once the dag-processor
        # has re-parsed the DAG (seconds to a minute), and a re-parse between two of the run's
        # events registers only the assets emitted so far: wait for every one of the other
        # dataset's (waiting for any one of them let the language model's be missing)
        from dpngram.release.publish import ASSET_KINDS, asset_key

        wanted = {asset_key(OTHER_DATASET, kind, conf["out"])[1] for kind in ASSET_KINDS}

        def registered() -> list[dict[str, Any]] | None:
            status, body = airflow.request("GET", "/api/v2/assets?limit=100")
            assets = body.get("assets", []) if status == 200 else []
            return assets if wanted <= {a["uri"] for a in assets} else None

        out["assets"] = airflow.wait_until("the other dataset's assets in /api/v2/assets", registered, 180)
        if chromium_path() is not None:
            before_form = run_count()
            out["browser"] = look_in_the_browser(airflow, base, malformed["dag_run_id"])
            out["run_counts_form"] = (before_form, run_count())
        else:
            out["browser"] = None
        status, body = airflow.request("GET", f"/api/v2/dags/{CONSUMER_ID}/dagRuns")
        out["consumer_runs_final"] = body.get("dag_runs", []) if status == 200 else None
        out["notes"] = {
            name: airflow.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{out[name]['dag_run_id']}")[1].get(
                "note"
            )
            for name in ("second_run", "malformed_run")
        }
        out["tails"] = airflow.tails()
    finally:
        airflow.stop()
    out["tails"] = airflow.tails()
    return out


def _detail(session: dict[str, Any]) -> str:
    return session.get("tails", "")


def _release(session: dict[str, Any]) -> Path:
    return Path(session["conf"]["out"]) / "standalone" / "runs" / run_id_from(session["run"]["dag_run_id"])


def test_release_triggered_through_the_rest_api_publishes(session):
    assert session["state"] == "success", _detail(session)
    states = {t: ti["state"] for t, ti in session["tasks"].items()}
    assert states["publish"] == "success" and states["publish_lm"] == "success", states
    release = _release(session)
    assert (Path(session["conf"]["out"]) / "standalone" / "latest").resolve() == release
    for name in (
        "report.json",
        "released/vocabulary.parquet",
        "released/kgrams.parquet",
        "model/model.binary",
    ):
        assert (release / name).is_file(), name
    report = json.loads((release / "report.json").read_text())
    assert report["run_id"] == release.name and report["validation"]["success"] is True
    assert report["parameters"]["dataset"] == "standalone" and report["parameters"]["max_n"] == 2
    assert report["privacy"]["total"]["epsilon"] <= 4.0 * (1 + 1e-6)


def test_the_trigger_form_shows_the_essentials_first_with_bounds(session):
    form = session["form"]
    if form is None:
        pytest.skip("no chromium binary on PATH: the form was not opened (run triggered by the API)")
    text = form["text"]
    # the essentials are in the open first section; everything else is folded into sections
    assert form["visible_fields"] == ["dataset", "input", "epsilon", "delta", "max_n"]
    for section in ("Privacy details", "Input and storage", "Language model", "Engine"):
        assert section in text, section
    assert text.index("Budget split") < text.index("Privacy details")
    # bounds are shown, and only what has no default is marked required
    assert "Allowed: 0 < value ≤ 100." in text and "Allowed: 1 ≤ value ≤ 12." in text
    assert form["required"] == ["Input path", "Output directory"]
    assert Path(form["screenshot"]).stat().st_size > 10_000


def test_asset_events_carry_release_metadata_and_trigger_the_consumer(session):
    assert session["state"] == "success", _detail(session)
    release = _release(session)
    by_uri = {e["uri"]: e for e in session["events"] if e["extra"].get("run_id") == release.name}
    # one set of assets per dataset: this run's dataset is 'standalone'; each URI is where the
    # dataset's latest release keeps that part
    latest = "file://" + str(Path(session["conf"]["out"]).resolve() / "standalone" / "latest")
    ngrams_uri, release_uri, model_uri = f"{latest}/released", latest, f"{latest}/model"
    assert set(by_uri) == {ngrams_uri, release_uri, model_uri}, session["events"]
    assert {e["name"] for e in by_uri.values()} == {
        "dpngram_standalone_ngrams",
        "dpngram_standalone_release",
        "dpngram_standalone_language_model",
    }
    report = json.loads((release / "report.json").read_text())
    ngrams = by_uri[ngrams_uri]["extra"]
    assert ngrams["dataset"] == "standalone"
    assert ngrams["epsilon"] == pytest.approx(report["privacy"]["total"]["epsilon"])
    assert ngrams["delta"] == pytest.approx(session["conf"].get("delta", 1e-7))
    assert 0 < ngrams["ledger_epsilon"] <= 4.0 * (1 + 1e-6)
    assert ngrams["paths"]["kgrams"] == str(release / "released" / "kgrams.parquet")
    import pyarrow.parquet as pq

    for name, path in ngrams["paths"].items():
        assert ngrams["released_rows"][name] == pq.ParquetFile(path).metadata.num_rows, name
    model = by_uri[model_uri]["extra"]
    assert model["paths"]["binary"] == str(release / "model" / "model.binary")
    # with the SHA-256 the release's manifest records, which the consumer checks
    manifest = json.loads((release / "MANIFEST.json").read_text())
    assert model["sha256"]["binary"] == manifest["files"]["model/model.binary"]["sha256"]
    assert model["order"] == report["model"]["order"]

    (consumer,) = session["consumer_runs"]
    assert consumer["state"] == "success" and consumer["run_type"] == "asset_triggered", consumer
    status, xcom = session["consumer_xcom"]
    assert status == 200, xcom
    value = xcom["value"] if isinstance(xcom["value"], dict) else json.loads(xcom["value"])
    assert value["run_id"] == release.name and value["model"] == model["paths"]["binary"]
    assert value["perplexity"] > 1 and 0 <= value["oov_rate"] <= 1
    # scored on held-out text, checked against the training corpus, beside the release's verdict
    assert model["training_corpus"] == session["conf"]["public"]
    heldout = session["corpus"]["heldout"]
    assert (
        value["text"]["path"] == str(heldout)
        and value["text"]["sentences"] > 0
        and value["text"]["tokens"] > 0
    )
    assert value["text"]["sha256"] == hashlib.sha256(heldout.read_bytes()).hexdigest()
    assert value["overlap"]["fraction"] <= 0.01 and value["refused"] is None
    verdict = report["model"].get("private_domain") or {}
    assert (value["release_verdict"] or {}).get("epsilon") == verdict.get("epsilon")
    recorded = json.loads((session["base"] / "consumer-out" / f"{release.name}.json").read_text())
    assert recorded == value


def test_second_run_over_the_lifetime_budget_fails_at_the_precheck(session):
    assert session["second_state"] == "failed", _detail(session)
    tasks = session["second_tasks"]
    assert tasks["privacy_precheck"]["state"] == "failed"
    assert tasks["privacy_precheck"]["try_number"] == 1  # TaskRefused: the retry policy fails it at once
    assert tasks["ingest"]["state"] == "upstream_failed"
    assert all(ti["state"] in ("upstream_failed", None) for t, ti in tasks.items() if t != "privacy_precheck")
    run_id = run_id_from(session["second_run"]["dag_run_id"])
    logs = session["airflow"].paths["airflow_home"] / "logs"
    precheck_logs = [
        p
        for p in logs.rglob("*")
        if p.is_file()
        and "privacy_precheck" in str(p)
        and session["second_run"]["dag_run_id"].split("+")[0][:19] in str(p)
    ]
    text = "\n".join(p.read_text(errors="replace") for p in precheck_logs)
    assert "privacy pre-check refused the run: dataset 'standalone' has spent epsilon=" in text, precheck_logs
    # a refusal is one line, not a traceback: Airflow records "Task exited" for TaskRefused (a
    # SystemExit) and attaches no exception detail (AirflowFailException would carry one)
    assert "Task exited" in text and "error_detail" not in text and "Traceback" not in text, text[-3000:]
    # nothing was read: no staged release, no private tables (the run's own DuckDB file)
    assert not (Path(session["conf"]["out"]) / "standalone" / "runs" / f"{run_id}.staging").exists()
    assert not (Path(session["conf"]["warehouse"]) / "runs" / f"{run_id}.duckdb").exists()
    assert (Path(session["conf"]["out"]) / "standalone" / "latest").resolve() == _release(session)


def _task_log(session: dict[str, Any], run: dict[str, Any], task_id: str) -> str:
    logs = session["airflow"].paths["airflow_home"] / "logs"
    stamp = run["dag_run_id"].split("+")[0][:19]
    paths = [p for p in logs.rglob("*") if p.is_file() and f"task_id={task_id}" in str(p) and stamp in str(p)]
    return "\n".join(p.read_text(errors="replace") for p in paths)


def test_refusals_are_in_the_runs_note(session):
    """Airflow 3's task API cannot write a note; the refusing task writes it through the REST API."""
    note = session["notes"]["second_run"]
    assert note and note.startswith("Refused at privacy_precheck: privacy pre-check refused the run: "), note
    assert "dataset 'standalone' has spent epsilon=" in note


def test_budget_split_bounds_are_refused_at_trigger_time(session):
    (too_big, unknown) = session["bad_budgets"]
    assert too_big[0] == 400 and "maximum" in json.dumps(too_big[1]), too_big
    assert unknown[0] == 400 and "nosuchstage" in json.dumps(unknown[1]), unknown
    before, after = session["run_counts"]
    assert after == before  # no run was created


def test_a_mostly_malformed_input_is_refused_at_ingest_with_nothing_reserved(session):
    assert session["malformed_state"] == "failed", _detail(session)
    tasks = session["malformed_tasks"]
    assert tasks["privacy_precheck"]["state"] == "success"
    assert tasks["ingest"]["state"] == "failed" and tasks["ingest"]["try_number"] == 1  # no retry
    log = _task_log(session, session["malformed_run"], "ingest")
    # the quarantine summary `dpngram run` prints, and the one-line refusal
    assert f"quarantine: {MALFORMED_LINES} of {MALFORMED_LINES + 100} rows read were quarantined" in log, log[
        -3000:
    ]
    assert "malformed_json  the line is not valid JSON" in log
    assert (
        f"ingest refused the input: {MALFORMED_LINES} of {MALFORMED_LINES + 100} rows were quarantined" in log
    )
    assert "its budget reservation was released" in log and "Traceback" not in log
    # the note says why without exact counts (more people read notes than task logs)
    note = session["notes"]["malformed_run"]
    assert note.startswith(
        "Refused at ingest: ingest refused the input: more than max_quarantine_fraction 0.05"
    )
    assert f"{MALFORMED_LINES} of" not in note and "malformed_json" not in note, note
    assert "budget reservation was released" in note, note
    # nothing is reserved or charged for the dataset (the ledger the tasks used: the per-user one)
    from dpngram.release.ledger import open_ledger

    with open_ledger() as ledger:
        state = ledger.run(run_id_from(session["malformed_run"]["dag_run_id"]))["state"]
        charged = ledger.entries("standalone-malformed")
    assert state == "suspended" and charged == []


def _browser(session: dict[str, Any]) -> dict[str, Any]:
    if session.get("browser") is None:
        pytest.skip("no chromium binary on PATH: the UI pages were not opened")
    return session["browser"]


def test_the_quarantine_summary_is_in_the_ingest_log_in_the_ui(session):
    """The malformed run's `ingest` task page, as the UI renders its log: the same summary
    `dpngram run` prints (counts per reason) and the one-line refusal."""
    page = _browser(session)["ingest_log_page"]
    total = MALFORMED_LINES + 100
    summary = f"quarantine: {MALFORMED_LINES} of {total} rows read were quarantined (20.0%)"
    assert summary in page, page[-3000:]
    assert "malformed_json" in page and "the line is not valid JSON" in page
    assert f"ingest refused the input: {MALFORMED_LINES} of {total} rows were quarantined" in page


def test_two_datasets_have_separate_latest_and_assets(session):
    from dpngram.release.publish import ASSET_KINDS, asset_key

    assert session["other_state"] == "success", _detail(session)
    out = Path(session["conf"]["out"])
    other = out / OTHER_DATASET / "runs" / run_id_from(session["other_run"]["dag_run_id"])
    # each dataset's latest points at its own release: the later run did not move 'standalone'
    assert (out / "standalone" / "latest").resolve() == _release(session)
    assert (out / OTHER_DATASET / "latest").resolve() == other
    assert (other / "model" / "model.binary").is_file()
    # one set of assets per dataset (REST API /api/v2/assets), each run's events on its own set
    registered = {a["uri"] for a in session["assets"]}
    for dataset in ("standalone", OTHER_DATASET):
        mine = {asset_key(dataset, kind, out)[1] for kind in ASSET_KINDS}
        assert mine <= registered, (dataset, registered)
    fired = {
        run: {e["uri"] for e in session["all_events"] if e["extra"].get("run_id") == run}
        for run in (_release(session).name, other.name)
    }
    assert fired[other.name] == {asset_key(OTHER_DATASET, kind, out)[1] for kind in ASSET_KINDS}, fired
    assert fired[_release(session).name] == {asset_key("standalone", kind, out)[1] for kind in ASSET_KINDS}
    # the URIs name where the dataset's latest release keeps each part (OUT/DATASET/latest/...)
    assert (
        asset_key("standalone", "language_model", out)[1] == f"file://{out.resolve()}/standalone/latest/model"
    )
    # the consumer follows 'standalone' only: the other dataset's model did not trigger it
    assert len(session["consumer_runs_final"]) == 1, session["consumer_runs_final"]
    browser = session.get("browser")
    if browser is not None:  # the UI's Assets page lists both datasets' assets by name
        for dataset in ("standalone", OTHER_DATASET):
            for kind in ASSET_KINDS:
                assert asset_key(dataset, kind, out)[0] in browser["assets_page"], (dataset, kind)


def test_budget_split_above_one_is_refused_in_the_trigger_form(session):
    """In the browser: {"dpne": 2} typed into the form's Budget split, *Trigger* clicked. The form
    sends it, the API refuses it with the Param schema's message, the dialog stays open with it,
    and no run is created."""
    browser = _browser(session)
    assert json.loads(browser["refused_editor"]) == {"dpne": 2}, browser["refused_editor"]
    dialog = browser["refused_dialog"]
    assert "Invalid input for param stage_budget: 2 is greater than the maximum of 1" in dialog, dialog
    assert browser["refused_dialog_open"] is True
    before, after = session["run_counts_form"]
    assert after == before, (before, after)


def test_the_new_words_params_are_explained_beside_the_vocabulary_in_the_trigger_form(session):
    """In the browser: the new-words round's two Params are folded away with the other vocabulary
    knobs in *Privacy details*, right after *Public vocabulary domain*, each with the label and
    description of the Param schema (off by default, what it costs, that the share only matters
    when the round is on, the bounds) and its default; a negative m is clamped to 0 (off) by the
    number widget, and a share of 1.5 is refused at trigger time with the schema's message, the
    dialog staying open and no run created."""
    from dpngram.orchestration.form import PRIVACY, form_params

    browser = _browser(session)
    seen = browser["new_words"]
    params = form_params({})
    assert seen["visible_folded"] == dict.fromkeys(NEW_WORDS, False), seen["visible_folded"]
    rows = seen["rows"]
    for name, default in zip(NEW_WORDS, ("10", "0.25"), strict=True):
        row = rows[name]
        assert row["section"] == PRIVACY and row["visible"], (name, row)
        assert row["value"] == default, (name, row["value"])
        shown = f"{params[name]['title']} {params[name]['description']}"
        assert row["text"] == " ".join(shown.split()), (name, row["text"])
    # what a newcomer needs, in the words the page shows
    m_text, share_text = rows["dpsu_new_words"]["text"], rows["dpsu_new_words_share"]["text"]
    assert "(0: off)" in m_text and m_text.rstrip().endswith("0: off. Allowed: 0 ≤ value ≤ 10 000."), m_text
    assert "Without a public domain the round does not run." in m_text, m_text
    assert "somewhat fewer" in m_text and "docs/lm.md, 'Benchmark'" in m_text, m_text
    assert share_text.startswith("New-words round: budget share Only used when the new-words round runs"), (
        share_text
    )
    assert share_text.endswith("Allowed: 0 < value < 1."), share_text
    # beside the related vocabulary Params, in this order
    text = seen["section_text"]
    order = [
        text.index("Public vocabulary domain"),
        text.index(params["dpsu_new_words"]["title"]),
        text.index(params["dpsu_new_words_share"]["title"]),
        text.index("Threshold share of delta"),
    ]
    assert order == sorted(order), order
    # out of range: clamped (m), or refused before a run exists (the share)
    assert seen["negative_m_becomes"] == "0", seen["negative_m_becomes"]
    assert seen["share_sent"] == "1.5"
    dialog = seen["refused_dialog"]
    assert (
        "Invalid input for param dpsu_new_words_share: 1.5 is greater than or equal to the maximum of 1"
        in dialog
    ), dialog
    assert seen["refused_dialog_open"] is True
    before, after = session["run_counts_form"]
    assert after == before, (before, after)


def test_the_graph_fans_out_after_the_dpne_group_readable_at_default_zoom(session):
    """The graph view at default zoom in a 1440x900 window: the folded groups Prepare, N-grams
    (DPNE) and Release, and between the last two LM counts, Bayesian trigram distribution and
    Synthetic text side by side in one column, under their plain names, with labels of at least
    11 px (they were ~6 px with every task drawn). The screenshot is docs/screenshots/graph.png
    (DPNGRAM_SCREENSHOTS=docs/screenshots)."""
    from dpngram.orchestration.plan import GROUP_LABELS, graph_groups

    browser = _browser(session)
    nodes = browser["graph_nodes"]
    for label in ("LM counts", "Bayesian trigram distribution", "Synthetic text", *GROUP_LABELS.values()):
        assert label in browser["graph_text"], label
    # the groups are drawn folded: one node each, none of their tasks
    groups = graph_groups()
    assert set(nodes) == set(groups) | set(FAN_OUT), sorted(nodes)
    centre = {node: nodes[node]["x"] + nodes[node]["width"] / 2 for node in nodes}
    ys = sorted(nodes[task]["y"] for task in FAN_OUT)
    assert max(centre[t] for t in FAN_OUT) - min(centre[t] for t in FAN_OUT) < 2  # one column
    assert ys[1] - ys[0] > 10 and ys[2] - ys[1] > 10  # stacked, not overlapping
    assert (
        centre["prepare"]
        < centre["dpne"]
        < min(centre[t] for t in FAN_OUT)
        <= max(centre[t] for t in FAN_OUT)
        < centre["release"]
    )
    assert Path(browser["graph_screenshot"]).stat().st_size > 10_000
    font, line = browser["graph_label_font_px"], browser["graph_label_px"]
    print(f"graph label at default zoom: {font:.1f} px text, {line:.1f} px line box")
    assert font >= MIN_LABEL_FONT_PX, f"labels are {font:.1f} px at default zoom: unreadable"
    assert line >= 1.2 * MIN_LABEL_FONT_PX, line  # the line box agrees with the font size


def test_invalid_conf_is_rejected_by_the_api_with_the_param_error(session):
    status, body = session["invalid"]
    assert status == 400, (status, body)
    detail = json.dumps(body)
    assert "epsilon" in detail and ("-1" in detail or "minimum" in detail.lower()), detail


def _json_leaves(value: Any, key: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _json_leaves(v, k)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _json_leaves(v, key)]
    return [(key, value)]


def _ingested_counts(conf: dict[str, Any], work: Path) -> tuple[int, int, int, int, int]:
    """(users, documents, sentences, tokens, raw rows holding the marker) of the run's input as the
    run's ingest step stores them privately: derived again here, by the same step into a scratch
    warehouse, since a published run's own private tables are dropped at publish."""
    from dpngram.config import RunConfig
    from dpngram.release.context import RunContext
    from dpngram.release.publish import prepare
    from dpngram.stages.ingest import run_ingest

    values = {k: v for k, v in conf.items() if k not in ("out", "warehouse", "lifetime_epsilon", "dataset")}
    config = RunConfig.build(
        **values, out=str(work / "out"), warehouse=str(work / "scratch"), dataset="standalone-counts"
    )
    ctx = RunContext(prepare(config))
    run_ingest(ctx)
    schema = run_schema_name(ctx.run_id)
    with ctx.warehouse() as wh:
        con = wh.con
        marked = con.execute(
            f"SELECT count(*) FROM {schema}.raw_text WHERE text LIKE ?", [f"%{MARKER}%"]
        ).fetchone()
        users, docs = con.execute(
            f"SELECT count(DISTINCT user_id), count(*) FROM {schema}.raw_text"
        ).fetchone()
        sentences, tokens = con.execute(
            f"SELECT count(*), sum(len(tokens)) FROM {schema}.sentences"
        ).fetchone()
    return users, docs, sentences, tokens, marked[0]


def test_no_marker_or_exact_statistic_in_logs_xcom_or_release(session, tmp_path):
    assert session["state"] == "success", _detail(session)
    airflow = session["airflow"]
    run_id = run_id_from(session["run"]["dag_run_id"])
    # the marker reaches the private tables of a run on this input (so the checks below are not
    # vacuous), and the exact statistics below are what such a run holds privately
    n_users, n_docs, n_sentences, n_tokens, marked = _ingested_counts(session["conf"], tmp_path)
    assert marked == 1 and n_tokens > n_sentences > 0
    # the published run's own private tables (its DuckDB file) were deleted at publish
    assert not (Path(session["conf"]["warehouse"]) / "runs" / f"{run_id}.duckdb").exists()

    # logs: every file under AIRFLOW_HOME (task logs, dag-processor logs) and the processes' output
    scanned = [p for p in airflow.paths["airflow_home"].rglob("*") if p.is_file() and p.suffix != ".db"]
    scanned += list(airflow.logs_dir.glob("*.log"))
    assert any("logs" in p.parts for p in scanned)
    for path in scanned:
        data = path.read_bytes()
        assert MARKER.encode() not in data and MARKER_USER.encode() not in data, path
    # released files and the report
    for path in Path(session["conf"]["out"]).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert MARKER.encode() not in data and MARKER_USER.encode() not in data, path

    # XCom: no marker, and every number is epsilon/delta, a level k, or a released row count
    import pyarrow.parquet as pq

    with sqlite3.connect(airflow.paths["airflow_home"] / "airflow.db") as db:
        rows = db.execute("SELECT dag_id, run_id, task_id, value FROM xcom").fetchall()
    assert rows
    exact = {n_users, n_docs, n_sentences, n_tokens}
    # the published release of each run that returned released row counts (both datasets')
    releases = {session["run"]["dag_run_id"]: _release(session)}
    if "other_run" in session:
        other_id = session["other_run"]["dag_run_id"]
        releases[other_id] = Path(session["conf"]["out"]) / OTHER_DATASET / "runs" / run_id_from(other_id)
    for dag_id, dag_run_id, task_id, value in rows:
        text = value if isinstance(value, str) else bytes(value).decode(errors="replace")
        assert MARKER not in text and MARKER_USER not in text, (dag_id, task_id)
        payload = json.loads(text)
        if dag_id == CONSUMER_ID:
            continue  # public-text perplexity of a DP model
        for key, leaf in _json_leaves(payload):
            if isinstance(leaf, bool) or not isinstance(leaf, int | float):
                continue
            assert key in ("epsilon", "charged_epsilon", "delta", "k", "released_rows"), (task_id, key)
            if key == "released_rows":
                release = releases[dag_run_id]
                staged = payload["paths"][0]  # written while staged; published by a rename since
                path = release / staged if not Path(staged).is_absolute() else Path(staged)
                path = Path(str(path).replace(f"/{release.name}.staging/", f"/{release.name}/"))
                if path.suffix == ".parquet":
                    assert leaf == pq.ParquetFile(path).metadata.num_rows, task_id
                else:  # the language model: its n-gram count, as published in report.json
                    report = json.loads((release / "report.json").read_text())
                    assert task_id == "lm" and leaf == sum(report["model"]["counts"].values())
            elif key == "k":
                assert 1 <= leaf <= 12
            else:
                assert leaf not in exact or isinstance(leaf, float), (task_id, key)
