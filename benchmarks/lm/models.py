"""The LM benchmark's baseline and oracle models: lmplz (public-only, non-private, and each at the DP
model's vocabulary), the non-private oracle mixture, and the evaluation of a KenLM binary.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from lm.common import (
    LMPLZ_MEMORY,
    METRIC_KEYS,
    ORACLE_DISCOUNT,
    ORACLE_GRID,
    ORACLE_MIN_COUNT,
    ORACLE_WORDS,
    ORDER,
    PLACEHOLDER,
    REST,
)


def lmplz_model(text: Path, binary: Path, tmp: Path, memory: str = LMPLZ_MEMORY) -> float:
    """lmplz (order 3, ``-S memory``) on ``text`` -> ``binary`` with the ARPA file beside it;
    returns seconds."""
    from dpngram.lm.build import compile_binary
    from dpngram.lm.kenlm_bin import run_lmplz

    started = time.perf_counter()
    arpa = binary.with_suffix(".arpa")
    run_lmplz(text, arpa, ORDER, memory, tmp)
    compile_binary(arpa, binary)
    return time.perf_counter() - started


def arpa_unigrams(path: Path) -> set[str]:
    """The unigrams of an ARPA file (read up to the 2-gram section)."""
    words: set[str] = set()
    section = None
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if line.startswith("\\") and line.endswith("-grams:"):
                if section is not None:
                    break
                section = int(line[1:-7])
                continue
            if section == 1 and line:
                words.add(line.split("\t")[1])
    return words


def mapped_text(source: Path, target: Path, vocabulary: set[str]) -> int:
    """Tokenised text with tokens outside ``vocabulary`` replaced by PLACEHOLDER; returns how many."""
    mapped = 0
    with open(source, encoding="utf-8") as src, open(target, "w", encoding="utf-8") as out:
        for line in src:
            toks = line.split()
            new = [t if t in vocabulary else PLACEHOLDER for t in toks]
            mapped += sum(1 for t in toks if t not in vocabulary)
            out.write(" ".join(new) + "\n")
    return mapped


def placeholder_to_unk(src: Path, dst: Path) -> None:
    """Rewrite an lmplz ARPA file trained on mapped text: the placeholder becomes ``<unk>`` in every
    n-gram; its unigram and lmplz's own ``<unk>`` unigram merge (probabilities added, the
    placeholder's backoff kept). lmplz never lists ``<unk>`` above order 1 (--skip_symbols), so
    nothing else collides; every context still sums to one."""
    from dpngram.lm.ngram_tables import UNK

    with open(src, encoding="utf-8") as fh:
        header: list[str] = []
        for line in fh:
            header.append(line)
            if line.startswith("\\1-grams:"):
                break
        unigrams: list[str] = []
        for line in fh:
            if not line.strip():
                break
            unigrams.append(line)
        rows = [u.rstrip("\n").split("\t") for u in unigrams]
        unk = next(r for r in rows if r[1] == UNK)
        ph = next((r for r in rows if r[1] == PLACEHOLDER), None)
        with open(dst, "w", encoding="utf-8") as out:
            if ph is None:  # nothing was mapped
                out.writelines(header)
                out.writelines(unigrams)
            else:
                for line in header:
                    if line.startswith("ngram 1="):
                        line = f"ngram 1={len(rows) - 1}\n"
                    out.write(line)
                p = 10 ** float(unk[0]) + 10 ** float(ph[0])
                merged = [f"{math.log10(p):.7f}", UNK] + ph[2:]
                for r in rows:
                    if r[1] == PLACEHOLDER:
                        continue
                    out.write("\t".join(merged if r[1] == UNK else r) + "\n")
            out.write("\n")
            for line in fh:
                if ph is not None and PLACEHOLDER in line:
                    parts = line.rstrip("\n").split("\t")
                    parts[1] = " ".join(UNK if t == PLACEHOLDER else t for t in parts[1].split(" "))
                    line = "\t".join(parts) + "\n"
                out.write(line)


def at_vocab_model(
    text: Path, vocabulary: set[str], binary: Path, tmp: Path, memory: str = LMPLZ_MEMORY
) -> dict[str, Any]:
    """lmplz on ``text`` with tokens outside ``vocabulary`` as the placeholder, renamed <unk>."""
    from dpngram.lm.build import compile_binary
    from dpngram.lm.kenlm_bin import run_lmplz

    started = time.perf_counter()
    mapped = tmp / f"{binary.stem}.txt"
    n_mapped = mapped_text(text, mapped, vocabulary)
    raw = tmp / f"{binary.stem}.raw.arpa"
    run_lmplz(mapped, raw, ORDER, memory, tmp)
    mapped.unlink()
    arpa = binary.with_suffix(".arpa")
    placeholder_to_unk(raw, arpa)
    raw.unlink()
    compile_binary(arpa, binary)
    return {"build_seconds": round(time.perf_counter() - started, 2), "training_tokens_mapped": n_mapped}


def evaluate(binary: Path, eval_text: Path) -> dict[str, Any]:
    from dpngram.lm.evaluate import evaluate_file

    started = time.perf_counter()
    m = evaluate_file(binary, eval_text, lowercase=True)
    out = {k: m.get(k) for k in METRIC_KEYS}
    if m.get("accuracy_note"):
        out["accuracy_note"] = m["accuracy_note"]
    out["model_unigrams"] = len(arpa_unigrams(binary.with_suffix(".arpa")))
    out["eval_seconds"] = round(time.perf_counter() - started, 1)
    return out


def oracle_counts(train_txt: Path, top: set[str], vocabulary: set[str]):
    """(n, ngram, noisy_count) rows of EXACT training counts for the oracle's Q: order 1 every
    counted class (the 3,000 words, </s>, <unk>, REST; <s> = sentences), orders 2-3 the n-grams of
    the 3,000 words and markers seen >= ORACLE_MIN_COUNT times."""
    import polars as pl

    from dpngram.lm.ngram_tables import BOS, UNK
    from dpngram.lm.open_model import sentence_ngram_counts

    sentences = 0

    def mapped():
        nonlocal sentences
        with open(train_txt, encoding="utf-8") as fh:
            for line in fh:
                toks = line.split()
                if toks:
                    sentences += 1
                    yield [t if t in top else (REST if t in vocabulary else UNK) for t in toks]

    totals = sentence_ngram_counts(mapped(), ORDER)
    parts = [
        totals[1].select(n=pl.lit(1, pl.Int64), ngram="ngram", noisy_count="count"),
        pl.DataFrame({"n": [1], "ngram": [BOS], "noisy_count": [float(sentences)]}),
    ]
    bad = rf"(^| )({UNK}|{REST})( |$)"
    for n in range(2, ORDER + 1):
        kept = totals[n].filter((pl.col("count") >= ORACLE_MIN_COUNT) & ~pl.col("ngram").str.contains(bad))
        parts.append(kept.select(n=pl.lit(n, pl.Int64), ngram="ngram", noisy_count="count"))
    return pl.concat(parts)


def oracle_model(
    train_txt: Path, public_binary: Path, sentences: list[list[str]], eval_text: Path, work: Path
) -> dict[str, Any]:
    """The oracle (module docstring): public-only lmplz model + restricted non-private Q, the
    weight chosen on the evaluation text. Writes work/oracle.binary (+ .arpa)."""
    import kenlm
    import polars as pl

    from dpngram.lm.arpa_file import read_arpa, write_arpa
    from dpngram.lm.build import compile_binary
    from dpngram.lm.evaluate import score_sentences
    from dpngram.lm.mixture import mix_models
    from dpngram.lm.ngram_tables import BOS, EOS, MIN_PROB, UNK, ArpaModel
    from dpngram.lm.open_model import noisy_count_model

    started = time.perf_counter()
    words: Counter[str] = Counter()
    with open(train_txt, encoding="utf-8") as fh:
        for line in fh:
            words.update(line.split())
    top = {w for _, w in sorted((-c, w) for w, c in words.items())[:ORACLE_WORDS]}
    del words
    _, public = read_arpa(public_binary.with_suffix(".arpa"))
    public_words = set(public.tables[1]["ngram"].to_list()) - {BOS, EOS, UNK}
    extra = sorted(top - public_words)
    tables = dict(public.tables)
    if extra:  # the 3,000 words the public model lacks: listed with probability ~0 (normalised)
        add = pl.DataFrame(
            {"ngram": extra, "logprob": [math.log10(MIN_PROB)] * len(extra), "backoff": [None] * len(extra)},
            schema=tables[1].schema,
        )
        tables[1] = pl.concat([tables[1], add]).sort("ngram")
    base = ArpaModel(tables)
    rows = oracle_counts(train_txt, top, public_words | top)
    private = noisy_count_model(rows, base, ORDER, threshold=ORACLE_MIN_COUNT, discount=ORACLE_DISCOUNT)
    estimate_seconds = time.perf_counter() - started
    quiet = kenlm.Config()
    quiet.show_progress = False
    grid: dict[str, float] = {}
    best: tuple[float, float] | None = None
    mix_seconds: dict[float, float] = {}
    for lam in ORACLE_GRID:
        t = time.perf_counter()
        path = work / f"oracle_{lam:g}.arpa"
        write_arpa(mix_models(base, private, lam), path)
        mix_seconds[lam] = time.perf_counter() - t
        ppl = score_sentences(kenlm.Model(str(path), quiet), sentences)["open_vocab_perplexity"]
        grid[f"{lam:g}"] = round(ppl, 3)
        if best is None or ppl < best[1]:
            if best is not None:
                (work / f"oracle_{best[0]:g}.arpa").unlink()
            best = (lam, ppl)
        else:
            path.unlink()
    assert best is not None
    binary = work / "oracle.binary"
    os.replace(work / f"oracle_{best[0]:g}.arpa", binary.with_suffix(".arpa"))
    t = time.perf_counter()
    compile_binary(binary.with_suffix(".arpa"), binary)
    compile_seconds = time.perf_counter() - t
    counts = {str(n): int((rows["n"] == n).sum()) for n in range(1, ORDER + 1)}
    return {
        "binary": binary,
        "build_seconds": round(estimate_seconds + mix_seconds[best[0]] + compile_seconds, 2),
        "search_seconds": round(time.perf_counter() - started, 2),
        "mix_weight": best[0],
        "open_vocab_perplexity_by_weight": grid,
        "private_words": len(top),
        "private_words_not_in_public_model": len(extra),
        "exact_count_rows_by_order": counts,
    }
