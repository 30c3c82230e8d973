"""How often the model-free noun tagger changes the reward, against spaCy's en_core_web_sm.

Two sets of purchases are scored twice, with spaCy nouns and with the fallback's:

- ``random`` (``--random`` of them, seeded): a goal drawn at random buys its target half
  of the time and a random product of the catalog otherwise, with a random value (or
  none) picked for each of the product's options: every kind of purchase an agent makes;
- ``near``: for the first ``--goals`` goals, the target and the first ``--per-goal``
  results of searching the instruction (what a weak agent buys), with the goal's options
  chosen where the product offers them.

For each set it prints the share of purchases whose reward agrees (the figure to publish),
how often r_type differs, the mean absolute reward difference, and the share of titles
whose noun lists are identical. Uses spaCy and the model of the core install.

    .venv/bin/python benchmarks/reward_fallback_agreement.py [--random 20000] [--goals 1000]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.webshop.env import Goal, WebShopEnv  # noqa: E402

Purchase = tuple[Goal, int, dict[str, str]]


def random_purchases(env: WebShopEnv, count: int, seed: int) -> Iterator[Purchase]:
    rng = random.Random(seed)
    for _ in range(count):
        goal = env.goals[rng.randrange(len(env.goals))]
        if rng.random() < 0.5:
            index = env.goals.product_index(goal.index)
        else:
            index = rng.randrange(env.num_products)
        chosen = {}
        for name, values in env.product(index).options:
            value = rng.choice([None, *values])
            if value is not None:
                chosen[name] = value
        yield goal, index, chosen


def near_target_purchases(env: WebShopEnv, goals: int, per_goal: int) -> Iterator[Purchase]:
    for gid in range(min(goals, len(env.goals))):
        goal = env.goals[gid]
        bought = [env.goals.product_index(gid), *env.search(goal.instruction.lower())[:per_goal]]
        for index in dict.fromkeys(bought):
            offered = {v: n for n, vs in env.product(index).options for v in vs}
            wanted = goal.goal_options.values() if isinstance(goal.goal_options, dict) else []
            yield goal, index, {offered[v]: v for v in wanted if v in offered}


def agreement(env: WebShopEnv, purchases: Iterator[Purchase]) -> dict[str, float]:
    from app.webshop.nouns import fallback_nouns, get_tagger
    from app.webshop.reward import compute_reward

    spacy_nouns = get_tagger("spacy")
    pairs = differ = rtype_differ = 0
    abs_diff = 0.0
    titles: dict[str, bool] = {}
    for goal, index, chosen in purchases:
        product = env.product(index)
        r_spacy, p_spacy = compute_reward(goal, product, chosen, spacy_nouns)
        r_rules, p_rules = compute_reward(goal, product, chosen, fallback_nouns)
        pairs += 1
        differ += abs(r_spacy - r_rules) > 1e-9
        rtype_differ += p_spacy["r_type"] != p_rules["r_type"]
        abs_diff += abs(r_spacy - r_rules)
        for name in (goal.name, product.name):
            titles.setdefault(name, spacy_nouns(name) == fallback_nouns(name))
    return {
        "purchases": pairs,
        "reward_agrees_share": round(1 - differ / pairs, 5),
        "r_type_differs_share": round(rtype_differ / pairs, 5),
        "mean_abs_reward_diff": round(abs_diff / pairs, 5),
        "titles": len(titles),
        "identical_noun_lists_share": round(sum(titles.values()) / len(titles), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=20000, help="Random purchases.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--goals", type=int, default=1000, help="Goals for near-target pairs.")
    parser.add_argument("--per-goal", type=int, default=5)
    parser.add_argument("--goal-set", default="synthetic")
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--cache-dir", type=Path, default=ROOT / ".wsrl" / "bench-catalog")
    args = parser.parse_args()

    env = WebShopEnv.load(
        data_dir=args.data, goals=args.goal_set, cache_dir=args.cache_dir, noun_tagger="rules"
    )
    print(json.dumps({
        "goal_set": args.goal_set,
        "random": agreement(env, random_purchases(env, args.random, args.seed)),
        "near": agreement(env, near_target_purchases(env, args.goals, args.per_goal)),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
