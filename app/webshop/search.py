"""BM25 product search with Lucene's parameters (k1=0.9, b=0.4), top 50.

The document of a product is, lowercased: title + description + first bullet point +
options as ``"<name>: <v1>, <v2>, and <name2>: ..."`` (docs/webshop.md, "Search").

Library choice (measured by ``benchmarks/search.py``): ``bm25s`` builds the index; its
precomputed per-(term, document) Lucene scores are a CSC matrix saved as ``.npy`` files,
memory-mapped at start-up (no parsing, pages shared between processes). Queries are
scored here with exact MaxScore pruning (see :class:`SearchIndex`); bm25s's own
``retrieve`` scores every posting with ``np.add.at`` and is several times slower.
``tantivy`` (Rust) was the other candidate: it builds faster, but its Python API exposes
no BM25 parameters (its k1=1.2, b=0.75 are fixed), so it would not rank like the
original, and on generated catalogs its query p50 was 2x (100k) to 2.5x (1M) ours.

Tokens: lowercase word characters; Lucene's English stop words are dropped; no
stemming. Ties are broken by document order, as in Lucene.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from app.webshop.loader import Product

logger = logging.getLogger(__name__)

TOP_K = 50
_EPS = 1e-5
# Above this many postings per candidate, a remaining term is looked up by binary search.
_DENSE_LOOKUP_RATIO = 8
COLMAX_FILE = "colmax.npy"
K1 = 0.9
B = 0.4
# Lucene's English stop words (StandardAnalyzer's default set).
_STOPWORD_TEXT = (
    "a an and are as at be but by for if in into is it no not of on or such that the "
    "their then there these they this to was will with"
)
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_TOKEN = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


def options_text(product: Product) -> str:
    return ", and ".join(f"{name}: {', '.join(values)}" for name, values in product.options)


def document_text(product: Product) -> str:
    first_bullet = product.bullets[0] if product.bullets else ""
    parts = [product.name, product.description, first_bullet, options_text(product)]
    return " ".join(p for p in parts if p).lower()


def column_maxima(data: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Each term's largest per-document score: its MaxScore upper bound."""
    lengths = np.diff(indptr)
    out = np.zeros(len(lengths), dtype=np.float32)
    nonempty = lengths > 0
    if data.size:
        out[nonempty] = np.maximum.reduceat(data, indptr[:-1][nonempty])
    return out


