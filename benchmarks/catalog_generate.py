"""Synthetic catalog generation: products per second, output size, peak memory.

Writes a catalog with :func:`app.webshop.catalog_gen.write_catalog` into a temporary
directory (deleted afterwards unless ``--out`` is given) and prints:

- products/s: products generated and written (all three files) per wall-clock second;
- output MB: total size of items_shuffle.json + items_ins_v2.json + items_human_ins.json;
- peak RSS MB: the process's peak resident memory (streaming keeps it flat in N).

    .venv/bin/python benchmarks/catalog_generate.py --products 100000
    .venv/bin/python benchmarks/catalog_generate.py --products 1000000

Targets: 100k products well under a minute, 1M in a few minutes.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

from app.webshop.catalog_gen import write_catalog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--products", type=int, default=100_000, help="catalog size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="keep the files here")
    parser.add_argument("--no-human", action="store_true", help="skip items_human_ins.json")
    args = parser.parse_args()

    out_dir = args.out or Path(tempfile.mkdtemp(prefix="wsrl-catalog-bench-"))
    try:
        started = time.perf_counter()
        paths = write_catalog(out_dir, args.products, args.seed, human_goals=not args.no_human)
        elapsed = time.perf_counter() - started
        sizes = {kind: path.stat().st_size / 1e6 for kind, path in paths.items()}
    finally:
        if args.out is None:
            shutil.rmtree(out_dir, ignore_errors=True)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"products:     {args.products}")
    print(f"seconds:      {elapsed:.2f}")
    print(f"products/s:   {args.products / elapsed:,.0f}")
    print(f"output MB:    {sum(sizes.values()):.1f}")
    for kind, mb in sizes.items():
        print(f"  {kind + ':':<17} {mb:.1f} MB")
    print(f"peak RSS MB:  {peak_mb:.0f}")


if __name__ == "__main__":
    main()
