"""Back-off n-gram scoring on arrays, compiled (numba): what ``kenlm.Model.full_scores`` gives, for
many sentences at once and without writing or parsing an ARPA file.

The held-out scoring of stage ``lm_counts`` (the mixture weight's selection and the private-domain
verdict) scores every event (each token and ``</s>``) of some users' sentences under a few models it
holds in memory. Through KenLM that meant writing each model as an ARPA file, parsing it back
(about 0.5 s a model on SOTU's public model) and one Python call per sentence and model, which at
1M users took worker processes and about 40 s of the full default split. :class:`BackoffScorer`
reads the model's tables directly: per order n >= 2, each listed n-gram is keyed by (its context's
row at order n - 1, its last word's unigram row) in an open-addressing hash table, and a compiled
loop walks every sentence once.

The probability is the ARPA back-off rule, as KenLM computes it: with the context h cut to its last
N - 1 words (``<s>`` first), p(w | h) = p listed for (h, w) if the model lists it, else
bo(h) + p(w | h without its first word), where bo(h) = 0 when h is not listed; a word outside the
vocabulary is ``<unk>``, in the context as well. The model must be closed (every listed n-gram's
context listed one order down), as :meth:`dpngram.lm.ngram_tables.ArpaModel.structure` requires. KenLM
stores probabilities as 32-bit floats, these are the tables' 64-bit values: the two agree to about
1e-6 in log10 (tests/test_backoff_scorer.py compares them on every event).

The compiled functions are cached next to this file (numba ``cache=True``): the first process on a
machine compiles them (about 3 s), later ones load them (about 0.3 s).

The same tables also rank next words (:meth:`BackoffScorer.scores_and_hits`, the top-k accuracy of the
model card's held-out comparison), by the rule of :class:`dpngram.lm.evaluate.NextWordPredictor`.

Owns: :class:`BackoffScorer` (event scores, top-k hits).
Imports: dpngram.lm.ngram_tables; numba, numpy, polars.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl
from numba import njit

from dpngram.lm.ngram_tables import ArpaModel

BOS, EOS, UNK = "<s>", "</s>", "<unk>"

_EMPTY = np.int64(-1)


@njit(cache=True, nogil=True)
def _slot(key: np.int64, mask: np.int64) -> np.int64:  # pragma: no cover - compiled
    x = np.uint64(key)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    return np.int64(x & np.uint64(mask))


@njit(cache=True, nogil=True)
def _fill(table_keys, table_rows, start, mask, keys):  # pragma: no cover - compiled
    """Insert ``keys[r]`` -> r into the table at [start, start + mask]."""
    for r in range(keys.size):
        h = _slot(keys[r], mask)
        while table_keys[start + h] != -1:
            h = (h + 1) & mask
        table_keys[start + h] = keys[r]
        table_rows[start + h] = r


@njit(cache=True, nogil=True)
def _find(table_keys, table_rows, start, mask, key):  # pragma: no cover - compiled
    h = _slot(key, mask)
    while True:
        k = table_keys[start + h]
        if k == key:
            return table_rows[start + h]
        if k == -1:
            return -1
        h = (h + 1) & mask


@njit(cache=True, nogil=True)
def _rank_top(
    event,
    clen,
    crow,
    kmax,
    logprob,
    backoff,
    row_offset,
    cont_start,
    cont_word,
    cont_lp,
    root_words,
    rank,
    stamp,
    top,
):  # pragma: no cover - compiled
    """The first ``kmax`` words of one context's ranking into ``top`` (-1 pads a shorter ranking);
    ``crow``: its context rows per order, -1 where unlisted.

    The ranking of a context h is that of :class:`dpngram.lm.evaluate.NextWordPredictor`: h's listed
    continuations merged, by (-log10 p, string rank) with h's own ones first on a tie, with the
    ranking of h without its first word shifted by bo(h), skipping the words h lists.

    Over 60 lines: one compiled merge (the caps, the root, then level by level), called from
    :func:`_walk`'s hot loop; its 14 arrays would travel through every helper split off."""
    # how many items each level must yield: kmax at the top, plus what the levels above can skip
    cap = np.empty(clen + 1, dtype=np.int64)
    need = kmax
    for m in range(clen, -1, -1):
        cap[m] = need
        if m >= 1 and crow[m] >= 0:
            c = row_offset[m] + crow[m]
            need += cont_start[c + 1] - cont_start[c]
    # level 0: the root (unigrams by -log10 p, rank), its first cap[0] words
    nc = min(cap[0], root_words.size)
    cur_s = np.empty(nc, dtype=np.float64)
    cur_w = np.empty(nc, dtype=np.int64)
    for j in range(nc):
        cur_w[j] = root_words[j]
        cur_s[j] = logprob[root_words[j]]
    for m in range(1, clen + 1):
        if crow[m] < 0:
            continue  # an unlisted context: the ranking of the shorter one, unchanged
        c = row_offset[m] + crow[m]
        lo, hi = cont_start[c], cont_start[c + 1]
        for j in range(lo, hi):
            stamp[m, cont_word[j]] = event
        bo = backoff[c]
        out_s = np.empty(cap[m], dtype=np.float64)
        out_w = np.empty(cap[m], dtype=np.int64)
        no = 0
        x = lo
        y = 0
        while no < cap[m]:
            while y < nc and stamp[m, cur_w[y]] == event:
                y += 1
            have_own = x < hi
            have_back = y < nc
            if not have_own and not have_back:
                break
            take_own = have_own
            if have_own and have_back:
                back_s = bo + cur_s[y]
                own_s = cont_lp[x]
                take_own = own_s > back_s or (own_s == back_s and rank[cont_word[x]] <= rank[cur_w[y]])
            if take_own:
                out_s[no] = cont_lp[x]
                out_w[no] = cont_word[x]
                x += 1
            else:
                out_s[no] = bo + cur_s[y]
                out_w[no] = cur_w[y]
                y += 1
            no += 1
        cur_s, cur_w, nc = out_s, out_w, no
    for k in range(kmax):
        top[k] = cur_w[k] if k < nc else -1


