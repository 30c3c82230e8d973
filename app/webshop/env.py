"""The facade everything else uses: catalog + goals + search index, and sessions.

``WebShopEnv.load`` compiles the catalog (once, cached on disk, see
:mod:`app.webshop.store`), builds or maps the search index (cached next to it, keyed by
the same catalog hash) and returns a read-only object that any number of sessions and
threads share. With no ``data_dir`` it generates the default catalog (2,000 products,
seed 0) into the cache on first use.
"""

from __future__ import annotations

import bisect
import fcntl
import logging
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from itertools import accumulate
from pathlib import Path

from app.webshop.goals import Goal, split_range
from app.webshop.loader import Product
from app.webshop.nouns import DEFAULT_TAGGER, NounTagger, get_tagger
from app.webshop.search import SearchIndex
from app.webshop.session import Session, StepResult
from app.webshop.store import GOAL_KINDS, CompiledCatalog, GoalList, compile_catalog

logger = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = Path(".wsrl/catalog")
DEFAULT_NUM_PRODUCTS = 2000
DEFAULT_SEED = 0
PRICE_SEED = 0
COMPLETE_MARKER = ".complete"

__all__ = ["Goal", "Session", "StepResult", "WebShopEnv", "default_catalog_dir"]


def default_catalog_dir(cache_dir: Path, num_products: int, seed: int = DEFAULT_SEED) -> Path:
    """Where the generated catalog of that size lives: ``<cache>/default`` for the default."""
    if num_products == DEFAULT_NUM_PRODUCTS and seed == DEFAULT_SEED:
        return cache_dir / "default"
    return cache_dir / f"generated-{num_products}-seed{seed}"


# ``progress(phase, done, total, detail)``: long work of a load (a catalog generated or
# compiled), as :class:`app.work_progress.WorkProgress` shows it; not called for cached work.
Progress = Callable[[str, int, int, str], None]


