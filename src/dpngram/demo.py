"""``dpngram demo`` / ``make demo``: a synthetic corpus released through the real Airflow DAG.

Idempotent set-up, then one DAG run:

1. the synthetic sample corpus (:func:`dpngram.text.sample.write_sample`, fixed seed) is written to
   ``<repo>/.dpngram/sample/`` unless it is already there with the same size and seed: the users
   the run ingests, a public corpus and :data:`DEMO_HELDOUT_USERS` held-out users of the same
   private-domain generator whose text (``heldout_users.txt``, one document a line) the run never
   ingests and receives as ``lm_eval_text``;
2. Airflow state lives in ``<repo>/.airflow`` (``AIRFLOW_HOME``, absolute path; SQLite metadata
   DB), DAGs are read from ``<repo>/dags``, examples are off; ``airflow db migrate`` runs once
   per Airflow version (a stamp file records it);
3. ``airflow dags test dpngram_release -c '{conf}'`` runs the DAG in-process with input/public
   pointing at the sample, the warehouse directory at ``<repo>/.dpngram/warehouse`` and
   out=``<repo>/demo-output``; its full log goes to ``<repo>/.airflow/demo-logs/``. The privacy
   ledger is the user's embedded one (``~/.local/share/dpngram/ledger.duckdb``, or
   ``DPNGRAM_LEDGER``): no server is needed;
4. the paths of report.json, report.html, the Data Docs index (and the language model, when the
   run builds one) are printed, then the model card's DP verdict word for word (report.json's
   ``model.private_domain``), then the released model against the public-only model on the
   held-out users (private domain) and on held-out public sentences (``model.comparison``). The
   held-out users' comparison is labelled a demo-only check, with whether it agrees with the
   verdict (:func:`model_lines`), so that the demo and its card say one thing. The exit code is
   non-zero if the DAG run failed.

The sample corpus is synthetic (no real person's text), so the demo's fixed seed is harmless;
the DP noise of the run is drawn from the OS CSPRNG as in any run. The same holds for the held-out
users: the pipeline treats ``lm_eval_text`` as non-private and publishes the metrics measured on it
(report.json, report.html, the model card), which is harmless here because these users are
synthetic too; with real data, evaluation text must be text that may be published about.

Owns: ``dpngram demo`` / ``make demo``: the demo's sample corpus, Airflow home and configuration.
Imports: dpngram.config.budget_plan (the default split), dpngram.text.sample, dpngram.lm.build (the
comparison's row names), dpngram.lm.model_card (the verdict's words; the run itself goes through the
Airflow DAG, in a subprocess); rich.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from dpngram.config.budget_plan import DEFAULT_STAGE_BUDGET

DAG_ID = "dpngram_release"


DEMO_SEED = 20260101


def _repository() -> Path:
    """The checkout the demo runs in (its ``dags/`` folder and state directories): the repository
    this module lives in (``src/dpngram/demo.py``), else the current directory."""
    for candidate in (Path(__file__).resolve().parents[2], Path.cwd()):
        if (candidate / "dags" / "dpngram_release.py").is_file():
            return candidate
    return Path.cwd()


REPO = _repository()


def demo_paths(repo: Path = REPO) -> dict[str, Path]:
    repo = repo.resolve()
    state = repo / ".dpngram"
    return {
        "repo": repo,
        "state": state,
        "sample": state / "sample",
        "warehouse": state / "warehouse",
        "airflow_home": repo / ".airflow",
        "dags": repo / "dags",
        "out": repo / "demo-output",
        "logs": repo / ".airflow" / "demo-logs",
    }


def airflow_env(paths: dict[str, Path], base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for Airflow commands of the demo (absolute paths throughout)."""
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "AIRFLOW_HOME": str(paths["airflow_home"]),
            "AIRFLOW__CORE__DAGS_FOLDER": str(paths["dags"]),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "DPNGRAM_DEMO_DIR": str(paths["state"]),
            "DPNGRAM_OUT": str(paths["out"]),
            "GX_ANALYTICS_ENABLED": "False",
        }
    )
    if "warehouse" in paths:  # each task's warehouse directory, when the run names none
        env["DPNGRAM_WAREHOUSE"] = str(paths["warehouse"])
    env.pop("DPNGRAM_INSECURE_TEST_SEED", None)  # a real run never uses seeded noise
    return env