@njit(cache=True, nogil=True)
def _walk(
    words,
    sentence_offsets,
    bos,
    eos,
    order,
    n_words,
    logprob,
    backoff,
    row_offset,
    keys,
    rows,
    start,
    mask,
    out,
    ranking,
    predictable,
    kmax,
    hits,
    top_cache,
):  # pragma: no cover - compiled
    """One pass over the sentences: sentence s is ``words[sentence_offsets[s]:sentence_offsets[s + 1]]``
    (unigram rows); its events are its words, then ``</s>``. ``keys``, ``rows``, ``start``,
    ``mask``: the hash tables of :class:`BackoffScorer`.

    * ``out``: log10 p of every event, in order (the ARPA back-off rule, module docstring);
    * with ``kmax`` > 0, ``hits[k - 1]`` += 1 for every token whose word is ``predictable`` (listed,
      not a marker) and among the k most probable next words after its context (k = 1..kmax), as
      :func:`_rank_top` ranks them; a ranking's first kmax words are computed once per longest listed
      context (it fixes the shorter ones): ``top_cache[its global row]``, -2 while not computed.

    Over 60 lines: the hot loop of every held-out score; with its back-off lookup in a compiled
    helper (even ``inline="always"``) it ran about 30% slower, so it stays one piece."""
    cont_start, cont_word, cont_lp, root_words, rank = ranking
    ctx = np.empty(max(order - 1, 1), dtype=np.int64)  # the last N - 1 context words, oldest first
    crow = np.empty(order, dtype=np.int64)  # crow[m]: row at order m of the context's last m words
    stamp = np.zeros((order if kmax > 0 else 0, n_words), dtype=np.int64)  # stamp[m, w] == event: h_m lists w
    o = 0
    for s in range(sentence_offsets.size - 1):
        a, b = sentence_offsets[s], sentence_offsets[s + 1]
        ctx[0] = bos
        clen = 1 if order > 1 else 0
        for i in range(a, b + 1):
            w = words[i] if i < b else eos
            _context_rows(ctx, clen, n_words, keys, rows, start, mask, crow)
            acc = 0.0
            lp = 0.0
            found = False
            for m in range(clen, 0, -1):
                c = crow[m]
                if c < 0:
                    continue
                f = _find(keys, rows, start[m + 1], mask[m + 1], c * n_words + w)
                if f >= 0:
                    lp = acc + logprob[row_offset[m + 1] + f]
                    found = True
                    break
                acc += backoff[row_offset[m] + c]
            if not found:
                lp = acc + logprob[w]
            out[o] = lp
            o += 1
            if i == b:
                break
            if kmax > 0 and predictable[w]:
                deepest = 0  # order 1 only: the root's ranking, cached at row 0
                for m in range(1, clen + 1):
                    if crow[m] >= 0:
                        deepest = row_offset[m] + crow[m]
                top = top_cache[deepest]
                if top[0] == -2:
                    _rank_top(i + 1, clen, crow, kmax, logprob, backoff, row_offset, cont_start, cont_word,
                              cont_lp, root_words, rank, stamp, top)  # fmt: skip
                for k in range(kmax):
                    if top[k] == w:
                        for kk in range(k, kmax):
                            hits[kk] += 1
                        break
            clen = _push(ctx, clen, order, w)


