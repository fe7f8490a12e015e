"""Empirical privacy audit (issue 17): a Clopper-Pearson lower bound on ε per mechanism, from
repeated runs on neighbouring datasets that differ in one canary user (src/dpngram/audit.py;
method: Jagielski et al. 2020, Nasr et al. 2021).

Usage::

    python benchmarks/privacy_audit_bench.py            # full audit (~35 minutes on 2 shared cores)
    python benchmarks/privacy_audit_bench.py --quick    # the fast variant of `make test`, writes nothing

Writes ``benchmarks/results/privacy_audit.json``: per mechanism the claimed ε, the empirical lower
bound (confidence 1 - alpha), the runs and the setting (parameters, canary, what the claim is),
plus a deliberately miscalibrated DPSU (policy Gaussian with σ/10, same claim) that the audit must
catch. The DPSU / DPNE audits rebuild the histogram (fresh secret salts and visiting order) in
every run, about 25 ms a run: they dominate the time. Exits 1 if any real mechanism's lower bound exceeds
its claim (a bug) or the miscalibrated one is not caught (the audit lacks power).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import git_commit, machine  # noqa: E402

from dpngram.audit import ALPHA, AUDITS, dpne_defaults, run_audit  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "privacy_audit.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fast variant; writes nothing")
    parser.add_argument("--alpha", type=float, default=ALPHA, help=f"1 - confidence (default {ALPHA})")
    args = parser.parse_args(argv)
    results = []
    for name in AUDITS:
        result = run_audit(name, fast=args.quick, alpha=args.alpha)
        results.append(result.to_dict())
        print(
            f"{name:11s} claimed eps {result.claimed_epsilon:7.4f}  empirical lower bound "
            f"{result.epsilon_lower_bound:7.4f}  ({result.runs_per_dataset} runs per dataset, "
            f"{result.seconds:.0f} s)  {'ok' if result.ok else 'LOWER BOUND ABOVE THE CLAIM'}",
            flush=True,
        )
    broken = run_audit("dpsu", fast=args.quick, alpha=args.alpha, miscalibrate=0.1)
    print(
        f"{'dpsu sigma/10':11s} claimed eps {broken.claimed_epsilon:7.4f}  empirical lower bound "
        f"{broken.epsilon_lower_bound:7.4f}  {'caught' if not broken.ok else 'NOT CAUGHT'}"
    )
    failed = [r["mechanism"] for r in results if not r["lower_bound_below_claim"]]
    record = {
        "benchmark": "privacy_audit",
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "machine": machine(),  # at the end: its load averages are the run's
        "parameters": {
            "runs_per_dataset": {r["mechanism"]: r["runs_per_dataset"] for r in results},
            "control_runs_per_dataset": broken.runs_per_dataset,
            "dpne_defaults": dpne_defaults().model_dump(),
            "claims": {r["mechanism"]: r["claimed_epsilon"] for r in results},
        },
        "seconds_total": round(sum(r["seconds"] for r in results) + broken.seconds, 1),
        "method": "threshold test on a score, threshold chosen on half the runs, Clopper-Pearson "
        "upper bounds on FPR and FNR (alpha/2 each) on the other half; eps_lb = max(0, "
        "log((1-delta-FPR)/FNR), log((1-delta-FNR)/FPR))",
        "alpha": args.alpha,
        "results": results,
        "miscalibrated_control": broken.to_dict(),
        "all_below_claim": not failed,
        "control_caught": not broken.ok,
    }
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0 if not failed and not broken.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