def _airflow_bin() -> str:
    local = Path(sys.executable).parent / "airflow"
    if local.exists():
        return str(local)
    found = shutil.which("airflow")
    if not found:
        raise FileNotFoundError("the 'airflow' command is not installed in this environment")
    return found


#: Users in the demo's sample corpus: with text as sparse as real text (dpngram.text.sample), 10,000
#: users give a DP vocabulary of a few hundred words at the demo's budget; 2,000 give ~50.
DEMO_USERS = 10_000


#: Held-out users of the demo: further users of the same private-domain generator, never ingested;
#: their text is the run's ``lm_eval_text`` (about 100 tokens each, so ~100,000 evaluation tokens).
DEMO_HELDOUT_USERS = 1_000


def ensure_sample(
    paths: dict[str, Path], users: int, fresh: bool = False, heldout_users: int = DEMO_HELDOUT_USERS
) -> dict[str, Path]:
    """Write the sample corpus unless the same one (users, held-out users, seed, generator) is
    already there. Keys: ``users`` (the run's input), ``public``, ``heldout_users`` (JSON lines of
    the held-out users, ids disjoint from the input's) and ``heldout_text`` (their documents as
    plain text, one a line: the run's ``lm_eval_text``).

    The held-out users are synthetic like everything here, so publishing metrics measured on them
    (the pipeline treats ``lm_eval_text`` as non-private) reveals nothing about anyone."""
    from dpngram.text.sample import GENERATOR_VERSION, write_sample

    if heldout_users < 1:
        raise ValueError(f"heldout_users must be >= 1 (got {heldout_users})")
    sample = paths["sample"]
    stamp = sample / "SAMPLE.json"
    files = {
        "users": sample / "users.jsonl.gz",
        "public": sample / "public.txt.gz",
        "heldout_users": sample / "heldout_users.jsonl.gz",
        "heldout_text": sample / "heldout_users.txt",
    }
    wanted = {
        "users": users,
        "heldout_users": heldout_users,
        "seed": DEMO_SEED,
        "generator": GENERATOR_VERSION,
    }
    if not fresh and stamp.is_file() and all(p.is_file() for p in files.values()):
        if json.loads(stamp.read_text(encoding="utf-8")) == wanted:
            return files
    stamp.unlink(missing_ok=True)  # a crash below must not leave a stamp for mismatched files
    written = write_sample(sample, n_users=users, seed=DEMO_SEED, heldout_users=heldout_users)
    _write_documents_as_lines(Path(written["heldout_users"]), files["heldout_text"])
    stamp.write_text(json.dumps(wanted) + "\n", encoding="utf-8")
    return files


def _write_documents_as_lines(users_jsonl: Path, target: Path) -> None:
    """The documents of a ``{"user_id", "text"}`` JSON-lines file as plain text, one a line (the
    format of ``lm_eval_text``; the pipeline tokenizes each line like private text)."""
    import gzip

    tmp = target.with_name(f".{target.name}.partial")
    with gzip.open(users_jsonl, "rt", encoding="utf-8") as src, tmp.open("w", encoding="utf-8") as dst:
        for line in src:
            dst.write(" ".join(json.loads(line)["text"].split()) + "\n")
    os.replace(tmp, target)


#: The demo's dataset: its releases are published in ``OUT/demo/runs``, ``OUT/demo/latest``.
DEMO_DATASET = "demo"


