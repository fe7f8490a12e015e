"""Step ``report``: ``report.json``, a self-contained ``report.html`` and PNG plots.

:func:`write_report` merges the report parts that stages recorded in the staged release
(:func:`dpngram.release.context.read_parts`) with facts computed here:

* privacy: each stage's recorded spend, and the run's total **composed** by
  :class:`dpngram.core.accounting.Accountant` over all events of all stages at the run's delta
  (Gaussian events merged exactly, DPNE Prop. 2.3; pure-ε and approx parts added), next to
  the basic-composition sum of the stages' epsilons (always sound, usually looser); plus what the
  ledger charged for this run;
* row counts of every released table (``released/*.parquet``; those tables are public, so their
  sizes are too), per k for tables with a ``k`` column;
* timings per stage (stage parts' ``seconds`` and :func:`dpngram.release.context.stage_timer`
  records);
* noise mode (secure vs seeded-test) and the validation summary.

The report holds no private statistic: only released tables are counted, and parts are written by
stages under the same rule. Parts without a section of their own are carried into report.json as
they are and rendered in the HTML as key/value tables, so the report needs no change when a stage
is added.

Why one module (over 600 lines): the report is one document; the JSON facts, the plots and the
HTML rendering of the same sections change together, and no other module uses them.

Owns: the ``report`` step: report.json, report.html, the plots.
Imports: dpngram.release (context, layout), dpngram.core; pyarrow, matplotlib.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from dpngram.core.accounting import privacy_summary
from dpngram.release.context import RunContext, is_timing_key, operator_path, read_parts, read_timings
from dpngram.release.layout import NOISY_COLUMNS, PLOTS_DIR, REPORT_HTML, REPORT_JSON, write_json_atomic
from dpngram.release.publish import published_parameters

#: Parts rendered in their own sections; every other part is rendered generically.
_KNOWN_PARTS = {"parameters", "validation"}


def released_tables(root: Path) -> dict[str, dict[str, Any]]:
    """Rows (and rows per k) of every released parquet file under ``root/released``."""
    out: dict[str, dict[str, Any]] = {}
    released = root / "released"
    if not released.is_dir():
        return out
    for path in sorted(released.rglob("*.parquet")):
        meta = pq.ParquetFile(path)
        name = path.relative_to(released).with_suffix("").as_posix()
        noisy = {c: d for c, d in NOISY_COLUMNS.get(name, {}).items() if c in meta.schema_arrow.names}
        entry: dict[str, Any] = {
            "path": path.relative_to(root).as_posix(),
            "rows": meta.metadata.num_rows,
            "columns": meta.schema_arrow.names,
            "content": "keys and DP-noisy values" if noisy else "keys only",
            "noisy_columns": noisy,
        }
        if "k" in meta.schema_arrow.names:
            counts = pc.value_counts(pq.read_table(path, columns=["k"]).column("k")).to_pylist()
            per_k = sorted((c["values"], c["counts"]) for c in counts if c["values"] is not None)
            entry["rows_per_k"] = {str(k): int(n) for k, n in per_k}
        out[name] = entry
    return out


def _ngrams_per_k(tables: dict[str, dict[str, Any]]) -> dict[int, int]:
    """Released n-grams per k: the vocabulary is k = 1, the k-gram table gives k >= 2; a baseline
    run (no DPNE tables) counts its ``baseline_*`` tables."""
    per_k: dict[int, int] = {}
    if "vocabulary" in tables:
        per_k[1] = tables["vocabulary"]["rows"]
    sources = ["kgrams"] if per_k or "kgrams" in tables else [n for n in tables if n.startswith("baseline_")]
    for name in sources:
        for k, n in tables.get(name, {}).get("rows_per_k", {}).items():
            per_k[int(k)] = per_k.get(int(k), 0) + n
    return dict(sorted(per_k.items()))


def _ledger_charged(ctx: RunContext) -> dict[str, Any] | None:
    """What the ledger recorded for this run: the total and each stage's (ε, δ) entry (None if
    the ledger knows nothing of the dataset). The report's per-stage charges are read from here, so
    the report and ``dpngram ledger`` say the same (e.g. the run's whole δ charged to the first
    stage that uses δ, ``dpne.k1``, and 0 to the later levels)."""
    with ctx.ledger() as ledger:
        if ctx.config.dataset not in ledger.datasets():
            return None
        entries = [e for e in ledger.entries(ctx.config.dataset) if e["run_id"] == ctx.run_id]
    per_stage = {e["stage"]: {"epsilon": float(e["epsilon"]), "delta": float(e["delta"])} for e in entries}
    epsilon = sum(e["epsilon"] for e in per_stage.values())
    return {
        "epsilon": display_epsilon(epsilon),
        "epsilon_exact": epsilon,
        "delta": sum(e["delta"] for e in per_stage.values()),
        "entries": len(entries),
        "stages": per_stage,
    }


def display_epsilon(value: float) -> float:
    """ε as people read it: 6 significant digits (3.9999999999859774 -> 4.0). The report and the
    asset events keep the exact value next to it (``epsilon_exact``)."""
    return float(f"{value:.6g}") if math.isfinite(value) else value


def non_dp_settings(parameters: dict[str, Any]) -> list[str]:
    """Settings that void the DP guarantee (allowed only for comparison; loudly named)."""
    return sorted(
        f"{name}={value}"
        for name, value in parameters.items()
        if isinstance(value, str) and "NOT-DP" in value
    )


def write_operator_report(ctx: RunContext) -> Path:
    """The run's operator-only facts, outside the release: wall-clock seconds per stage and the
    paths on this machine (input, warehouse, output, release)."""
    from dpngram.release.publish import PATH_PARAMETERS

    flat = ctx.config.flat()
    path = operator_path(ctx, "operator_report.json")
    write_json_atomic(
        path,
        {
            "run_id": ctx.run_id,
            "note": "operator-only: never published (timings grow with the private input's size; "
            "quarantine counts are exact statistics of the input)",
            "quarantine": _quarantine_counts(ctx),
            "timings_seconds": read_timings(ctx),
            "paths": {name: flat[name] for name in PATH_PARAMETERS if flat.get(name) is not None},
            "release": str(ctx.release.final),
        },
    )
    return path


def operator_quarantine(ctx: RunContext) -> dict[str, Any] | None:
    """The ingest's quarantine counts as :func:`dpngram.engines.ingest_stats.ingest_stats` gives
    them (``rows_read``, ``rows_quarantined``, ``quarantine_reasons``), read back from the run's
    operator report: what the operator sees of a published run, whose private tables are gone.
    None without an operator report or a finished ingest in it."""
    path = operator_path(ctx, "operator_report.json")
    try:
        counts = json.loads(path.read_text(encoding="utf-8")).get("quarantine")
    except (OSError, ValueError):
        return None
    if not counts:
        return None
    return {
        "rows_read": counts["rows_read"],
        "rows_quarantined": counts["rows_quarantined"],
        "quarantine_reasons": dict(counts["reasons"]),
    }


def _quarantine_counts(ctx: RunContext) -> dict[str, Any] | None:
    """The ingest's exact quarantine counts (rows read, quarantined, per reason) for the operator
    file; None when the run has no finished ingest."""
    from dpngram.core.errors import IngestError
    from dpngram.engines.ingest_stats import ingest_stats

    try:
        with ctx.engine() as engine:
            stats = ingest_stats(engine, ctx.schema)
    except IngestError:
        return None
    read, quarantined = stats.get("rows_read", 0), stats.get("rows_quarantined", 0)
    return {
        "rows_read": read,
        "rows_quarantined": quarantined,
        "fraction": quarantined / read if read else 0.0,
        "max_quarantine_fraction": ctx.config.max_quarantine_fraction,
        "reasons": dict(sorted(stats["quarantine_reasons"].items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def _noise_mode(parts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Noise mode per stage where a stage recorded one ('noise_mode' or 'noise': {'mode': ...})."""
    modes = {}
    for name, part in parts.items():
        noise = part.get("noise")
        mode = part.get("noise_mode") or (noise.get("mode") if isinstance(noise, dict) else None)
        if mode:
            modes[name] = mode
    insecure = sorted(n for n, m in modes.items() if m != "secure")
    return {
        "mode": "seeded-test (NOT PRIVATE)" if insecure else "secure",
        "per_stage": modes,
        "note": "stages draw noise from NoiseSource.secure() (OS CSPRNG); a seeded source exists only "
        "inside the test suite" + (f"; seeded stages: {insecure}" if insecure else ""),
    }


