"""WebShop's episode openings: scripted first steps that put the policy on a later page.

A rollout's ``start`` (:class:`app.db.lifecycle.RolloutStart`) says where the policy
begins to play:

- ``search``: the original WebShop task; no opening;
- ``results``: the opening plays ``search[<keywords>]``, the instruction up to its
  options and price limit (:func:`search_keywords`); the policy acts from the results;
- ``item``: as ``results``, then ``click[<first listed product>]``; the policy acts from
  that item page. A search that lists no product stops the opening on the results page.

Why: a start-state curriculum. Training episodes that begin where a decision with dense
reward differences is made (the option choice on the item page) give GRPO groups whose
rewards differ; evaluation always starts at ``search``.

The opening's steps are ordinary steps of the episode: they go through the env, enter
the :class:`~app.core.agent.Episode`'s history (so the prompt on the item page is the one
the policy would see had it played them itself) and are recorded as steps without an LLM
call. They do not count toward ``max_steps``, which limits the policy's own steps.

:func:`play_opening` decides the actions once for every player; the player passes a
callable that performs one step its own way (the worker over HTTP with its recorder, the
trainer on an in-process session).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from app.core.agent import Episode
from app.db.lifecycle import RolloutStart, parse_start

# The clickables of a page that are navigation, not products (the env's buttons; the
# agent side reads pages as a client, not through the env server's package). "search" is
# the search bar's own clickable.
NAVIGATION = frozenset(
    {
        "search",
        "back to search",
        "< prev",
        "next >",
        "description",
        "features",
        "reviews",
        "buy now",
    }
)

# Where an instruction's product description ends: its options or its price limit.
_DESCRIPTION_END = re.compile(r",? with |,? and price |,? price lower ")


def search_keywords(instruction: str) -> str:
    """The instruction up to its options / price limit, lowercased, without brackets."""
    text = " ".join(instruction.lower().replace("[", " ").replace("]", " ").split())
    match = _DESCRIPTION_END.search(text)
    return (text[: match.start()] if match and match.start() > 0 else text).strip()


def first_product(available_actions: dict[str, Any]) -> str | None:
    """The first listed clickable that is a product, not a button (None: no product)."""
    for clickable in available_actions.get("clickables") or []:
        if clickable not in NAVIGATION:
            return str(clickable)
    return None


def play_opening(
    episode: Episode, start: str | RolloutStart, step: Callable[[str], bool]
) -> list[str]:
    """Play the opening of ``start`` and return its actions (none for ``search``).

    ``step(action)`` performs one step through the env and records it in ``episode`` as
    any step (:meth:`Episode.record`); it returns whether the env took the action. The
    opening stops at a step the env refuses.
    """
    start = parse_start(start)
    if start == RolloutStart.SEARCH:
        return []
    actions = [f"search[{search_keywords(episode.instruction)}]"]
    if not step(actions[-1]) or start == RolloutStart.RESULTS:
        return actions
    product = first_product(episode.available_actions)
    if product is None:
        return actions
    actions.append(f"click[{product}]")
    step(actions[-1])
    return actions