def demo_conf(
    paths: dict[str, Path], sample: dict[str, Path], max_n: int | None = None, epsilon: float | None = None
) -> dict[str, Any]:
    """The DAG run's configuration (``airflow dags test -c``)."""
    conf: dict[str, Any] = {
        "dataset": DEMO_DATASET,
        "input": str(sample["users"]),
        "public": str(sample["public"]),
        # Held-out users of the private domain (never ingested, synthetic): the released model and
        # the public-only model are also compared on them (report.json model.comparison).
        "lm_eval_text": str(sample["heldout_text"]),
        "out": str(paths["out"]),
        "warehouse": str(paths["warehouse"]),
        # Every stage: DPNE k-grams, the noisy n-gram counts the language model mixes with the
        # public corpus, the Bayesian trigram distribution (the sample's public corpus as prior) and
        # Chen et al. synthetic sequences.
        "stage_budget": dict(DEFAULT_STAGE_BUDGET),
    }
    if max_n is not None:
        conf["max_n"] = max_n
    if epsilon is not None:
        conf["epsilon"] = epsilon
    return conf


def _airflow_version() -> str:
    from importlib.metadata import version

    return version("apache-airflow")


def _run(cmd: list[str], env: dict[str, str], log: Path) -> int:
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        return subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode


def ensure_airflow(paths: dict[str, Path], env: dict[str, str], log: Path) -> None:
    """``airflow db migrate``, once per Airflow version (stamp file)."""
    home = paths["airflow_home"]
    home.mkdir(parents=True, exist_ok=True)
    stamp = home / ".dpngram-setup.json"
    wanted = {"airflow": _airflow_version(), "migrated": True}
    if (
        stamp.is_file()
        and json.loads(stamp.read_text(encoding="utf-8")) == wanted
        and (home / "airflow.db").is_file()
    ):
        return
    airflow = _airflow_bin()
    if _run([airflow, "db", "migrate"], env, log) != 0:
        raise RuntimeError(f"airflow db migrate failed (log: {log})")
    stamp.write_text(json.dumps(wanted) + "\n", encoding="utf-8")


def _latest(out: Path, dataset: str = DEMO_DATASET) -> Path | None:
    """The dataset's newest release (``OUT/DATASET/latest``), or None."""
    link = out / dataset / "latest"
    return link.resolve() if link.is_symlink() else None


def _dags_test(cmd: list[str], env: dict[str, str], log: Path, console: Any) -> int:
    """Run ``airflow dags test``, logging everything and showing the current task."""
    started = re.compile(r"\[DAG TEST\] starting task_id=(\S+)")
    with log.open("a", encoding="utf-8") as fh, console.status("airflow dags test: starting") as status:
        fh.write(f"$ {' '.join(cmd)}\n")
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            match = started.search(line)
            if match:
                status.update(f"airflow dags test: task {match.group(1)}")
                console.print(f"  task {match.group(1)}")
        return proc.wait()


def run_demo(
    users: int = DEMO_USERS,
    max_n: int | None = None,
    epsilon: float | None = None,
    fresh_sample: bool = False,
    repo: Path = REPO,
) -> int:
    """Set up (idempotently) and run the demo DAG; returns the exit code for ``dpngram demo``."""
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    paths = demo_paths(repo)
    paths["logs"].mkdir(parents=True, exist_ok=True)
    log = paths["logs"] / f"demo-{_dt.datetime.now(_dt.UTC).strftime('%Y%m%dT%H%M%SZ')}.log"
    env = airflow_env(paths)

    console.print(f"[bold]1/3[/bold] sample corpus in {paths['sample']}")
    sample = ensure_sample(paths, users, fresh_sample)
    console.print(f"[bold]2/3[/bold] Airflow home {paths['airflow_home']} (metadata DB)")
    ensure_airflow(paths, env, log)

    conf = demo_conf(paths, sample, max_n, epsilon)
    from dpngram.release.layout import LegacyLayoutError, check_out_layout

    try:
        check_out_layout(paths["out"])
    except LegacyLayoutError as err:  # an output of an older demo: say what to move, run nothing
        console.print(f"[red]{err}[/red]")
        return 1
    before = _latest(paths["out"])
    console.print(f"[bold]3/3[/bold] airflow dags test {DAG_ID} (full log: {log})")
    code = _dags_test([_airflow_bin(), "dags", "test", DAG_ID, "-c", json.dumps(conf)], env, log, console)
    after = _latest(paths["out"])
    if code != 0 or after is None or after == before:
        console.print(
            f"[red]The DAG run failed[/red] (exit code {code}); nothing new was published. See the log: {log}"
        )
        return code or 1
    _print_outputs(console, after, HELDOUT_USERS_LABEL)
    return 0