def ensure_generated_catalog(
    cache_dir: Path, num_products: int, seed: int = DEFAULT_SEED, progress: Progress | None = None
) -> Path:
    """Generates the catalog once; safe when several processes (servers, the scripted LLM,
    containers on one data volume) start on the same empty cache together.

    The first to take the lock next to the folder generates into a private temporary
    folder and renames it into place with its ``.complete`` marker; the others wait for
    the lock and then accept the completed catalog. A folder without the marker (a crash
    mid-write by an older version) is replaced."""
    out = default_catalog_dir(cache_dir, num_products, seed)
    marker = out / COMPLETE_MARKER
    if marker.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(out.parent / f".{out.name}.lock"):
        if marker.exists():
            return out
        from app.webshop.catalog_gen import write_catalog

        logger.info("Generating a %d-product catalog into %s", num_products, out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
        try:
            tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared by processes
            written = None
            if progress is not None:
                written = _phase(progress, "generating the catalog", "products")
            write_catalog(tmp, num_products, seed=seed, human_goals=True, progress=written)
            (tmp / COMPLETE_MARKER).write_text("ok")
            if out.exists():
                shutil.rmtree(out)
            try:
                os.rename(tmp, out)
            except OSError:
                if not marker.exists():  # not a writer on a filesystem without locks
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _phase(progress: Progress, phase: str, unit: str) -> Callable[[int, int], None]:
    return lambda done, total: progress(phase, done, total, unit)


def _megabytes(progress: Progress, phase: str, what: str) -> Callable[[int, int], None]:
    def update(done: int, total: int) -> None:
        megabytes = max(1, -(-total >> 20))  # rounded up: a small file is 1 MB, not 0
        read = megabytes if done >= total else min(done >> 20, megabytes)
        progress(phase, read, megabytes, f"MB of {what} read")

    return update


@contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    """An advisory lock on ``path`` across processes, held for the block."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class WebShopEnv:
    """Catalog + goals + search index, loaded once, read-only, shared by all sessions/threads."""

    def __init__(
        self,
        catalog: CompiledCatalog,
        index: SearchIndex,
        goal_kind: str = "synthetic",
        noun_tagger: str | NounTagger = DEFAULT_TAGGER,
    ) -> None:
        self.catalog = catalog
        self.index = index
        self.goal_kind = goal_kind
        self.goals: GoalList = catalog.goals(goal_kind)
        self.nouns: NounTagger = (
            get_tagger(noun_tagger) if isinstance(noun_tagger, str) else noun_tagger
        )
        self._cum_weights: list[float] | None = None
        self._product = lru_cache(maxsize=4096)(catalog.product)

    @classmethod
    def load(
        cls,
        data_dir: Path | None = None,
        goals: str = "synthetic",
        num_products: int | None = None,
        cache_dir: Path | None = None,
        noun_tagger: str = DEFAULT_TAGGER,
        progress: Progress | None = None,
    ) -> WebShopEnv:
        """Loads the original-format files of ``data_dir`` (only their first
        ``num_products`` products when given, like the original's subset option), or,
        when ``data_dir`` is None, the generated catalog of ``num_products`` (default
        2,000, seed 0), written on first use to ``<cache_dir>/default``.

        ``cache_dir`` (default ``.wsrl/catalog``) also holds the compiled catalogs and
        their search indexes (``compiled/<hash>/``), reused by every later load.
        ``noun_tagger``: the reward's, ``spacy`` (the original's, the default; an error
        when not installed) or ``rules`` (approximate, model-free). ``progress``: see
        :data:`Progress` (generating, compiling: minutes for the full original set)."""
        if goals not in GOAL_KINDS:
            raise ValueError(f"Unknown goal set {goals!r}; expected one of {GOAL_KINDS}")
        nouns = get_tagger(noun_tagger)  # an unknown or missing tagger fails before any work
        cache_dir = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE_DIR
        limit = num_products
        if data_dir is None:
            size = num_products or DEFAULT_NUM_PRODUCTS
            data_dir = ensure_generated_catalog(cache_dir, size, progress=progress)
            limit = None
        read = (
            None
            if progress is None
            else _megabytes(progress, "compiling the catalog", "the products file")
        )
        compiled = compile_catalog(Path(data_dir), cache_dir / "compiled", PRICE_SEED, limit, read)
        catalog = CompiledCatalog(compiled)
        index = SearchIndex.open_or_build(catalog.iter_products(), compiled / "index")
        return cls(catalog, index, goals, nouns)

    # --- catalog ---------------------------------------------------------------------------
    @property
    def num_products(self) -> int:
        return len(self.catalog)

    def product(self, index: int) -> Product:
        return self._product(index)

    def search(self, query: str) -> Sequence[int]:
        return self.index.search(query)

    # --- goals -----------------------------------------------------------------------------
    def goal_ids(self, split: str) -> list[int]:
        return list(split_range(split, len(self.goals)))

    def sample_goal(self, rng: random.Random, split: str | None = None) -> Goal:
        """A goal drawn with probability proportional to its weight (within ``split``
        when given)."""
        if len(self.goals) == 0:
            raise ValueError("This catalog has no goals")
        if split is not None:
            ids = split_range(split, len(self.goals))
            if not ids:
                raise ValueError(f"Split {split!r} is empty in this catalog")
            weights = [float(self.goals.weights[i]) for i in ids]
            return self.goals[rng.choices(list(ids), weights=weights)[0]]
        if self._cum_weights is None:
            self._cum_weights = list(accumulate(float(w) for w in self.goals.weights))
        total = self._cum_weights[-1]
        i = bisect.bisect_right(self._cum_weights, rng.random() * total)
        return self.goals[min(i, len(self.goals) - 1)]

    def goal_set(self, kind: str) -> GoalList:
        """The catalog's goals of ``kind`` (``synthetic`` or ``human``), served or not;
        :class:`FileNotFoundError` when the catalog has none of that kind."""
        return self.goals if kind == self.goal_kind else self.catalog.goals(kind)

    def new_session(
        self, goal_index: int | None = None, seed: int | None = None, goal_set: str | None = None
    ) -> Session:
        """A fresh episode on goal ``goal_index``, or on a weighted draw seeded by ``seed``.

        ``goal_set``: the set ``goal_index`` counts in (default: the served one)."""
        goals = self.goals if goal_set is None else self.goal_set(goal_set)
        if goal_index is None:
            goal = self.sample_goal(random.Random(seed))
            goals = self.goals
        else:
            if not 0 <= goal_index < len(goals):
                raise IndexError(f"goal {goal_index} out of range (0..{len(goals) - 1})")
            goal = goals[goal_index]
        return Session(self, goal, goals.product_index(goal.index))