def run_report(ctx: RunContext) -> dict[str, Any]:
    """Step ``report``: write the report; returns its path (public)."""
    return {"stage": "report", "path": str(write_report(ctx))}


def write_report(ctx: RunContext) -> Path:
    """Write ``report.json``, ``report.html`` and ``plots/*.png`` into the staged release."""
    parts = read_parts(ctx)
    root = ctx.release.root
    tables = released_tables(root)
    per_k = _ngrams_per_k(tables)
    parameters = parts.get("parameters", {}).get("parameters") or published_parameters(ctx.config)
    privacy = _report_privacy(ctx, parts, parameters)
    report: dict[str, Any] = {
        "run_id": ctx.run_id,
        "dataset": ctx.config.dataset,
        "generated_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "parameters": parameters,
        "privacy": privacy,
        "released": {
            "tables": tables,
            "ngrams_per_k": {str(k): n for k, n in per_k.items()},
            "note": "every released table holds keys, or keys and the DP-noisy values named in "
            "noisy_columns; never an exact count. Wall-clock timings and machine paths are "
            "operator-only (not published).",
        },
        "noise": _noise_mode(parts),
        "validation": _validation_summary(parts.get("validation")),
        "model": parts.get("lm"),  # language model (lm/): paths, order, counts per order, metrics
        "stages": {
            name: {k: v for k, v in part.items() if not is_timing_key(k)}
            for name, part in parts.items()
            if name not in _KNOWN_PARTS
        },
    }
    plots = _plots(root, per_k, privacy)
    report["plots"] = plots
    path = ctx.release.path(REPORT_JSON)
    write_json_atomic(path, report)
    write_operator_report(ctx)
    html_path = ctx.release.path(REPORT_HTML)
    with ctx.release.writing(REPORT_HTML) as tmp:
        tmp.write_text(render_html(report), encoding="utf-8")
    assert html_path.exists()
    return path