#: How the demo names the evaluation texts of report.json's ``model.comparison`` (rows named by
#: dpngram.lm.build's comparisons): its held-out users (the run's lm_eval_text, a check only a demo
#: can run) and the held-out public sentences.
HELDOUT_USERS_LABEL = "demo-only check on synthetic held-out users (private domain)"
PUBLIC_TEXT_LABEL = "on public text (held-out sentences)"

#: The comparison's models, in the order the demo shows them.
MODEL_ORDER = ("released model", "public-only model")

#: Perplexity ratios within this of 1 are shown as "about even": the released model's perplexity
#: moves by a few percent between runs on the same input (fresh DP noise, a noisy choice of λ).
TIE = 0.02

#: Width the demo wraps its sentences at (a newcomer reads them in a terminal).
WIDTH = 100


def _comparison_label(key: str, eval_text_label: str) -> tuple[int, str]:
    """(display order, label) of a ``model.comparison`` row: the operator's evaluation text first."""
    from dpngram.lm.build import EVAL_TEXT_ROW, HELDOUT_PUBLIC_ROW

    if key == EVAL_TEXT_ROW:
        return 0, eval_text_label
    if key.startswith(HELDOUT_PUBLIC_ROW):
        return 1, PUBLIC_TEXT_LABEL
    return 2, "on " + key.split(" (")[0]


def model_lines(model: dict[str, Any], eval_text_label: str) -> list[str]:
    """What the demo says about the language model (report.json's ``model``): the model card's DP
    verdict first, then the released model against the public-only model on each evaluation text;
    under the held-out users' row, how that non-private check relates to the verdict
    (:func:`check_note`), so that the demo and the card say one thing."""
    comparison = model.get("comparison") or {}
    if not comparison and "private_domain" not in model:
        return []
    lines = [
        "  language model  released (DP) vs public-only model; "
        "perplexity: lower is better, top-3: higher is better"
    ]
    lines += verdict_text_lines(model.get("private_domain"))
    labelled = [(*_comparison_label(key, eval_text_label), row) for key, row in comparison.items()]
    for order, label, row in sorted(labelled, key=lambda item: item[0]):
        lines.append(f"    {label}:")
        lines += _row_lines(row)
        if order == 0:  # the run's lm_eval_text: the demo's synthetic held-out users
            ratio = _ratio(row)
            note = check_note(model.get("private_domain"), _reading(ratio) if ratio else None)
            lines += _wrapped(note, "      ")
    return lines


def verdict_text_lines(verdict: dict[str, Any] | None) -> list[str]:
    """The model card's verdict, word for word (dpngram.lm.model_card: its line, and how many users
    it would need when it cannot tell), wrapped for the terminal."""
    from dpngram.lm.model_card import users_needed_line, verdict_line

    text = verdict_line(verdict).removeprefix("**Verdict:** ")
    needed = users_needed_line(verdict)
    if needed:
        text += " " + needed
    return _wrapped(f"DP verdict (as in the model card): {text}", "    ", "      ")


def _row_lines(row: dict[str, Any]) -> list[str]:
    """One evaluation text's rows: each model's perplexity and top-3, then their ratio."""
    lines = []
    names = [n for n in MODEL_ORDER if n in row] + sorted(n for n in row if n not in MODEL_ORDER)
    for name in names:  # report.json's keys are sorted; the released model goes first
        m = row[name]
        ppl, top3 = m.get("open_vocab_perplexity"), m.get("top3_accuracy")
        shown = f"open-vocabulary perplexity {ppl:6.1f}" if ppl is not None else "perplexity n/a"
        if top3 is not None:
            shown += f", top-3 next word {top3:.1%}"
        lines.append(f"      {name:<18} {shown}")
    ratio = _ratio(row)
    if ratio:
        lines.append(f"      released ÷ public-only perplexity {ratio:.2f} ({_reading(ratio)} here)")
    return lines


