"""Public-corpus side of the language model at growing public corpus sizes: time and peak memory.

Both LM stages build the public model P from the public corpus (stage ``lm_counts`` for its count
domain and selection, stage ``lm`` for the released model and again for the model card's
stand-ins): word counts, order-1..3 counts with the ``<unk>`` mapping, Kneser-Ney, one ARPA file.
This benchmark times exactly that step (:func:`dpngram.lm.open_model.open_public_model` +
:func:`dpngram.lm.arpa_file.write_arpa`), each size in a fresh process (peak RSS of that process), on
public corpora of 100k / 400k / 1.6M sentences from the sample generator (about 10 tokens a
sentence), with a 1,000-word DP vocabulary (the generator's most frequent words).

Baseline: the same measurement with another checkout's code (``--baseline-src``, e.g. a git
worktree of the commit before the streaming change), run in the same invocation, alternating, so
both see the same machine load; results go to ``benchmarks/results/lm_public.json`` and
``lm_public.png``.

Usage: ``python benchmarks/lm_public_bench.py [--sizes 100000 400000 1600000]
[--baseline-src PATH/src --baseline-label TEXT]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import load_average  # noqa: E402
from dpne.common import CACHE, RESULTS, header, write_result  # noqa: E402  (one header for all benches)

SRC = HERE.parent / "src"
DEFAULT_SIZES = (100_000, 400_000, 1_600_000)
DP_WORDS = 1_000
ORDER = 3

JOB = textwrap.dedent(
    """
    import json, resource, sys, time
    from collections import Counter
    sys.path.insert(0, sys.argv[1])
    from dpngram.lm.arpa_file import write_arpa
    from dpngram.lm.open_model import open_public_model
    path, arpa, dp_words = sys.argv[2], sys.argv[3], int(sys.argv[4])
    dp_vocabulary = [w for w in json.loads(open(sys.argv[5]).read())][:dp_words]
    start = time.perf_counter()
    vocabulary, counts, model = open_public_model(dp_vocabulary, path, order=3, public_cap=100_000)
    built = time.perf_counter()
    lines = write_arpa(model, arpa)
    done = time.perf_counter()
    print("RESULT" + json.dumps({
        "model_seconds": round(built - start, 2),
        "arpa_seconds": round(done - built, 2),
        "total_seconds": round(done - start, 2),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "counts_per_order": {str(n): c.height for n, c in counts.items()},
        "vocabulary": len(vocabulary),
    }))
    """
)


def public_corpus(sentences: int) -> Path:
    """A generated public corpus of ``sentences`` sentences (cached under benchmarks/.data)."""
    from dpngram.text.sample import write_sample

    folder = CACHE / f"lm_public_{sentences}"
    if not (folder / "public.txt.gz").is_file():
        write_sample(folder, n_users=10, seed=20261124, public_sentences=sentences)
    return folder / "public.txt.gz"


def dp_vocabulary(path: Path) -> Path:
    """The corpus's DP_WORDS most frequent words, standing in for a released DP vocabulary."""
    from dpngram.lm.open_model import public_word_counts

    out = path.with_name("dp_vocabulary.json")
    if not out.is_file():
        words = [w for w, _ in public_word_counts(path).most_common(DP_WORDS)]
        out.write_text(json.dumps(words), encoding="utf-8")
    return out


def measure(src: Path, path: Path, vocab: Path, arpa: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", JOB, str(src), str(path), str(arpa), str(DP_WORDS), str(vocab)],
        capture_output=True,
        text=True,
        timeout=6 * 3600,
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"job failed ({proc.returncode}): {proc.stderr[-2000:]}")
    arpa.unlink(missing_ok=True)
    return {**json.loads(line[len("RESULT") :]), "load_average_1min_after": load_average()}


def figure(record: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for label, rows in record["results"].items():
        sizes = [r["sentences"] for r in rows]
        axes[0].plot(sizes, [r["total_seconds"] for r in rows], marker="o", label=label)
        axes[1].plot(sizes, [r["peak_rss_bytes"] / 2**30 for r in rows], marker="o", label=label)
    for ax, title in zip(axes, ("seconds (public model + ARPA)", "peak RSS, GiB"), strict=True):
        ax.set_xscale("log")
        ax.set_xlabel("public sentences (~10 tokens each)")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("Public side of the language model: one build of P", fontsize=10)
    fig.tight_layout()
    out = RESULTS / "lm_public.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--baseline-src", default=None, help="another checkout's src/ to compare with")
    parser.add_argument("--baseline-label", default="baseline")
    args = parser.parse_args()
    codes = {"current": SRC}
    if args.baseline_src:
        codes[args.baseline_label] = Path(args.baseline_src)
    record = header(
        "lm_public",
        {"sizes_sentences": args.sizes, "dp_words": DP_WORDS, "order": ORDER, "public_cap": 100_000},
    )
    record["results"] = {label: [] for label in codes}
    for size in args.sizes:
        path = public_corpus(size)
        vocab = dp_vocabulary(path)
        for label, src in codes.items():
            row = {"sentences": size, **measure(src, path, vocab, CACHE / f"lm_public_{label}.arpa")}
            record["results"][label].append(row)
            print(
                f"{size:>9,} sentences  {label:<28} {row['total_seconds']:8.1f} s  "
                f"{row['peak_rss_bytes'] / 2**30:5.2f} GiB",
                flush=True,
            )
    write_result("lm_public.json", record)
    figure(record)


if __name__ == "__main__":
    main()