def _report_privacy(ctx: RunContext, parts: dict[str, Any], parameters: dict[str, Any]) -> dict[str, Any]:
    """The report's section ``privacy``: the composed spend of every stage's events
    (:func:`~dpngram.core.accounting.privacy_summary`), the budget calibration, the DPNE settings,
    whether the run is differentially private at all (``parameters``), and what the ledger charged
    each stage and the run."""
    privacy = privacy_summary(parts, ctx.config.delta, ctx.config.epsilon)
    privacy["calibration"] = {
        "mode": ctx.config.budget_calibration,
        **ctx.config.budget_plan().report(),
    }
    dpne = _dpne_settings(ctx, parts)
    if dpne:
        privacy["dpne"] = dpne
    not_dp = non_dp_settings(parameters)
    privacy["differentially_private"] = not not_dp
    if not_dp:
        privacy["non_dp_settings"] = not_dp
        privacy["total"]["warning"] = (
            f"NOT differentially private: {', '.join(not_dp)}; the epsilon above is what the noise "
            "would give under a data-independent calibration, not a guarantee"
        )
    ledger = _ledger_charged(ctx)
    if ledger is not None:
        # each stage's charge as the ledger holds it (the same numbers as `dpngram ledger`)
        for name, entry in ledger.pop("stages").items():
            if name in privacy["stages"]:
                privacy["stages"][name]["charged_epsilon"] = entry["epsilon"]
                privacy["stages"][name]["charged_delta"] = entry["delta"]
        privacy["ledger_charged"] = ledger
    privacy["stages_note"] = (
        "charged_epsilon/charged_delta: what the ledger charged each stage (they add up to "
        "ledger_charged; the run's delta is charged once, to the first stage that uses it); "
        "epsilon/delta: the stage's own events composed stand-alone at its delta share"
    )
    exact = privacy["total"]["epsilon"]
    privacy["total"]["epsilon"] = display_epsilon(exact)
    privacy["total"]["epsilon_exact"] = exact
    return privacy


