"""Throughput of the DP noise samplers in dpngram.core.noise, with OpenDP's exact samplers for scale.

Usage::

    python benchmarks/noise_bench.py                # default sizes, ~1 minute on 2 cores
    python benchmarks/noise_bench.py --quick        # small sizes, a few seconds, writes nothing

Prints a table (draws per second, best of ``--repeats`` timed runs after one warm-up) and writes
``benchmarks/results/noise.json`` with the machine, the date, the parameters and the results.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

from dpngram.core.noise import NoiseSource  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "noise.json"


def best_rate(run: Callable[[], object], draws: int, repeats: int) -> tuple[float, float]:
    """(draws per second, seconds) of the fastest of ``repeats`` timed calls after a warm-up."""
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return draws / best, best


def cases(
    noise: NoiseSource, size: int, calls: int, opendp_size: int
) -> list[tuple[str, str, int, Callable]]:
    """(name, parameters, draws per run, run) for every benchmarked sampler."""
    values = np.zeros(size)
    out: list[tuple[str, str, int, Callable]] = [
        ("gaussian", "sigma=10", size, lambda: noise.gaussian(10.0, size)),
        ("above_threshold", "sigma=10, rho=30", size, lambda: noise.above_threshold(values, 10.0, 30.0)),
    ]
    for sigma in (1.0, 10.0, 1000.0):
        out.append(
            ("rounded_gaussian", f"sigma={sigma:g}", size, lambda s=sigma: noise.rounded_gaussian(s, size))
        )
    out += [
        ("discrete_laplace", "scale=10", size, lambda: noise.discrete_laplace(10.0, size)),
        ("gaussian_on_grid", "sigma=10, grid=1e-3", size, lambda: noise.gaussian_on_grid(10.0, size, 1e-3)),
        ("laplace_on_grid", "scale=10, grid=1e-3", size, lambda: noise.laplace_on_grid(10.0, size, 1e-3)),
        (
            "binomial",
            "one call, n=1e6, p=1e-3",
            calls,
            lambda: [noise.binomial(1_000_000, 1e-3) for _ in range(calls)],
        ),
        (
            "sample_without_replacement",
            f"dense: k={size // 4} of {size}",
            size // 4,
            lambda: noise.sample_without_replacement(size, size // 4),
        ),
        (
            "sample_without_replacement",
            f"sparse: k={size // 10} of 1e12",
            size // 10,
            lambda: noise.sample_without_replacement(10**12, size // 10),
        ),
    ]
    try:
        import opendp.prelude as dp

        dp.enable_features("contrib")
        vector = dp.m.make_gaussian(
            dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=int), scale=10.0
        )
        scalar = dp.m.make_gaussian(dp.atom_domain(T=int), dp.absolute_distance(T=int), scale=10.0)
        counts = [3] * opendp_size
        out += [
            (
                "opendp make_gaussian (int)",
                f"vector of {opendp_size} counts, sigma=10",
                opendp_size,
                lambda: vector(counts),
            ),
            (
                "opendp make_gaussian (int)",
                "one count per call, sigma=10",
                calls,
                lambda: [scalar(3) for _ in range(calls)],
            ),
        ]
    except ImportError:
        print("opendp not installed: skipping the OpenDP comparison", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2_000_000, help="draws per timed run (vector samplers)")
    parser.add_argument(
        "--calls", type=int, default=20_000, help="calls per timed run (one-draw-per-call samplers)"
    )
    parser.add_argument("--opendp-size", type=int, default=100_000, help="draws per timed OpenDP vector run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sizes for a smoke test (writes no results unless --out is given)",
    )
    parser.add_argument("--out", type=Path, default=None, help=f"results JSON (default {RESULTS})")
    args = parser.parse_args(argv)
    if args.quick:
        args.size, args.calls, args.opendp_size, args.repeats = 100_000, 2_000, 10_000, 1

    noise = NoiseSource.secure()
    host = machine()  # load average before the timed runs (other processes skew the numbers)
    rows = []
    print(f"{'sampler':<30} {'parameters':<38} {'draws/s':>14} {'s/run':>9}")
    print("-" * 94)
    for name, params, draws, run in cases(noise, args.size, args.calls, args.opendp_size):
        rate, seconds = best_rate(run, draws, args.repeats)
        rows.append(
            {
                "sampler": name,
                "parameters": params,
                "draws_per_run": draws,
                "draws_per_second": round(rate),
                "seconds_per_run": round(seconds, 4),
            }
        )
        print(f"{name:<30} {params:<38} {rate:>14,.0f} {seconds:>9.3f}")

    payload = {
        "benchmark": "noise_bench",
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "machine": host,
        "parameters": {
            "size": args.size,
            "calls": args.calls,
            "opendp_size": args.opendp_size,
            "repeats": args.repeats,
            "quick": args.quick,
            "timing": "best of repeats after one warm-up, single process",
        },
        "results": rows,
    }
    if args.out is None and args.quick:
        return 0
    args.out = args.out or RESULTS
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, args.out)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
