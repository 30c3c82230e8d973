"""``oracle-long``: the oracle, slowed down so that it buys on a chosen step (benchmarks).

Throughput figures are quoted for episodes of a fixed length (10 steps); the plain oracle
buys after 4-6. This policy plays the oracle and spends the slack on the target's item
page with moves a careful shopper makes: it reads the description (``click[description]``
then ``click[< prev]``, two steps) while no option is chosen yet, and re-clicks the option
it just chose (one step, no change) to use an odd step. It buys on step ``steps`` when
the slack allows (the target found on the first results page, at least one option to
click when the slack is odd); otherwise it buys as soon as the oracle would.

The step count comes from the prompt's step numbers (``Step N:`` lines), so it survives
the prompt showing only the last k steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.webshop.agents import BUTTONS, goal_option_values

if TYPE_CHECKING:
    from app.webshop.goals import Goal

DETOUR = "click[description]"
DETOUR_STEPS = 2


def padded_action(
    goal: Goal,
    oracle_action: str,
    clickables: list[str],
    history: list[str],
    steps_taken: int,
    steps: int,
) -> str:
    """The oracle's ``oracle_action``, or a detour that keeps the purchase on step ``steps``.

    ``steps_taken`` counts every earlier step (invalid ones too); the action returned here
    is step ``steps_taken + 1``.
    """
    if "buy now" not in clickables:
        return oracle_action
    values = [
        f"click[{v}]" for v in goal_option_values(goal, [c for c in clickables if c not in BUTTONS])
    ]
    if oracle_action != "click[buy now]" and oracle_action not in values:
        return oracle_action  # a wrong item is open: the oracle goes back
    last = history[-1] if history else ""
    chosen = values.index(last) + 1 if last in values else 0
    remaining = len(values) - chosen + 1  # the options left to click, then buy
    slack = steps - steps_taken - remaining
    if chosen == 0 and slack >= DETOUR_STEPS and "description" in clickables:
        return DETOUR
    if chosen > 0 and slack >= 1:
        return last
    return oracle_action