def _validation_summary(part: dict[str, Any] | None) -> dict[str, Any]:
    if not part:
        return {"ran": False}
    return {
        "ran": True,
        "success": part.get("success"),
        "suites": [
            {k: s.get(k) for k in ("suite", "success", "evaluated", "failed")} for s in part.get("suites", [])
        ],
        "failures": [f"{s['suite']}: {f}" for s in part.get("suites", []) for f in s.get("failures", [])],
        "data_docs": part.get("data_docs"),
        "results": part.get("results"),
    }


# ----------------------------------------------------------------------------------------------
# Plots (matplotlib, Agg backend: no display needed)
# ----------------------------------------------------------------------------------------------
def _plots(root: Path, per_k: dict[int, int], privacy: dict[str, Any]) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, str] = {}
    (root / PLOTS_DIR).mkdir(parents=True, exist_ok=True)
    if per_k:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ks = list(per_k)
        bars = ax.bar([str(k) for k in ks], [per_k[k] for k in ks], color="#4C72B0")
        ax.bar_label(bars, fontsize=8)
        ax.set_xlabel("k (n-gram length)")
        ax.set_ylabel("released n-grams")
        ax.set_title("Released n-grams per k")
        if max(per_k.values()) / max(1, min(per_k.values())) > 100:
            ax.set_yscale("log")
        out["ngrams_per_k"] = _save(fig, root, "ngrams_per_k.png")
        plt.close(fig)
    stages = privacy.get("stages", {})
    if stages:
        fig, ax = plt.subplots(figsize=(6, 0.5 + 0.4 * len(stages) + 1))
        names = list(stages)
        values = [stages[n]["charged_epsilon"] for n in names]
        ax.barh(names, values, color="#DD8452")
        total = privacy["total"]["epsilon"]
        ax.axvline(total, color="black", linestyle="--", linewidth=1, label=f"composed total {total:.3g}")
        ax.axvline(
            privacy["epsilon_budget"],
            color="#C44E52",
            linewidth=1,
            label=f"budget {privacy['epsilon_budget']:.3g}",
        )
        ax.invert_yaxis()
        ax.set_xlabel("epsilon charged")
        ax.set_title("Privacy spend per stage")
        ax.legend(fontsize=8, loc="lower right")
        out["privacy_per_stage"] = _save(fig, root, "privacy_per_stage.png")
        plt.close(fig)
    return out


