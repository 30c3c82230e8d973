"""Reference agents: an oracle that knows the goal, and the paper's rule baseline.

Both are pure functions of what an agent sees (observation, available actions, the
episode's previous actions) plus, for the oracle, the goal, so the scripted LLM server
can play them from a prompt. The oracle copes with a history cut to its last k >= 1
actions: every decision reads only the page and the latest action.

Oracle: search the target's title (the instruction after a title search that did not
find it), page through the results until the target's asin is clickable, open it
(going back when a wrong item is open), click the goal's option values in order, buy.
Rule baseline (Yao et al., 2022): search the instruction, click the first result, buy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.webshop.goals import Goal
from app.webshop.reward import MATCH_THRESHOLD, normalize_color, token_set_ratio
from app.webshop.search import TOP_K
from app.webshop.session import RESULTS_PER_PAGE, Session, StepResult

if TYPE_CHECKING:
    from app.webshop.env import WebShopEnv

BUTTONS = ("back to search", "< prev", "next >", "description", "features", "reviews", "buy now")
LAST_PAGE = TOP_K // RESULTS_PER_PAGE


def _clickables(available_actions: dict[str, Any]) -> list[str]:
    return list(available_actions.get("clickables") or [])


def _page_kind(available_actions: dict[str, Any]) -> str:
    clickables = _clickables(available_actions)
    if available_actions.get("has_search_bar"):
        return "search"
    if "buy now" in clickables:
        return "item"
    if "next >" in clickables:
        return "results"
    if "< prev" in clickables:
        return "sub"
    return "done"


def _page_number(observation: str) -> int:
    marker = "Page "
    start = observation.find(marker)
    if start < 0:
        return 1
    digits = observation[start + len(marker) :].split(" ", 1)[0]
    return int(digits) if digits.isdigit() else 1


def _search_query(text: str) -> str:
    return text.lower().replace("[", " ").replace("]", " ").strip()


def goal_option_values(goal: Goal, offered: list[str]) -> list[str]:
    """The option values to click, in goal order, among those the item page offers."""
    if isinstance(goal.goal_options, dict):
        wanted = [v.lower() for v in goal.goal_options.values()]
        return [v for v in wanted if v in offered]
    picks = []
    for option in goal.goal_options:
        target = normalize_color(option.lower())
        best = max(
            offered,
            key=lambda v: token_set_ratio(normalize_color(v), target),
            default=None,
        )
        if best is not None and token_set_ratio(normalize_color(best), target) > MATCH_THRESHOLD:
            picks.append(best)
    return list(dict.fromkeys(picks))


def oracle_action(
    goal: Goal, observation: str, available_actions: dict[str, Any], history: list[str]
) -> str:
    kind = _page_kind(available_actions)
    clickables = _clickables(available_actions)
    last = history[-1] if history else ""
    title_query = _search_query(goal.name) or _search_query(goal.instruction)
    if kind == "search":
        searches = [a for a in history if a.startswith("search[")]
        tried_title = bool(searches) and searches[-1] == f"search[{title_query}]"
        return f"search[{_search_query(goal.instruction) if tried_title else title_query}]"
    if kind == "results":
        if goal.asin.lower() in clickables:
            return f"click[{goal.asin.lower()}]"
        has_products = any(c not in BUTTONS for c in clickables)
        if has_products and _page_number(observation) < LAST_PAGE:
            return "click[next >]"
        return "click[back to search]"
    if kind == "sub":
        return "click[< prev]"
    if kind == "item":
        if f" [SEP] {goal.name} [SEP] Price:" not in observation:
            return "click[< prev]"
        offered = [c for c in clickables if c not in BUTTONS]
        values = goal_option_values(goal, offered)
        clicked = [f"click[{v}]" for v in values]
        if last in clicked:
            position = clicked.index(last)
            return clicked[position + 1] if position + 1 < len(clicked) else "click[buy now]"
        return clicked[0] if clicked else "click[buy now]"
    return "click[buy now]"


def rule_action(
    instruction: str, observation: str, available_actions: dict[str, Any], history: list[str]
) -> str:
    kind = _page_kind(available_actions)
    if kind == "search":
        return f"search[{_search_query(instruction)}]"
    if kind == "results":
        products = [c for c in _clickables(available_actions) if c not in BUTTONS]
        return f"click[{products[0]}]" if products else "click[back to search]"
    if kind == "sub":
        return "click[< prev]"
    return "click[buy now]"


def oracle_policy(session: Session) -> str:
    return oracle_action(
        session.goal, session.observation(), session.available_actions(), session.history
    )


def rule_policy(session: Session) -> str:
    return rule_action(
        session.instruction_text,
        session.observation(),
        session.available_actions(),
        session.history,
    )


POLICIES: dict[str, Callable[[Session], str]] = {"oracle": oracle_policy, "rule": rule_policy}


def run_agent(
    env: WebShopEnv,
    policy: Callable[[Session], str],
    goal_index: int,
    max_steps: int = 15,
) -> StepResult:
    """Plays one episode; the last step's result (reward 0 when it ran out of steps)."""
    session = env.new_session(goal_index)
    result = StepResult(session.observation(), 0.0, False, {"valid": True, "error": None})
    for _ in range(max_steps):
        result = session.step(policy(session))
        if result.done:
            break
    return result
