"""How often the model-free noun tagger changes the reward, against spaCy's en_core_web_sm.

For ``--goals`` goals of the default catalog, the bought products are the target and the
first ``--per-goal`` results of searching the instruction (what a weak agent buys), with
the goal's options chosen where the product offers them. Each (goal, product) pair is
scored twice, with spaCy nouns and with the fallback's, and the script prints how often
the reward (and r_type) differ, the mean absolute reward difference, and the share of
titles whose noun lists are identical. Needs ``spacy`` and the model installed.

    .venv/bin/python benchmarks/reward_fallback_agreement.py [--goals 1000] [--per-goal 5]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goals", type=int, default=1000)
    parser.add_argument("--per-goal", type=int, default=5)
    parser.add_argument("--goal-set", default="synthetic")
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--cache-dir", type=Path, default=ROOT / ".wsrl" / "bench-catalog")
    args = parser.parse_args()

    from app.webshop.env import WebShopEnv
    from app.webshop.nouns import fallback_nouns, get_noun_fn
    from app.webshop.reward import compute_reward

    spacy_nouns = get_noun_fn("spacy")
    env = WebShopEnv.load(
        data_dir=args.data, goals=args.goal_set, cache_dir=args.cache_dir, noun_tagger="rules"
    )
    pairs = differ = rtype_differ = 0
    abs_diff = 0.0
    titles: dict[str, bool] = {}
    for gid in range(min(args.goals, len(env.goals))):
        goal = env.goals[gid]
        target = env.goals.product_index(gid)
        bought = [target, *env.search(goal.instruction.lower())[: args.per_goal]]
        for index in dict.fromkeys(bought):
            product = env.product(index)
            offered = {v: n for n, vs in product.options for v in vs}
            wanted = goal.goal_options.values() if isinstance(goal.goal_options, dict) else []
            chosen = {offered[v]: v for v in wanted if v in offered}
            r_spacy, p_spacy = compute_reward(goal, product, chosen, spacy_nouns)
            r_rules, p_rules = compute_reward(goal, product, chosen, fallback_nouns)
            pairs += 1
            differ += abs(r_spacy - r_rules) > 1e-9
            rtype_differ += p_spacy["r_type"] != p_rules["r_type"]
            abs_diff += abs(r_spacy - r_rules)
            for name in (goal.name, product.name):
                titles.setdefault(name, spacy_nouns(name) == fallback_nouns(name))
    print(json.dumps({
        "goals": min(args.goals, len(env.goals)),
        "pairs": pairs,
        "reward_differs_share": round(differ / pairs, 4),
        "r_type_differs_share": round(rtype_differ / pairs, 4),
        "mean_abs_reward_diff": round(abs_diff / pairs, 4),
        "titles": len(titles),
        "identical_noun_lists_share": round(sum(titles.values()) / len(titles), 4),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