def _save(fig: Any, root: Path, name: str) -> str:
    relative = f"{PLOTS_DIR}/{name}"
    fig.tight_layout()
    target = root / relative
    tmp = target.with_name(f".{name}.partial.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(target)
    return relative


# ----------------------------------------------------------------------------------------------
# HTML
# ----------------------------------------------------------------------------------------------
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:980px;
color:#222;line-height:1.45;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
h3{font-size:1rem;margin-bottom:.3rem}
table{border-collapse:collapse;margin:.5rem 0 1rem;font-size:.9rem}
th,td{border:1px solid #ddd;padding:.25rem .6rem;text-align:left;vertical-align:top}
th{background:#f5f5f5}td.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#1a7f37;font-weight:600}.bad{color:#c0392b;font-weight:600}.muted{color:#666;font-size:.85rem}
img{max-width:100%;border:1px solid #eee;margin:.5rem 0}code{background:#f3f3f3;padding:0 .2rem}
"""


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value == 0 or not math.isfinite(value):
            return str(value)
        return f"{value:.6g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def _cell(value: Any) -> str:
    """A value as table cell content: a nested table for a dict, a table for a list of dicts, a
    comma-separated list for a list of scalars; never a JSON dump."""
    if isinstance(value, dict):
        return _kv_table(value) if value else "—"
    if isinstance(value, list):
        if value and all(isinstance(v, dict) for v in value):
            header = list(dict.fromkeys(k for v in value for k in v))
            return _table(header, [[v.get(k, "") for k in header] for v in value])
        if any(isinstance(v, (dict, list)) for v in value):
            return "".join(f"<div>{_cell(v)}</div>" for v in value)
        return _esc(", ".join(_fmt(v) for v in value)) if value else "—"
    return _esc(_fmt(value))


def _kv_table(data: dict[str, Any]) -> str:
    rows = []
    for key, value in data.items():
        cls = ' class="num"' if isinstance(value, (int, float)) and not isinstance(value, bool) else ""
        rows.append(f"<tr><th>{_esc(key)}</th><td{cls}>{_cell(value)}</td></tr>")
    return "<table>" + "".join(rows) + "</table>"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for v in row:
            cls = ' class="num"' if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
            cells.append(f"<td{cls}>{_cell(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def render_html(report: dict[str, Any]) -> str:
    """The report as one HTML page (inline CSS; plots are the PNG files next to it)."""
    sections = [
        f"<h1>dpngram release <code>{_esc(report['run_id'])}</code></h1>",
        f"<p class='muted'>dataset {_esc(report['dataset'])} · generated {_esc(report['generated_at'])} · "
        f"noise: {_esc(report['noise']['mode'])}</p>",
    ]
    sections.extend(_privacy_html(report))
    sections.extend(_released_html(report))
    sections.extend(_quarantine_html(report["stages"].get("ingest")))
    sections.extend(_validation_html(report["validation"]))

    sections.append("<h2>Parameters</h2>")
    sections.append(_kv_table(report["parameters"]))

    sections.extend(_stages_html(report["stages"]))

    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>dpngram report {_esc(report['run_id'])}</title><style>{_CSS}</style></head><body>"
        + "\n".join(sections)
        + "</body></html>\n"
    )


def _dpne_settings(ctx: RunContext, parts: dict[str, Any]) -> dict[str, Any] | None:
    """The DPSU policy, level schedule and delta split this run's DPNE levels used (None when no
    level ran): public parameters, and each level's sigma and threshold from its report part."""
    levels = {n: p for n, p in parts.items() if n.startswith("dpne.k") and n[6:].isdigit()}
    if not levels:
        return None
    dpne = ctx.config.dpne
    return {
        "policy": dpne.policy,
        "policy_cap_alpha": dpne.policy_cap if dpne.policy == "policy-gaussian" else None,
        "sips_rounds": dpne.sips_rounds if dpne.policy == "dp-sips" else None,
        "sips_ratio": dpne.sips_ratio if dpne.policy == "dp-sips" else None,
        "sips_admission": (
            {
                "floor": dpne.sips_admission_floor,
                "ratio": dpne.sips_admission_ratio,
                "max_n": dpne.sips_admission_max_n,
            }
            if dpne.policy == "dp-sips" and dpne.sips_rounds > 1 and dpne.sips_admission
            else None
        ),
        "sigma_decay": dpne.sigma_decay,
        "threshold_delta_fraction": dpne.threshold_delta if dpne.vocabulary_method != "triehh" else 0.0,
        "vocabulary_method": dpne.vocabulary_method,
        "levels": {
            name: {"sigma": part.get("sigma"), "rho": part.get("rho"), "released": part.get("released")}
            for name, part in sorted(levels.items(), key=lambda item: int(item[0][6:]))
        },
    }


def _privacy_html(report: dict[str, Any]) -> list[str]:
    """Section "Privacy": the composed spend against the budget, per stage, the ledger, the plot."""
    privacy = report["privacy"]
    sections = ["<h2>Privacy</h2>", *_spend_html(privacy)]
    dpne = privacy.get("dpne")
    if dpne:
        sections.extend(_dpne_html(dpne))
    if privacy["stages"]:
        sections.extend(_stage_charges_html(privacy))
    if "ledger_charged" in privacy:
        sections.append(
            f"<p class='muted'>Ledger entries for this run: {privacy['ledger_charged']['entries']}, "
            f"ε charged {_esc(_fmt(privacy['ledger_charged']['epsilon']))}, "
            f"δ charged {_esc(_fmt(privacy['ledger_charged']['delta']))}.</p>"
        )
    if "privacy_per_stage" in report["plots"]:
        sections.append(
            f"<img src='{_esc(report['plots']['privacy_per_stage'])}' alt='privacy spend per stage'>"
        )
    return sections


def _spend_html(privacy: dict[str, Any]) -> list[str]:
    """The run's composed spend against its budget (a warning first when it is not DP at all), and
    how the budget was calibrated."""
    total = privacy["total"]
    sections: list[str] = []
    status = "ok" if privacy.get("within_budget") else "bad"
    n_events = len(privacy.get("events", []))
    spent, budget = _esc(_fmt(total["epsilon"])), _esc(_fmt(privacy["epsilon_budget"]))
    basic, delta = _esc(_fmt(privacy["basic_composition"]["epsilon"])), _esc(_fmt(privacy["delta"]))
    if not privacy.get("differentially_private", True):
        sections.append(f"<p class='bad'>{_esc(total.get('warning', 'NOT differentially private'))}</p>")
    sections.append(
        f"<p>Total spent (composed over all {n_events} mechanism events at δ = {delta}): "
        f"<span class='{status}'>ε = {spent}</span> of the run's budget ε = {budget} "
        f"(method: {_esc(total.get('method'))}).</p>"
    )
    calibration = privacy.get("calibration")
    if calibration and calibration.get("mode") == "joint" and calibration["multiplier"] > 1:
        sections.append(
            "<p>Joint calibration: every stage's share of ε was scaled by "
            f"{_esc(_fmt(calibration['multiplier']))} so that the stages together compose to the target "
            f"ε = {_esc(_fmt(calibration['target_epsilon']))}. The sum of the stages' stand-alone ε "
            f"(basic composition, a looser bound) is {basic}.</p>"
        )
    elif calibration:
        sections.append(
            f"<p class='muted'>Budget calibration: {_esc(calibration.get('mode'))}. "
            f"Basic-composition sum over stages: ε = {basic}.</p>"
        )
    return sections


def _dpne_html(dpne: dict[str, Any]) -> list[str]:
    """The DPNE settings the run used (:func:`_dpne_settings`) and each level's σ, ρ and release."""
    cap = (
        f", cap ρ + {_esc(_fmt(dpne['policy_cap_alpha']))}σ"
        if dpne.get("policy_cap_alpha") is not None
        else ""
    )
    if dpne.get("sips_rounds") is not None:
        cap = f", {_esc(_fmt(dpne['sips_rounds']))} rounds, budget ratio {_esc(_fmt(dpne['sips_ratio']))}"
        if dpne.get("sips_admission") is not None:
            adm = dpne["sips_admission"]
            cap += (
                f", admission z = {_esc(_fmt(adm['floor']))} (ratio {_esc(_fmt(adm['ratio']))}, "
                f"levels k ≤ {_esc(_fmt(adm['max_n']))})"
            )
    return [
        f"<p>DPNE: DPSU policy <b>{_esc(dpne['policy'])}</b>{cap}; level schedule σ_k = "
        f"{_esc(_fmt(dpne['sigma_decay']))}·σ_(k−1); vocabulary threshold's share of the dpne δ: "
        f"{_esc(_fmt(dpne['threshold_delta_fraction']))}; "
        f"vocabulary: {_esc(dpne['vocabulary_method'])}.</p>",
        _table(
            ["level", "σ", "ρ", "released"],
            [[n, lv["sigma"], lv["rho"], lv["released"]] for n, lv in dpne["levels"].items()],
        ),
    ]


def _stage_charges_html(privacy: dict[str, Any]) -> list[str]:
    """Per stage: what the ledger charged, its stand-alone ε, its budget and its events; the total
    charged (the ledger's, when the report has it)."""
    stages = privacy["stages"]
    rows: list[list[Any]] = [
        [
            n,
            s["charged_epsilon"],
            s.get("charged_delta") or 0.0,
            s["epsilon"],
            s["budget_epsilon"],
            s["events"],
        ]
        for n, s in stages.items()
    ]
    charged = privacy.get("ledger_charged")
    total_eps = charged["epsilon"] if charged else sum(s["charged_epsilon"] for s in stages.values())
    total_delta = charged["delta"] if charged else sum(s.get("charged_delta") or 0.0 for s in stages.values())
    rows.append(["total charged", total_eps, total_delta, "", "", ""])
    headers = [
        "stage",
        "ε charged (ledger)",
        "δ charged (ledger)",
        "ε stand-alone (own events at the stage's δ)",
        "stage budget ε",
        "events",
    ]
    return [
        _table(headers, rows),
        "<p class='muted'>The charged columns are the ledger's entries for this run "
        "(<code>dpngram ledger</code>): the run's δ is charged once, to the first stage whose "
        "mechanism uses δ.</p>",
    ]


def _released_html(report: dict[str, Any]) -> list[str]:
    """Section "Released n-grams": n-grams per k (table and plot) and the released tables."""
    sections: list[str] = []
    sections.append("<h2>Released n-grams</h2>")
    per_k = report["released"]["ngrams_per_k"]
    if per_k:
        sections.append(_table(["k", "released n-grams"], [[k, n] for k, n in per_k.items()]))
    if "ngrams_per_k" in report["plots"]:
        sections.append(f"<img src='{_esc(report['plots']['ngrams_per_k'])}' alt='released n-grams per k'>")
    tables = report["released"]["tables"]
    if tables:
        sections.append("<h3>Released tables</h3>")
        sections.append(
            _table(
                ["table", "file", "rows", "columns", "values"],
                [
                    [
                        n,
                        t["path"],
                        t["rows"],
                        ", ".join(t["columns"]),
                        "; ".join(f"{c}: {d}" for c, d in t.get("noisy_columns", {}).items()) or "keys only",
                    ]
                    for n, t in tables.items()
                ],
            )
        )
    return sections


def _quarantine_html(ingest: dict[str, Any] | None) -> list[str]:
    """Section "Input quarantine": the check the run passed and where the exact counts are."""
    quarantine = (ingest or {}).get("quarantine")
    if not quarantine:
        return []
    return [
        "<h2>Input quarantine</h2>",
        f"<p>Malformed input rows are quarantined, never dropped silently. This run passed the check "
        f"<code>max_quarantine_fraction = {_esc(_fmt(quarantine['max_quarantine_fraction']))}</code>: "
        "a run with a larger fraction of its rows quarantined is refused at ingest, before any noise "
        "is drawn. The counts per reason are exact statistics of the private input, so they are not "
        "published: the operator finds them in <code>operator_report.json</code> beside the "
        "warehouse, in the ingest task's log and in <code>dpngram run</code>'s summary.</p>",
    ]


def _validation_html(validation: dict[str, Any]) -> list[str]:
    """Section "Validation": whether the suites passed, per suite, the failures."""
    sections: list[str] = []
    sections.append("<h2>Validation (Great Expectations)</h2>")
    if not validation.get("ran"):
        sections.append("<p class='bad'>Validation has not run.</p>")
    else:
        word, cls = ("passed", "ok") if validation["success"] else ("FAILED", "bad")
        sections.append(
            f"<p>All suites <span class='{cls}'>{word}</span>. "
            f"<a href='{_esc(validation['data_docs'])}'>Data Docs</a> · "
            f"<a href='{_esc(validation['results'])}'>results.json</a></p>"
        )
        sections.append(
            _table(
                ["suite", "passed", "expectations", "failed"],
                [[s["suite"], s["success"], s["evaluated"], s["failed"]] for s in validation["suites"]],
            )
        )
        if validation["failures"]:
            sections.append("<ul>" + "".join(f"<li>{_esc(f)}</li>" for f in validation["failures"]) + "</ul>")
    return sections


def _stages_html(stages: dict[str, Any]) -> list[str]:
    """Section "Stages": each stage's report part (its privacy without the event list)."""
    sections: list[str] = []
    sections.append("<h2>Stages</h2>")
    for name, part in stages.items():
        shown = {k: v for k, v in part.items() if k != "privacy"}
        if isinstance(part.get("privacy"), dict):
            shown["privacy"] = {k: v for k, v in part["privacy"].items() if k != "events"}
        sections.append(f"<h3>{_esc(name)}</h3>{_kv_table(shown)}")
    return sections
