"""Agent Lightning's WebShop recipe, played as its users run it, on the default catalog.

Its ``generate_tasks.py`` turns every instruction of the catalog's
``items_human_ins.json`` into a task; each runner then resets ``/agl/reset`` with the
task's instruction (and may send a ``goal_id`` too, which the recipe's server ignores).
Every task must start an episode on the goal it describes: ``instruction_matched`` true,
the goal of that product with that instruction.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from app.webshop.env import WebShopEnv
from app.webshop.server.app import create_app
from app.webshop.server.runner import serve_in_thread

PRICE_TEXT = re.compile(r", and price lower than [0-9.]+ dollars$")


def _tasks(catalog_dir: Path) -> list[dict[str, str]]:
    """The recipe's tasks: one per instruction of ``items_human_ins.json``."""
    raw = json.loads((catalog_dir / "items_human_ins.json").read_text())
    return [
        {"task_id": f"ws_{asin}_{i}", "asin": asin, "instruction": entry["instruction"]}
        for asin, entries in raw.items()
        for i, entry in enumerate(entries)
    ]


def test_every_human_instruction_resets_to_its_own_goal(tmp_path: Path) -> None:
    env = WebShopEnv.load(cache_dir=tmp_path)  # the default generated catalog, served as is
    assert env.goal_kind == "synthetic"
    tasks = _tasks(tmp_path / "default")
    assert len(tasks) > 1000
    unmatched: list[str] = []
    with (
        serve_in_thread(create_app(env)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        for number, task in enumerate(tasks):
            body = {"session_id": f"runner-{number % 4}", "instruction": task["instruction"]}
            body |= {"task_id": task["task_id"]}
            if number % 2:
                body["goal_id"] = 0  # sent by some clients; the recipe's server ignores it
            r = client.post("/agl/reset", json=body)
            assert r.status_code == 200, r.text
            info = r.json()["info"]
            goal_set = info.get("goal_set", env.goal_kind)
            goal = env.catalog.goals(goal_set)[info["goal_id"]]
            own = (
                info["instruction_matched"] is True
                and goal.asin == task["asin"]
                and PRICE_TEXT.sub("", goal.instruction) == task["instruction"].strip()
            )
            if not own:
                unmatched.append(
                    f"{task['task_id']} {task['instruction']!r} -> goal "
                    f"{goal_set}/{info['goal_id']} {goal.asin} {goal.instruction!r} "
                    f"(matched: {info['instruction_matched']})"
                )
    assert not unmatched, f"{len(unmatched)} of {len(tasks)} tasks not on their goal:\n" + (
        "\n".join(unmatched[:5])
    )
