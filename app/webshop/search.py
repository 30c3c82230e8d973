"""BM25 product search with Lucene's parameters (k1=0.9, b=0.4), top 50.

The document of a product is, lowercased: title + description + first bullet point +
options as ``"<name>: <v1>, <v2>, and <name2>: ..."`` (docs/webshop.md, "Search").

Library choice (measured by ``benchmarks/search.py``): ``bm25s`` builds the index; its
precomputed per-(term, document) Lucene scores are a CSC matrix saved as ``.npy`` files,
memory-mapped at start-up (no parsing, shared page cache between processes). Queries are
scored here with exact MaxScore pruning (see :class:`SearchIndex`); bm25s's own
``retrieve`` scores every posting with ``np.add.at`` and is many times slower. ``tantivy``
was the other candidate: faster to build, but its BM25 constants (k1=1.2, b=0.75) cannot
be set from Python, so it would not rank like the original.

Tokens: lowercase word characters; Lucene's English stop words are dropped; no
stemming. Ties are broken by document order, as in Lucene.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from app.webshop.loader import Product

logger = logging.getLogger(__name__)

TOP_K = 50
COLMAX_FILE = "colmax.npy"
_EPS = 1e-5
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
    """Each term's largest per-document score: the MaxScore upper bound of the term."""
    lengths = np.diff(indptr)
    out = np.zeros(len(lengths), dtype=np.float32)
    nonempty = lengths > 0
    if data.size:
        out[nonempty] = np.maximum.reduceat(np.asarray(data), np.asarray(indptr[:-1])[nonempty])
    return out


class SearchIndex:
    """A read-only BM25 index over the catalog's products (document id = product index).

    Queries use exact MaxScore pruning: terms are added rarest first into a per-thread
    score buffer until the 50th best partial score exceeds what all remaining terms could
    still add; the remaining (frequent, low-idf) terms are then only looked up for the
    documents that can still reach the top 50. The result equals full BM25 scoring, but a
    query touches a few thousand postings instead of hundreds of thousands.
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
        self._data = data
        self._indices = indices
        self._indptr = np.asarray(indptr, dtype=np.int64)
        self.num_docs = num_docs
        self._colmax = colmax if colmax is not None else column_maxima(data, self._indptr)
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
        try:
            model.save(tmp, show_progress=False)
            colmax = column_maxima(model.scores["data"], np.asarray(model.scores["indptr"]))
            np.save(tmp / COLMAX_FILE, colmax)
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

    def _buffer(self) -> np.ndarray:
        buf = getattr(self._local, "scores", None)
        if buf is None:
            buf = self._local.scores = np.zeros(self.num_docs, dtype=np.float32)
        return buf

    def _postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        start, end = int(self._indptr[term]), int(self._indptr[term + 1])
        return self._indices[start:end], self._data[start:end]

    def search(self, query: str, k: int = TOP_K) -> list[int]:
        """Product indices of the best ``k`` matches, best first; [] when nothing matches.

        Ties are broken by product index, as Lucene breaks them by document id."""
        counts = Counter(self._vocab[t] for t in tokenize(query) if t and t in self._vocab)
        if not counts:
            return []
        lengths = np.diff(self._indptr)
        terms = sorted(counts.items(), key=lambda tm: (int(lengths[tm[0]]), tm[0]))
        bounds = [float(self._colmax[t]) * m for t, m in terms]
        remaining = sum(bounds)
        buf = self._buffer()
        touched: list[np.ndarray] = []
        done = 0
        cand = np.empty(0, dtype=np.int64)
        try:
            for i, (term, mult) in enumerate(terms):
                idx, vals = self._postings(term)
                # Each document appears once per term column, so fancy-index add is exact.
                buf[idx] += vals * mult if mult != 1 else vals
                touched.append(idx)
                remaining -= bounds[i]
                done = i + 1
                if done == len(terms) or sum(len(t) for t in touched) < k:
                    continue
                cand = np.unique(np.concatenate(touched))
                if len(cand) >= k:
                    theta = np.partition(buf[cand], len(cand) - k)[len(cand) - k]
                    if theta > remaining * (1 + _EPS) + _EPS:
                        break
            cand = np.unique(np.concatenate(touched))
            scores = buf[cand]
        finally:
            buf[cand] = 0.0
            for idx in touched:
                buf[idx] = 0.0
        rest = terms[done:]
        if rest and len(cand) > k:
            theta = np.partition(scores, len(cand) - k)[len(cand) - k]
            keep = scores + remaining * (1 + _EPS) + _EPS >= theta
            cand, scores = cand[keep], scores[keep]
        for term, mult in rest:
            idx, vals = self._postings(term)
            if not len(idx):
                continue
            pos = np.minimum(np.searchsorted(idx, cand), len(idx) - 1)
            hit = idx[pos] == cand
            scores[hit] += vals[pos[hit]] * mult
        nonzero = scores > 0
        cand, scores = cand[nonzero], scores[nonzero]
        if len(cand) > k:
            top = np.argpartition(-scores, k - 1)[:k]
            top.sort()
            cand, scores = cand[top], scores[top]
        order = np.argsort(-scores, kind="stable")
        return [int(h) for h in cand[order]]

    def search_exhaustive(self, query: str, k: int = TOP_K) -> list[int]:
        """Full BM25 scoring of every posting; the reference the pruned search must equal."""
        term_ids = [self._vocab[t] for t in tokenize(query) if t and t in self._vocab]
        if not term_ids:
            return []
        scores = np.zeros(self.num_docs, dtype=np.float32)
        for tid in term_ids:
            idx, vals = self._postings(tid)
            scores[idx] += vals
        hits = np.flatnonzero(scores)
        if hits.size > k:
            top = np.argpartition(-scores[hits], k - 1)[:k]
            hits = np.sort(hits[top])
        order = np.argsort(-scores[hits], kind="stable")
        return [int(h) for h in hits[order]]