class SearchIndex:
    """A read-only BM25 index over the catalog's products (document id = product index).

    The arrays are memory-mapped ``.npy`` files, held as plain ndarray views (slicing an
    ``np.memmap`` costs microseconds of Python per slice, a view does not).

    Queries use exact MaxScore pruning. Terms are taken rarest first (highest idf) and
    their postings added into a per-thread score buffer until the 50th best partial score
    exceeds the most that all remaining terms could still add (the sum of their largest
    per-document scores): no document untouched so far can then reach the top 50. The
    remaining, frequent terms are looked up only for the documents that can still get
    there: by binary search in their sorted postings when few candidates remain, else by
    spreading the posting list into the score buffer and gathering (the first lookups
    often face tens of thousands of candidates, where a search per candidate cost more
    than the whole list). Theta is kept from the k best so far plus each new term's
    postings, so it costs no pass over all candidates. On instruction queries this reads
    about a tenth of the postings, and the result equals :meth:`search_exhaustive` (same
    terms, same order of float32 additions, same tie-break).
    """

    def __init__(
        self,
        vocab: dict[str, int],
        data: np.ndarray,
        indices: np.ndarray,
        indptr: np.ndarray,
        num_docs: int,
        colmax: np.ndarray | None = None,
    ) -> None:
        self._vocab = vocab
        self._data = np.asarray(data)
        self._indices = np.asarray(indices)
        self._indptr = np.asarray(indptr, dtype=np.int64)
        self._lengths = np.diff(self._indptr)
        self._colmax = colmax if colmax is not None else column_maxima(self._data, self._indptr)
        self.num_docs = num_docs
        self._local = threading.local()

    @staticmethod
    def build(products: Iterable[Product], path: Path) -> None:
        """Builds the index into ``path`` (atomically: a temp folder renamed at the end)."""
        import bm25s

        vocab: dict[str, int] = {}
        corpus_ids: list[list[int]] = []
        for product in products:
            ids = []
            for token in tokenize(document_text(product)):
                tid = vocab.get(token)
                if tid is None:
                    tid = vocab[token] = len(vocab)
                ids.append(tid)
            corpus_ids.append(ids)
        # bm25s needs one token id for the empty document case.
        empty = vocab.setdefault("", len(vocab))
        corpus_ids = [ids or [empty] for ids in corpus_ids]
        model = bm25s.BM25(k1=K1, b=B, method="lucene")
        model.scores = model.build_index_from_ids(
            list(range(len(vocab))), corpus_ids, show_progress=False
        )
        model.vocab_dict = vocab
        del corpus_ids
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".index-", dir=path.parent))
        tmp.chmod(0o755)
        try:
            model.save(tmp, show_progress=False)
            indptr = np.asarray(model.scores["indptr"], dtype=np.int64)
            np.save(tmp / COLMAX_FILE, column_maxima(np.asarray(model.scores["data"]), indptr))
            try:
                tmp.rename(path)
            except OSError:
                if not (path / "params.index.json").exists():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @classmethod
    def load(cls, path: Path) -> SearchIndex:
        import bm25s

        model = bm25s.BM25.load(path, mmap=True, show_progress=False, verbosity=0)
        scores = model.scores
        colmax_path = path / COLMAX_FILE
        colmax = np.load(colmax_path) if colmax_path.exists() else None
        return cls(
            model.vocab_dict,
            scores["data"],
            scores["indices"],
            scores["indptr"],
            int(scores["num_docs"]),
            colmax,
        )

    @classmethod
    def open_or_build(cls, products: Iterable[Product], path: Path) -> SearchIndex:
        if not (path / "params.index.json").exists():
            logger.info("Building the search index in %s", path)
            cls.build(products, path)
        return cls.load(path)

    def _terms(self, query: str) -> list[int]:
        """Query term ids, rarest first (ties by id): the order every path adds scores in."""
        ids = [self._vocab[t] for t in tokenize(query) if t in self._vocab]
        return sorted(ids, key=lambda t: (int(self._lengths[t]), t))

    def _buffer(self) -> np.ndarray:
        """This thread's score buffer, all zeros between queries."""
        scores = getattr(self._local, "scores", None)
        if scores is None:
            scores = self._local.scores = np.zeros(self.num_docs, dtype=np.float32)
        return scores

    def search(self, query: str, k: int = TOP_K) -> list[int]:
        """Product indices of the best ``k`` matches, best first; [] when nothing matches.

        A repeated query term counts again, as in a Lucene boolean query; ties are broken
        by product index, as Lucene breaks them by document id."""
        terms = self._terms(query)
        if not terms:
            return []
        indptr, indices, data = self._indptr, self._indices, self._data
        bounds = [float(self._colmax[t]) for t in terms]
        remaining = sum(bounds)
        scores = self._buffer()
        new_docs: list[np.ndarray] = []
        done = 0
        theta = 0.0
        # The (up to) k best documents so far. Scores only grow, so after adding a term
        # the k best are among the previous best and the term's postings: theta comes
        # from that small pool, not from every candidate seen.
        best = indices[:0]
        try:
            for term, bound in zip(terms, bounds, strict=True):
                start, end = indptr[term], indptr[term + 1]
                idx = indices[start:end]
                current = scores[idx]
                # Every BM25 contribution is > 0, so a zero marks a document not seen yet.
                new_docs.append(idx[current == 0])
                updated = current + data[start:end]
                scores[idx] = updated
                remaining -= bound
                done += 1
                if done == len(terms):
                    break
                # Postings below the old theta cannot displace the previous k best.
                rising = updated >= theta
                pool = np.concatenate((_not_in(best, idx), idx[rising]))
                if len(pool) < k:
                    best = pool
                    continue
                pool_scores = scores[pool]
                order = np.argpartition(pool_scores, len(pool) - k)
                best = pool[order[len(pool) - k :]]
                theta = float(pool_scores[order[len(pool) - k]])
                if theta > remaining * (1 + _EPS) + _EPS:
                    break
            cand = np.concatenate(new_docs)
            partial = scores[cand]
        finally:
            for docs in new_docs:
                scores[docs] = 0.0
        rest = terms[done:]
        rest_bounds = bounds[done:]
        is_sorted = False
        for i, term in enumerate(rest):
            # Only documents that could still reach the current k-th best matter; the
            # threshold rises and the bound falls with every term, so the set shrinks.
            slack = remaining * (1 + _EPS) + _EPS
            if len(cand) > k:
                if i > 0:  # on the first term, theta is still the one phase 1 ended with
                    theta = float(np.partition(partial, len(cand) - k)[len(cand) - k])
                keep = partial + slack >= theta
                cand, partial = cand[keep], partial[keep]
            start, end = indptr[term], indptr[term + 1]
            if len(cand) * _DENSE_LOOKUP_RATIO >= end - start:
                # Many candidates against this posting list: spreading the list into the
                # (zeroed) score buffer and gathering is cheaper than a binary search per
                # candidate. A document the term misses adds an exact 0.0.
                col = indices[start:end]
                try:
                    scores[col] = data[start:end]
                    partial += scores[cand]
                finally:
                    scores[col] = 0.0
            else:
                if not is_sorted:
                    # Binary search needs sorted documents; by now the set is small.
                    order = np.argsort(cand)
                    cand, partial = cand[order], partial[order]
                    is_sorted = True
                col = indices[start:end]
                pos = np.minimum(np.searchsorted(col, cand), len(col) - 1)
                hit = col[pos] == cand
                partial[hit] += data[start + pos[hit]]
            remaining -= rest_bounds[i]
        return _top_k(cand, partial, k)

    def search_exhaustive(self, query: str, k: int = TOP_K) -> list[int]:
        """Scores every posting of every term: the reference :meth:`search` must equal."""
        terms = self._terms(query)
        if not terms:
            return []
        scores = np.zeros(self.num_docs, dtype=np.float32)
        for term in terms:
            start, end = self._indptr[term], self._indptr[term + 1]
            scores[self._indices[start:end]] += self._data[start:end]
        hits = np.flatnonzero(scores)
        return _top_k(hits, scores[hits], k)


def _not_in(docs: np.ndarray, postings: np.ndarray) -> np.ndarray:
    """The ``docs`` absent from ``postings`` (sorted, as every posting list is)."""
    if not len(docs) or not len(postings):
        return docs
    pos = np.minimum(np.searchsorted(postings, docs), len(postings) - 1)
    return docs[postings[pos] != docs]


def _top_k(ids: np.ndarray, scores: np.ndarray, k: int) -> list[int]:
    """Best ``k`` by score, ties by smaller id; documents scoring 0 are no match."""
    positive = scores > 0
    ids, scores = ids[positive], scores[positive]
    if len(ids) > k:
        kth = np.partition(scores, len(ids) - k)[len(ids) - k]
        at_least = scores >= kth
        ids, scores = ids[at_least], scores[at_least]
    order = np.lexsort((ids, -scores))[:k]
    return [int(i) for i in ids[order]]
