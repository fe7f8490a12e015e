"""Seconds of the two LM stages (``lm_counts`` + ``lm``) against ingest + DPNE, in default runs.

    python benchmarks/lm_speed_bench.py [--baseline REV] [--repeats 1]
                                        [--corpora sotu sotu-2k chat mail generated-100k]
                                        [--merge]
                                        [--option NAME=VALUE ...] [--out FILE]

Issue 25's speed target: on a corpus of <= 100k users the LM stages must not cost more than ingest
plus DPNE. Each run is ``dpngram run`` with every default (the default stage split, the model and
its card), ε = 4, δ = 1e-7, a fresh warehouse directory, on each corpus of ``--corpora``:

* ``sotu``: SOTU (``../shared/data/sotu_users.jsonl.gz``, 12,807 users, long texts) with Brown as
  the public corpus: where the LM stages' fixed costs show;
* ``sotu-2k``: the SOTU users with sha256(user_id) % 6 == 0 (2,1xx users, written under
  benchmarks/.data/lm_speed/ when missing) with Brown: the size of the e-mail corpus the issue
  timed (2,266 users), where ingest + DPNE is smallest against the public model's fixed cost;
* ``chat`` and ``mail``: the two real corpora of ``lm_bench.py`` (``benchmarks/lm/real_corpora.py``:
  1,315 chat authors with 2.5M words; 697 mailing-list authors with 0.5M words), every user, with
  Brown: few users with much text each;
* ``generated-100k``: the 100,000-user generated corpus of ``scale_bench.py`` (50,000-word Zipf
  vocabulary, about 100 tokens a user; generated under benchmarks/.data/scale/ when missing) with
  its own public corpus: the largest size the target names.

Per code version and corpus, two runs in a row:

* ``cold``: an empty public-model cache (the first run on a warehouse, or a new public corpus);
* ``warm``: the same warehouse again (the weekly refresh: the public corpus is unchanged).

``--baseline REV`` also runs git revision REV (a worktree under benchmarks/.data/, its ``src`` first
on PYTHONPATH with its own SQL, with this checkout's virtualenv: ``_common.baseline_tree``),
alternating with this checkout, so the two share the machine's load. ``--option NAME=VALUE``
(repeatable; a flat parameter name, e.g. ``lm_public_prune=1``) also runs this checkout with those
settings, alternating with its defaults: an opt-in setting's ratio beside the default's. The
headline is the ratio (lm_counts + lm) / (ingest + DPNE) of each run, which a shared machine
distorts less than seconds. Timings come from the run's operator directory.
Writes ``benchmarks/results/lm_speed.json`` (``--out``: another file there); with ``--merge`` the
file's rows of other corpora are kept (each row names its commit and baseline).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, baseline_tree, git_commit, load_average, machine, now, write_result  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
CORPORA = ("sotu", "sotu-2k", "chat", "mail", "generated-100k")
SMALL = ROOT / "benchmarks" / ".data" / "lm_speed" / "sotu_2k.jsonl.gz"
DPNE_STAGES = ("dpne.k1", "dpne.k2", "dpne.k3", "dpne.k4", "dpne.k5", "dpne.kgrams")


def _timings(warehouse_dir: Path) -> dict[str, float]:
    runs = sorted((warehouse_dir / "operator").iterdir(), key=lambda p: p.stat().st_mtime)
    timings = runs[-1] / "timings"
    return {p.stem: json.loads(p.read_text())["seconds"] for p in sorted(timings.glob("*.json"))}


def corpus_paths(name: str) -> tuple[Path, Path]:
    """(private users, public corpus) of a ``--corpora`` name."""
    if name == "sotu":
        return DATA / "sotu_users.jsonl.gz", DATA / "brown_public.txt.gz"
    if name == "sotu-2k":
        if not SMALL.is_file():
            _write_small_sotu(DATA / "sotu_users.jsonl.gz", SMALL)
        return SMALL, DATA / "brown_public.txt.gz"
    if name in ("chat", "mail"):
        from lm.real_corpora import real_corpus

        real = real_corpus(name, DATA / "brown_public.txt.gz")
        return real.private, real.public
    from scale_bench import corpus

    paths = corpus(100_000)
    return paths["users"], paths["public"]


def _write_small_sotu(source: Path, target: Path) -> None:
    """The users of ``source`` with sha256(user_id) % 6 == 0, every line as it is (atomic write)."""
    import gzip
    import hashlib

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    with gzip.open(source, "rt", encoding="utf-8") as src, gzip.open(tmp, "wt", encoding="utf-8") as out:
        for line in src:
            user = json.loads(line)["user_id"]
            if int(hashlib.sha256(str(user).encode("utf-8")).hexdigest(), 16) % 6 == 0:
                out.write(line)
    tmp.replace(target)


def one_run(
    label: str,
    src: Path | None,
    work: Path,
    phase: str,
    corpus_name: str = "sotu",
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One default run; ``src``: a checkout's ``src`` put first on PYTHONPATH (None: this one);
    ``extra``: more command-line flags (``--option``)."""
    private, public = corpus_paths(corpus_name)
    env = dict(os.environ)
    env.pop("DPNGRAM_INSECURE_TEST_SEED", None)
    if src is not None:
        env["PYTHONPATH"] = f"{src}{os.pathsep}{env.get('PYTHONPATH', '')}"
    out = work / f"out-{phase}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "dpngram.cli",
        "run",
        "--input",
        str(private),
        "--public",
        str(public),
        "--out",
        str(out),
        "--warehouse",
        str(work),  # the directory: runs/, operator/ (read by _timings) and cache/public/
        "--dataset",
        f"{corpus_name}-{phase}",
        "--epsilon",
        "4",
        "--delta",
        "1e-7",
        *extra,
    ]
    load_before = load_average()
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if proc.returncode:
        raise SystemExit(f"{label} {phase}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    t = _timings(work)
    lm = t.get("lm_counts", 0.0) + t.get("lm", 0.0)
    base = t.get("ingest", 0.0) + sum(t.get(s, 0.0) for s in DPNE_STAGES)
    row = {
        "corpus": corpus_name,
        "code": label,
        "cache": phase,
        "wall_seconds": round(wall, 1),
        "stage_seconds": t,
        "lm_stages_seconds": round(lm, 2),
        "ingest_plus_dpne_seconds": round(base, 2),
        "ratio": round(lm / base, 2) if base else None,
        "load_average_before": load_before,
        "load_average_after": load_average(),
    }
    print(
        f"{corpus_name:>14} {label:>9} {phase:>4}: lm_counts+lm {lm:6.1f} s, "
        f"ingest+DPNE {base:5.1f} s, ratio {row['ratio']}",
        flush=True,
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default=None, help="a git revision to compare with (alternating runs)")
    ap.add_argument("--repeats", type=int, default=1, help="cold+warm pairs per code version")
    ap.add_argument(
        "--corpora",
        nargs="+",
        choices=CORPORA,
        default=list(CORPORA),
        help="corpora to run (default: all; generated-100k takes about 1.5 min a run)",
    )
    ap.add_argument("--merge", action="store_true", help="keep lm_speed.json's rows of other corpora")
    ap.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="also run this checkout with this setting (flat name, e.g. lm_public_prune=1), alternating "
        "with its defaults; repeatable",
    )
    ap.add_argument("--out", default="lm_speed.json", help="result file under benchmarks/results/")
    args = ap.parse_args()
    extra: list[str] = []
    for item in args.option:
        name, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--option {item!r}: expected NAME=VALUE")
        extra += [f"--{name.replace('_', '-')}", value]
    with tempfile.TemporaryDirectory(prefix="dpngram-lmspeed-") as tmpdir:
        tmp = Path(tmpdir)
        versions: list[tuple[str, Path | None, tuple[str, ...]]] = [("this", None, ())]
        if args.baseline:
            versions.insert(0, ("baseline", baseline_tree(args.baseline) / "src", ()))
        if extra:
            versions.append(("this " + " ".join(args.option), None, tuple(extra)))
        rows = []
        for name in args.corpora:
            for r in range(args.repeats):
                for v, (label, src, flags) in enumerate(versions):
                    work = tmp / f"{name}-{v}-{r}"
                    work.mkdir()
                    for phase in ("cold", "warm"):
                        row = one_run(label, src, work, phase, name, flags)
                        row["git_commit"] = git_commit()
                        row["baseline"] = args.baseline
                        rows.append(row)
                    shutil.rmtree(work, ignore_errors=True)
    payload = {
        "benchmark": "lm_speed",
        "date": now(),
        "machine": machine(),
        "git_commit": git_commit(),
        "parameters": {
            "corpora": {
                "sotu": "sotu_users.jsonl.gz (12,807 users), public brown_public.txt.gz",
                "sotu-2k": "the sotu users with sha256(user_id) % 6 == 0, public brown_public.txt.gz",
                "chat": "lm_bench's chat corpus (BYU Chit-Chat, 1,315 authors), every user, public "
                "brown_public.txt.gz",
                "mail": "lm_bench's mail corpus (SpamAssassin ham, 697 authors), every user, public "
                "brown_public.txt.gz",
                "generated-100k": "scale_bench's 100,000 generated users (50,000-word Zipf vocabulary), "
                "its own public corpus",
            },
            "ran": args.corpora,
            "epsilon": 4,
            "delta": 1e-7,
            "split": "default (every stage)",
            "baseline": args.baseline,
            "options": args.option,
            "repeats": args.repeats,
        },
        "target": "lm_counts + lm <= ingest + DPNE (ratio <= 1) on any corpus of <= 100k users",
        "rows": rows,
    }
    previous = ROOT / "benchmarks" / "results" / args.out
    if args.merge and previous.is_file():
        old = json.loads(previous.read_text(encoding="utf-8"))
        kept = [r for r in old.get("rows", []) if r.get("corpus") not in args.corpora]
        for r in kept:  # rows from before rows named their commit carry the file's
            r.setdefault("git_commit", old.get("git_commit"))
            r.setdefault("baseline", old.get("parameters", {}).get("baseline"))
        payload["rows"] = kept + rows
        payload["parameters"]["ran"] = sorted({r["corpus"] for r in payload["rows"]})
    print(write_result(args.out, payload))


if __name__ == "__main__":
    main()
