"""In-process step latency of the env, p50/p99 per action type.

Each episode (one per goal, ``--episodes`` of them) plays: search the target's title,
next page, previous page, click a result, click an option, open a sub-page, go back,
back to search, search again, click a result, buy. Every ``session.step`` (which includes
rendering the new observation) is timed and filed under its action type.

    .venv/bin/python benchmarks/env_step.py [--products 2000] [--episodes 500]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def kind_of(action: str, clickables_before: list[str], option_values: set[str]) -> str:
    if action.startswith("search["):
        return "search"
    arg = action[len("click[") : -1]
    if arg in ("next >", "< prev"):
        return "next/prev"
    if arg == "back to search":
        return "back to search"
    if arg == "buy now":
        return "buy now"
    if arg in ("description", "features", "reviews"):
        return "sub-page"
    if arg in option_values:
        return "click option"
    return "click result"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--products", type=int, default=2000)
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--data", type=Path, default=None, help="original-format files")
    parser.add_argument("--cache-dir", type=Path, default=ROOT / ".wsrl" / "bench-catalog")
    parser.add_argument("--noun-tagger", default="spacy", help="spacy (default) or rules")
    args = parser.parse_args()

    from app.webshop.env import WebShopEnv

    env = WebShopEnv.load(
        data_dir=args.data, num_products=args.products, cache_dir=args.cache_dir,
        noun_tagger=args.noun_tagger,
    )  # fmt: skip
    timings: dict[str, list[float]] = defaultdict(list)
    for gid in range(min(args.episodes, len(env.goals))):
        s = env.new_session(gid)
        target = env.product(s.target_index)
        options = {v for _, values in target.options for v in values}

        def play(action: str, s=s, options=options) -> None:  # type: ignore[no-untyped-def]
            kind = kind_of(action, s.available_actions()["clickables"], options)
            t = time.perf_counter()
            result = s.step(action)
            timings[kind].append((time.perf_counter() - t) * 1e6)
            if not result.info["valid"]:
                raise RuntimeError(f"{action}: {result.info['error']}")

        def first_result(s=s) -> str:  # type: ignore[no-untyped-def]
            return next(c for c in s.available_actions()["clickables"]
                        if c not in ("back to search", "< prev", "next >"))  # fmt: skip

        play(f"search[{target.name.lower()}]")
        if not s.results:
            continue
        play("click[next >]")
        play("click[< prev]")
        play(f"click[{first_result()}]")
        item = env.product(s.product_index)
        options = {v for _, values in item.options for v in values}
        if item.options:
            play(f"click[{item.options[0][1][-1]}]")
        play("click[description]")
        play("click[< prev]")
        play("click[back to search]")
        play(f"search[{s.goal.instruction.lower()}]")
        if not s.results:
            continue
        play(f"click[{first_result()}]")
        play("click[buy now]")

    for kind, values in sorted(timings.items()):
        values.sort()
        row = {
            "action": kind,
            "n": len(values),
            "p50_us": round(values[len(values) // 2], 1),
            "p99_us": round(values[min(len(values) - 1, int(0.99 * len(values)))], 1),
        }
        print(json.dumps(row))


if __name__ == "__main__":
    main()