@njit(cache=True, nogil=True)
def _context_rows(ctx, clen, n_words, keys, rows, start, mask, crow):  # pragma: no cover - compiled
    """``crow[m]`` (m = 1..clen): the row at order m of the context's last m words ``ctx[:clen]``
    (oldest first), -1 where the model does not list them."""
    for m in range(1, clen + 1):
        r = ctx[clen - m]
        for t in range(1, m):
            if r < 0:
                break
            n = t + 1
            r = _find(keys, rows, start[n], mask[n], r * n_words + ctx[clen - m + t])
        crow[m] = r


@njit(cache=True, nogil=True)
def _push(ctx, clen, order, w):  # pragma: no cover - compiled
    """Append word row ``w`` to the context ``ctx[:clen]``, keeping its last N - 1 words; the new length."""
    if order == 1:
        return clen
    if clen < order - 1:
        ctx[clen] = w
        return clen + 1
    for j in range(clen - 1):
        ctx[j] = ctx[j + 1]
    ctx[clen - 1] = w
    return clen


@njit(cache=True, nogil=True)
def _visited_contexts(
    words, sentence_offsets, bos, order, n_words, row_offset, keys, rows, start, mask, visited
):  # pragma: no cover - compiled
    """Mark in ``visited`` (global rows of orders 1..N - 1) every listed context a token of the
    sentences follows (as :func:`_walk` reads them): the only rankings its top-k hits can need."""
    ctx = np.empty(max(order - 1, 1), dtype=np.int64)
    crow = np.empty(order, dtype=np.int64)
    for s in range(sentence_offsets.size - 1):
        ctx[0] = bos
        clen = 1 if order > 1 else 0
        for i in range(sentence_offsets[s], sentence_offsets[s + 1]):
            _context_rows(ctx, clen, n_words, keys, rows, start, mask, crow)
            for m in range(1, clen + 1):
                if crow[m] >= 0:
                    visited[row_offset[m] + crow[m]] = True
            clen = _push(ctx, clen, order, words[i])


def _probabilities(model: ArpaModel) -> dict[str, np.ndarray]:
    """Every row's log10 probability and back-off weight (0 where none), orders 1..N in turn."""
    orders = range(1, model.order + 1)
    return {
        "logprob": np.concatenate([model.tables[n]["logprob"].cast(pl.Float64).to_numpy() for n in orders]),
        "backoff": np.concatenate(
            [model.tables[n]["backoff"].cast(pl.Float64).fill_null(0.0).to_numpy() for n in orders]
        ),
    }


