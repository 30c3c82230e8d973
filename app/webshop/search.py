"""BM25 product search with Lucene's parameters (k1=0.9, b=0.4), top 50.

The document of a product is, lowercased: title + description + first bullet point +
options as ``"<name>: <v1>, <v2>, and <name2>: ..."`` (docs/webshop.md, "Search").

Library choice (measured by ``benchmarks/search.py``): ``bm25s`` builds the index; its
precomputed per-(term, document) Lucene scores are a CSC matrix saved as ``.npy`` files,
memory-mapped at start-up (no parsing, shared page cache between processes). Queries are
scored here, term by term, into a dense buffer and cut to the top 50 with
``argpartition``; bm25s's own ``np.add.at`` path is several times slower. ``tantivy``
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
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from app.webshop.loader import Product

logger = logging.getLogger(__name__)

TOP_K = 50
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


class SearchIndex:
    """A read-only BM25 index over the catalog's products (document id = product index).

    The arrays are memory-mapped ``.npy`` files; they are held as plain ndarray views
    (slicing an ``np.memmap`` costs microseconds of Python per slice, a view does not).
    """

    def __init__(
        self,
        vocab: dict[str, int],
        data: np.ndarray,
        indices: np.ndarray,
        indptr: np.ndarray,
        num_docs: int,
    ) -> None:
        self._vocab = vocab
        self._data = np.asarray(data)
        self._indices = np.asarray(indices)
        self._indptr = np.asarray(indptr, dtype=np.int64)
        self.num_docs = num_docs

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
        return cls(
            model.vocab_dict,
            scores["data"],
            scores["indices"],
            scores["indptr"],
            int(scores["num_docs"]),
        )

    @classmethod
    def open_or_build(cls, products: Iterable[Product], path: Path) -> SearchIndex:
        if not (path / "params.index.json").exists():
            logger.info("Building the search index in %s", path)
            cls.build(products, path)
        return cls.load(path)

    def search(self, query: str, k: int = TOP_K) -> list[int]:
        """Product indices of the best ``k`` matches, best first; [] when nothing matches.

        Every posting of every query term is scored (a repeated term counts again, as in
        a Lucene boolean query); ties are broken by product index, as Lucene breaks them
        by document id."""
        terms = [self._vocab[t] for t in tokenize(query) if t in self._vocab]
        if not terms:
            return []
        scores = np.zeros(self.num_docs, dtype=np.float32)
        indptr, indices, data = self._indptr, self._indices, self._data
        for term in terms:
            start, end = indptr[term], indptr[term + 1]
            # A document appears once per term column, so a fancy-index add is exact.
            scores[indices[start:end]] += data[start:end]
        n = self.num_docs
        hits = np.argpartition(scores, n - k)[n - k :] if n > k else np.arange(n)
        hits = np.sort(hits[scores[hits] > 0])
        order = np.argsort(-scores[hits], kind="stable")
        return [int(h) for h in hits[order]]
