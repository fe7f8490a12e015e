"""benchmarks/lm_growth_bench.py's assumptions: the generated users of a smaller corpus are the start
of a larger one's, and lm_bench's split scores exactly ``Corpus.scored_ids`` when given."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import lm_bench  # noqa: E402  (benchmarks/ is not a package)
import lm_growth_bench  # noqa: E402

from dpngram.text.sample import write_sample  # noqa: E402


def test_smaller_sample_is_a_prefix_at_chunk_multiples(tmp_path: Path) -> None:
    small = write_sample(tmp_path / "s", n_users=30, seed=7, public_sentences=5, chunk_users=10)
    large = write_sample(tmp_path / "l", n_users=50, seed=7, public_sentences=5, chunk_users=10)
    assert lm_growth_bench.is_prefix(small["users"], large["users"])
    assert not lm_growth_bench.is_prefix(large["users"], small["users"])
    # a size off the chunk grid draws its last chunk differently: the check must notice
    odd = write_sample(tmp_path / "o", n_users=25, seed=7, public_sentences=5, chunk_users=10)
    assert not lm_growth_bench.is_prefix(odd["users"], large["users"])


def test_split_scores_exactly_the_given_held_out_users(tmp_path: Path) -> None:
    ids = [f"u{i:03d}" for i in range(200)]
    held = [u for u in ids if lm_bench.user_hash(u) % lm_bench.HOLDOUT_MOD == 0]
    trained = [u for u in ids if u not in held]
    assert len(held) >= 4
    users = tmp_path / "users.jsonl.gz"
    with gzip.open(users, "wt", encoding="utf-8") as fh:
        for u in ids:
            fh.write(json.dumps({"user_id": u, "text": f"text of {u}"}) + "\n")
    chosen = frozenset([held[0], held[2], trained[0]])  # a training user is never scored
    corpus = lm_bench.Corpus("t", users, users, 1, {}, chosen)
    split = lm_bench.split_users(corpus, tmp_path)
    scored = split["eval"].read_text(encoding="utf-8").splitlines()
    assert scored == [f"text of {held[0]}", f"text of {held[2]}"]
    assert split["scored_users"] == 2
    assert split["held_out_users"] == len(held)
    assert split["train_users"] == len(trained)
    # without scored_ids, score_every = 1 scores every held-out user
    every = lm_bench.split_users(lm_bench.Corpus("t", users, users, 1, {}), tmp_path)
    assert every["scored_users"] == len(held)