@dataclass(frozen=True)
class BackoffScorer:
    """A back-off model's tables as arrays for :func:`_walk` (see the module docstring)."""

    order: int
    vocabulary: pl.DataFrame  # (word, row): the unigram rows
    bos: int
    eos: int
    unk: int
    logprob: np.ndarray
    backoff: np.ndarray
    row_offset: np.ndarray  # row_offset[n]: order n's first row in logprob / backoff
    table_keys: np.ndarray
    table_rows: np.ndarray
    table_start: np.ndarray  # per order n >= 2: its hash table's first slot, and mask (size - 1)
    table_mask: np.ndarray
    _model: ArpaModel | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_model(cls, model: ArpaModel, like: BackoffScorer | None = None) -> BackoffScorer:
        """The scorer of ``model``. ``like``: a scorer of a model with the same n-grams in the same
        rows, sharing its structure object (:func:`dpngram.lm.mixture.adapt_to_unigrams` of
        it): its vocabulary and hash tables are reused and only the probabilities are read (the
        selection scores P adapted at several strengths). Without that shared structure, ``like``
        is ignored."""
        shared = like._model.derived_structure() if like is not None and like._model is not None else None
        if like is not None and shared is not None and model.derived_structure() is shared:
            return replace(like, **_probabilities(model), _model=model)
        order = model.order
        words = model.tables[1]["ngram"]
        vocabulary = (
            pl.DataFrame({"word": words}).with_row_index("row").select("word", pl.col("row").cast(pl.Int64))
        )
        rows = dict(vocabulary.filter(pl.col("word").is_in([BOS, EOS, UNK])).iter_rows())
        missing = [w for w in (BOS, EOS, UNK) if w not in rows]
        if missing:
            raise ValueError(f"model: the unigrams do not list {', '.join(missing)}")
        structure = model.structure() if order > 1 else {}
        n_words = len(words)
        heights = [model.tables[n].height for n in range(1, order + 1)]
        row_offset = np.zeros(order + 2, dtype=np.int64)
        row_offset[2 : order + 2] = np.cumsum(heights)
        logprob, backoff = _probabilities(model).values()
        sizes = np.zeros(order + 1, dtype=np.int64)
        for n in range(2, order + 1):
            sizes[n] = 1 << max(4, int(2 * heights[n - 1] - 1).bit_length())
        table_start = np.zeros(order + 1, dtype=np.int64)
        table_start[1:] = np.cumsum(sizes)[:-1]
        table_keys = np.full(int(sizes.sum()), _EMPTY, dtype=np.int64)
        table_rows = np.zeros(int(sizes.sum()), dtype=np.int64)
        for n in range(2, order + 1):
            links = structure[n]
            keys = links.context.astype(np.int64) * n_words + links.word.astype(np.int64)
            _fill(table_keys, table_rows, table_start[n], sizes[n] - 1, keys)
        return cls(
            order=order,
            vocabulary=vocabulary,
            bos=rows[BOS],
            eos=rows[EOS],
            unk=rows[UNK],
            logprob=logprob,
            backoff=backoff,
            row_offset=row_offset,
            table_keys=table_keys,
            table_rows=table_rows,
            table_start=table_start,
            table_mask=np.maximum(sizes - 1, 0),
            _model=model,
        )

    def word_rows(self, tokens: pl.Series) -> np.ndarray:
        """Each token's unigram row (``<unk>``'s for a token the model does not list)."""
        found = (
            pl.DataFrame({"word": tokens.cast(pl.String)})
            .join(self.vocabulary, on="word", how="left", maintain_order="left")["row"]
            .fill_null(self.unk)
        )
        return found.to_numpy().astype(np.int64, copy=False)

    def score(self, word_rows: np.ndarray, sentence_offsets: np.ndarray) -> np.ndarray:
        """log10 p of every event, sentence after sentence (each sentence's words, then ``</s>``):
        ``len(word_rows) + len(sentence_offsets) - 1`` values. Sentence s is
        ``word_rows[sentence_offsets[s]:sentence_offsets[s + 1]]``."""
        return self._run(word_rows, sentence_offsets, 0)[0]

    def _run(
        self, word_rows: np.ndarray, sentence_offsets: np.ndarray, kmax: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(:meth:`score`, hits of :meth:`scores_and_hits`; no ranking when ``kmax`` is 0) in one pass."""
        offsets = np.ascontiguousarray(sentence_offsets, dtype=np.int64)
        out = np.empty(word_rows.size + max(offsets.size - 1, 0), dtype=np.float64)
        hits = np.zeros(kmax, dtype=np.int64)
        if kmax > 0:
            r = self._ranking_arrays(self._visited_contexts(word_rows, offsets))
            ranking = (r["cont_start"], r["cont_word"], r["cont_lp"], r["root"], r["rank"])
            predictable = r["predictable"]
            # one row per possible context: the rows of orders 1..N - 1 (never the top order's)
            top_cache = np.full((max(int(self.row_offset[self.order]), 1), kmax), -2, dtype=np.int64)
        else:
            none = np.zeros(0, dtype=np.int64)
            ranking = (none, none, np.zeros(0, dtype=np.float64), none, none)
            predictable = np.zeros(0, dtype=np.bool_)
            top_cache = np.zeros((0, 0), dtype=np.int64)
        _walk(
            np.ascontiguousarray(word_rows, dtype=np.int64), offsets, self.bos, self.eos, self.order,
            self.vocabulary.height, self.logprob, self.backoff, self.row_offset, self.table_keys,
            self.table_rows, self.table_start, self.table_mask, out, ranking, predictable, kmax, hits,
            top_cache,
        )  # fmt: skip
        return out, hits

    def _visited_contexts(self, word_rows: np.ndarray, sentence_offsets: np.ndarray) -> np.ndarray:
        """Which context rows (global rows of orders 1..N - 1) the sentences' tokens follow."""
        visited = np.zeros(max(int(self.row_offset[self.order]), 1), dtype=np.bool_)
        _visited_contexts(
            np.ascontiguousarray(word_rows, dtype=np.int64), sentence_offsets, self.bos, self.order,
            self.vocabulary.height, self.row_offset, self.table_keys, self.table_rows, self.table_start,
            self.table_mask, visited,
        )  # fmt: skip
        return visited

    def _ranking_arrays(self, visited: np.ndarray) -> dict[str, np.ndarray]:
        """For :meth:`scores_and_hits`: each unigram row's rank in string order, which rows can be
        predicted (not ``<s>``, ``</s>``, ``<unk>``), the root ranking (those rows by
        (-log10 p, rank)) and per ``visited`` context row (all orders, global rows) its
        continuations sorted the same way (CSR: ``cont_start``, ``cont_word``, ``cont_lp``; an
        unvisited context has none). Sorting only the visited contexts' continuations (those of
        the scored text) rather than every n-gram's saves about 0.2 s a model on Brown's P."""
        model = self._model
        if model is None:
            raise ValueError("scores_and_hits: the scorer was not built from a model")
        words = self.vocabulary["word"]
        rank = words.rank("ordinal").cast(pl.Int64).to_numpy() - 1
        predictable = np.ones(words.len(), dtype=np.bool_)
        predictable[[self.bos, self.eos, self.unk]] = False
        uni_lp = self.logprob[: words.len()]
        keep = np.flatnonzero(predictable)
        root = keep[np.lexsort((rank[keep], -uni_lp[keep]))]
        ctxs, conts, lps = [], [], []
        structure = model.structure() if self.order > 1 else {}
        for n in range(2, self.order + 1):
            links = structure[n]
            word = links.word.astype(np.int64)
            context = self.row_offset[n - 1] + links.context.astype(np.int64)
            ok = predictable[word] & visited[context]
            ctxs.append(context[ok])
            conts.append(word[ok])
            lps.append(self.logprob[self.row_offset[n] : self.row_offset[n + 1]][ok])
        ctx = np.concatenate(ctxs) if ctxs else np.zeros(0, dtype=np.int64)
        cont = np.concatenate(conts) if conts else np.zeros(0, dtype=np.int64)
        lp = np.concatenate(lps) if lps else np.zeros(0, dtype=np.float64)
        ordered = pl.DataFrame({"ctx": ctx, "neg_lp": -lp, "rank": rank[cont], "word": cont}).sort(
            "ctx", "neg_lp", "rank"
        )
        return {
            "rank": rank,
            "predictable": predictable,
            "root": root,
            "cont_start": np.searchsorted(
                ordered["ctx"].to_numpy(), np.arange(int(self.row_offset[self.order + 1]) + 1)
            ),
            "cont_word": ordered["word"].to_numpy().astype(np.int64),
            "cont_lp": -ordered["neg_lp"].to_numpy().astype(np.float64),
        }

    def scores_and_hits(
        self, word_rows: np.ndarray, sentence_offsets: np.ndarray, kmax: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(:meth:`score`, hits): ``hits[k - 1]`` counts the tokens (not ``</s>``) whose word is among
        the k most probable next words after ``<s>`` and the preceding tokens, k = 1..``kmax``; ties
        by the word string, as :class:`dpngram.lm.evaluate.NextWordPredictor` ranks them. A token
        outside the vocabulary (``<unk>``) is never a hit. One pass over the sentences."""
        return self._run(word_rows, sentence_offsets, kmax)
