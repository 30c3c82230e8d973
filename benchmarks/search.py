"""Search latency, index build time, cached start-up and memory at several catalog sizes.

For each ``--products`` size: generates the catalog (once, cached), compiles it and
builds the BM25 index (timed: "build"), then in a fresh process loads the env with
everything cached (timed: "start-up"), runs ``--queries`` searches with goal
instructions as queries (p50/p99 of ``env.search``) and reports that process's peak RSS.
``--tantivy`` also times the same queries on a tantivy index (the rejected candidate).

    .venv/bin/python benchmarks/search.py --products 2000 100000 [1000000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def queries_for(env, n: int) -> list[str]:  # type: ignore[no-untyped-def]
    return [env.goals[i].instruction for i in range(min(n, len(env.goals)))]


def memory_now() -> dict[str, float]:
    """Resident memory split into private (anonymous) and file-backed (mmap) pages, MB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            fields[f"{key.lower()}_mb"] = round(int(value.split()[0]) / 1024, 1)
    return fields


def measure(products: int, cache_dir: Path, n_queries: int) -> dict:
    """Runs in a fresh process: start-up from cache, query latency, peak RSS."""
    t0 = time.perf_counter()
    from app.webshop.env import WebShopEnv

    env = WebShopEnv.load(num_products=products, cache_dir=cache_dir, noun_tagger="rules")
    startup = time.perf_counter() - t0
    after_load = memory_now()
    queries = queries_for(env, n_queries)
    env.search(queries[0])
    times = []
    for q in queries:
        t = time.perf_counter()
        env.search(q)
        times.append((time.perf_counter() - t) * 1000)
    return {
        "products": env.num_products,
        "goals": len(env.goals),
        "startup_s": round(startup, 3),
        "search_p50_ms": round(percentile(times, 0.5), 3),
        "search_p99_ms": round(percentile(times, 0.99), 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "after_load": after_load,
        "after_queries": memory_now(),
    }


def tantivy_latency(env, n_queries: int) -> dict:  # type: ignore[no-untyped-def]
    import tantivy

    from app.webshop.search import document_text

    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", stored=False)
    builder.add_integer_field("id", stored=True, indexed=False)
    schema = builder.build()
    index = tantivy.Index(schema)
    t0 = time.perf_counter()
    writer = index.writer()
    for i in range(env.num_products):
        writer.add_document(tantivy.Document(body=document_text(env.product(i)), id=i))
    writer.commit()
    index.reload()
    build = time.perf_counter() - t0
    searcher = index.searcher()
    times = []
    for q in queries_for(env, n_queries):
        cleaned = "".join(c if c.isalnum() else " " for c in q.lower())
        t = time.perf_counter()
        query = index.parse_query(cleaned, ["body"])
        searcher.search(query, 50)
        times.append((time.perf_counter() - t) * 1000)
    return {
        "tantivy_build_s": round(build, 2),
        "tantivy_p50_ms": round(percentile(times, 0.5), 3),
        "tantivy_p99_ms": round(percentile(times, 0.99), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--products", type=int, nargs="+", default=[2000, 100_000])
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--cache-dir", type=Path, default=ROOT / ".wsrl" / "bench-catalog")
    parser.add_argument("--tantivy", action="store_true", help="also time tantivy")
    parser.add_argument("--measure", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.cache_dir, args.queries)))
        return

    from app.webshop.env import WebShopEnv, ensure_generated_catalog

    for n in args.products:
        t0 = time.perf_counter()
        ensure_generated_catalog(args.cache_dir, n)
        generate = time.perf_counter() - t0
        t0 = time.perf_counter()
        env = WebShopEnv.load(num_products=n, cache_dir=args.cache_dir, noun_tagger="rules")
        build = time.perf_counter() - t0
        out = subprocess.run(
            [sys.executable, __file__, "--measure", str(n), "--queries", str(args.queries),
             "--cache-dir", str(args.cache_dir)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row["generate_s"] = round(generate, 2)
        row["compile_and_index_s (0 = cached)"] = round(build, 2)
        if args.tantivy:
            row.update(tantivy_latency(env, args.queries))
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