def _ratio(row: dict[str, Any]) -> float | None:
    """The released model's perplexity over the public-only model's; None without both."""
    released = (row.get("released model") or {}).get("open_vocab_perplexity")
    public = (row.get("public-only model") or {}).get("open_vocab_perplexity")
    return released / public if released and public else None


def _reading(ratio: float) -> str:
    """What a perplexity ratio says: 'released model better', 'public-only model better' or
    'about even' (within :data:`TIE`)."""
    if ratio < 1 - TIE:
        return "released model better"
    if ratio > 1 + TIE:
        return "public-only model better"
    return f"about even: within {TIE:.0%}"


#: Why the held-out users' check exists only in the demo (the pipeline publishes metrics measured
#: on lm_eval_text as they are, harmless only because the demo's users are synthetic).
ONLY_IN_A_DEMO = (
    "Only a demo can run this check: it reads the held-out users' text exactly, without DP noise, "
    "which synthetic users allow and real users do not (on real data, the DP verdict is the answer)."
)


def check_note(verdict: dict[str, Any] | None, check: str | None) -> str:
    """How the demo-only check on the synthetic held-out users (``check``: what its perplexity ratio reads)
    relates to the DP verdict (report.json ``model.private_domain``): the verdict cannot tell, they
    agree, or they disagree, said plainly; each time, why only a demo can run the check
    (:data:`ONLY_IN_A_DEMO`)."""
    said = (verdict or {}).get("verdict")
    if not said or check is None:
        return ONLY_IN_A_DEMO
    if said == "cannot tell":
        return f"The DP verdict cannot tell at this dataset's size; this check can. {ONLY_IN_A_DEMO}"
    if said == check:
        return f"Agrees with the DP verdict ({said}). {ONLY_IN_A_DEMO}"
    return (
        f"Disagrees with the DP verdict ({said}): the verdict is a DP estimate on other held-out "
        "users of this dataset, each counted once; this check is exact, on these synthetic users' "
        f"tokens. {ONLY_IN_A_DEMO}"
    )


def _wrapped(text: str, indent: str, subsequent: str | None = None) -> list[str]:
    """``text`` in lines of at most :data:`WIDTH` characters, indented; a "section N" reference
    stays on one line (a no-break space while wrapping)."""
    import textwrap

    lines = textwrap.wrap(
        text.replace("section ", "section\u00a0"),
        WIDTH,
        initial_indent=indent,
        subsequent_indent=indent if subsequent is None else subsequent,
        break_on_hyphens=False,
    )
    return [line.replace("section\u00a0", "section ") for line in lines]


def _print_outputs(console: Any, release: Path, eval_text_label: str = "on lm_eval_text") -> None:
    """The published release: its files, what it released and spent, and the model comparison
    (``eval_text_label`` names the run's ``lm_eval_text``)."""
    console.print(f"[green]Published[/green] {release}")
    latest = release.parent.parent / "latest"  # OUT/DATASET/latest
    rows = [
        (f"{release.parent.parent.name}/latest", latest),
        ("report.json", release / "report.json"),
        ("report.html", release / "report.html"),
        ("Data Docs", release / "validation" / "data_docs" / "index.html"),
    ]
    models = sorted(p for pattern in ("*.binary", "*.arpa", "*.arpa.gz") for p in release.rglob(pattern))
    rows += [("model", p) for p in models]
    rows.append(("model card", release / "model" / "MODEL_CARD.md"))
    for name, path in rows:
        if path.exists():
            console.print(f"  {name:<12} {path}")
    report = json.loads((release / "report.json").read_text(encoding="utf-8"))
    per_k = ", ".join(f"k={k}: {n}" for k, n in report["released"]["ngrams_per_k"].items())
    console.print(f"  released     {per_k}")
    console.print(
        f"  privacy      ε = {report['privacy']['total']['epsilon']:.4g} (composed), "
        f"δ = {report['privacy']['delta']:g}"
    )
    for line in model_lines(report.get("model") or {}, eval_text_label):
        console.print(line)
