"""One episode: the page state machine, the action parser and the observations.

Rules (docs/webshop.md, "Actions"), parsed as the original parses them (see
:func:`parse_action`): ``search[<keywords>]`` works on any page; ``click[x]`` works only
when ``x`` is a current clickable other than ``search``. Anything else is a no-op:
reward 0, not done, same page, and ``info["valid"]`` is False with the reason in
``info["error"]``.

The step that clicks ``buy now`` is the one that is done and rewarded. As in the
original, the session goes on after it: the done page offers nothing to click, but
``search[...]`` leads on, and buying again scores again (the session's ``done``,
``reward`` and ``reward_parts`` then describe the latest purchase). Clients stop at the
first done step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from app.webshop import pages
from app.webshop.goals import Goal
from app.webshop.loader import Product
from app.webshop.nouns import NounFn
from app.webshop.pages import Page
from app.webshop.reward import compute_reward

if TYPE_CHECKING:
    from collections.abc import Sequence

RESULTS_PER_PAGE = 10
_ACTION = re.compile(r"(.+)\[(.+)\]")
_SUB_PAGE_BUTTONS = {
    "description": Page.DESCRIPTION,
    "features": Page.FEATURES,
    "reviews": Page.REVIEWS,
}


class Catalog(Protocol):
    """What a session needs of its environment."""

    nouns: NounFn

    def product(self, index: int) -> Product: ...
    def search(self, query: str) -> Sequence[int]: ...


@dataclass
class StepResult:
    observation: str
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


def parse_action(action: str) -> tuple[str, str] | None:
    r"""(name, lowercased argument), or None when the text does not start ``name[arg]``.

    The original's rule, ``re.match(r"(.+)\[(.+)\]", action)``: matched from the start
    only (``click[buy now].`` is ``click[buy now]``), within one line, the name greedy
    (it runs to the last ``[`` that has a ``]`` after it) and not stripped (``" click"``
    is no verb), the argument non-empty, lowercased and not stripped (``click[ buy now]``
    names no button; ``search[ ]`` searches).
    """
    m = _ACTION.match(action)
    if m is None:
        return None
    return m.group(1), m.group(2).lower()


class Session:
    """One episode. Not thread-safe by itself: the server serialises access per session."""

    def __init__(self, env: Catalog, goal: Goal, product_index: int) -> None:
        self._env = env
        self.goal = goal
        self.target_index = product_index
        self.history: list[str] = []
        self.done = False
        self.reward = 0.0
        self.reward_parts: dict[str, Any] | None = None
        self.page = Page.SEARCH
        self.keywords: str | None = None
        self.results: list[int] = []
        self.page_number = 1
        self.product_index: int | None = None
        self.chosen: dict[str, str] = {}
        # Products opened since the last "Back to Search" (text_rich marks them).
        self.visited: set[str] = set()
        self._product: Product | None = None
        self._purchased: Product | None = None

    @property
    def instruction_text(self) -> str:
        return self.goal.instruction

    # --- what the agent sees -------------------------------------------------------------
    def _page_products(self) -> list[Product]:
        start = (self.page_number - 1) * RESULTS_PER_PAGE
        ids = self.results[start : start + RESULTS_PER_PAGE]
        return [self._env.product(i) for i in ids]

    def _nodes(self) -> list[pages.Node]:
        instruction = self.goal.instruction
        if self.page is Page.SEARCH:
            return pages.search_page(instruction)
        if self.page is Page.RESULTS:
            return pages.results_page(
                instruction,
                self.page_number,
                len(self.results),
                self._page_products(),
                self.visited,
            )
        if self.page is Page.DONE:
            assert self._purchased is not None
            return pages.done_page(self._purchased.asin, self.chosen, self.reward)
        product = self._current_product()
        if self.page is Page.ITEM:
            return pages.item_page(instruction, product, self.chosen)
        return pages.sub_page(instruction, self.page, product)

    def observation(self, mode: str = "text") -> str:
        """The current page as ``text`` (default), ``text_rich`` or ``html``."""
        return pages.render(self._nodes(), mode)

    def available_actions(self) -> dict[str, Any]:
        return {"has_search_bar": self.page is Page.SEARCH, "clickables": self._clickables()}

    def _clickables(self) -> list[str]:
        if self.page is Page.SEARCH:
            return ["search"]
        if self.page is Page.DONE:
            return []
        if self.page is Page.RESULTS:
            buttons = ["back to search"]
            if self.page_number > 1:
                buttons.append("< prev")
            buttons.append("next >")
            return buttons + [p.asin.lower() for p in self._page_products()]
        if self.page is Page.ITEM:
            buttons = ["back to search", "< prev", "description", "features", "reviews", "buy now"]
            return buttons + list(self._current_product().option_values())
        return ["back to search", "< prev"]

    # --- transitions -------------------------------------------------------------------
    def step(self, action: str) -> StepResult:
        """Applies one action; an invalid one changes nothing but is still recorded."""
        self.history.append(action)
        error = self._apply(action)
        if error is not None:
            return self._result(valid=False, error=error)
        return self._result(valid=True, error=None)

    def _result(self, valid: bool, error: str | None) -> StepResult:
        """The step's answer; only the step that buys is done and carries a reward."""
        bought = valid and self.page is Page.DONE
        info: dict[str, Any] = {
            "valid": valid,
            "error": error,
            "page": str(self.page),
            "goal_index": self.goal.index,
            "reward_parts": self.reward_parts if bought else None,
        }
        if bought:
            info["asin"] = self._purchased.asin if self._purchased else None
            info["options"] = dict(self.chosen)
        reward = self.reward if bought else 0.0
        return StepResult(self.observation(), reward, bought, info)

    def _apply(self, action: str) -> str | None:
        """Changes the state for a valid action; returns why an action is invalid."""
        parsed = parse_action(action) if isinstance(action, str) else None
        if parsed is None:
            shown = str(action)[:80]
            return f"not an action: {shown!r}; use search[<keywords>] or click[<element>]"
        verb, arg = parsed
        if verb == "search":
            self._search(arg)
            return None
        if verb != "click":
            return f"{verb!r} is not an action; use search[<keywords>] or click[<element>]"
        if arg == "search":
            return "click[search] is not an action; use search[<keywords>]"
        clickables = self._clickables()
        if arg not in clickables:
            return f"{arg!r} is not clickable here; clickables: {clickables}"
        self._click(arg)
        return None

    def _search(self, keywords: str) -> None:
        self.keywords = keywords
        self.results = list(self._env.search(keywords))
        self.page_number = 1
        self.page = Page.RESULTS
        self._set_product(None)

    def _set_product(self, index: int | None) -> None:
        self.product_index = index
        self._product = None if index is None else self._env.product(index)
        self.chosen = {}

    def _current_product(self) -> Product:
        assert self._product is not None
        return self._product

    def _click(self, arg: str) -> None:
        page = self.page
        if arg == "back to search":
            self.page = Page.SEARCH
            self.keywords = None
            self.results = []
            self.page_number = 1
            self.visited.clear()
            self._set_product(None)
        elif arg == "< prev":
            if page is Page.RESULTS:
                self.page_number -= 1
            elif page is Page.ITEM:
                self.page = Page.RESULTS
                self._set_product(None)
            else:
                self.page = Page.ITEM
        elif arg == "next >":
            self.page_number += 1
        elif page is Page.RESULTS:
            start = (self.page_number - 1) * RESULTS_PER_PAGE
            for index in self.results[start : start + RESULTS_PER_PAGE]:
                if self._env.product(index).asin.lower() == arg:
                    self._set_product(index)
                    self.visited.add(self._env.product(index).asin)
                    self.page = Page.ITEM
                    break
        elif arg in _SUB_PAGE_BUTTONS:
            self.page = _SUB_PAGE_BUTTONS[arg]
        elif arg == "buy now":
            self._buy()
        else:
            self.chosen[self._current_product().option_values()[arg]] = arg

    def _buy(self) -> None:
        product = self._current_product()
        self.reward, self.reward_parts = compute_reward(
            self.goal, product, self.chosen, self._env.nouns
        )
        self._purchased = product
        self.done = True
        self.page = Page.DONE
