"""Fair demonstrations rendered exactly as the agent's prompts, for supervised warm starts.

The demonstrator acts only on what the policy will see, so imitating it is possible:
the oracle (:mod:`app.webshop.agents`) searches the target's title, which no prompt
shows, and a policy trained on that learns to make titles up. Here the demonstrator

- searches the instruction's product description (the text before its options and
  price limit: "i need a vegan pasta sauce with flavor: ...") -> ``search[i need a
  vegan pasta sauce]``;
- on the results page opens a result: the first (best-ranked) one (the default build), or
  (``result_choice="random"``) one drawn per goal and page. The first result is the
  target in about 55 % of test goals and a demonstrator opening it succeeds on about 59 %
  of them; the random build leaves that choice to reinforcement learning, so that its
  policy knows the mechanics and RL has the choice to learn (docs/decisions/0030, 0039);
- on an item page clicks the instruction's option values in order, then buys; on a
  sub-page goes back.

Each step becomes the messages :class:`app.core.agent.Episode` builds for it (with
the policy's history length) and the action as the assistant reply, so the warm-started
policy is trained on the very prompt layout it will see in rollouts.

The reply puts a space after the bracket (``click[ green]``, ``search[ i need a ...]``;
the agent and the env strip it). Why: the Qwen2 pre-tokenizer glues one leading character
to a word, so ``green`` is one token after a space (in the instruction and on the page)
and another after a bracket (``[green``). Without the space, every copy of a word into a
reply is a per-word translation a tiny model does not learn from a few thousand examples
(measured: 0 of 57 held-out option clicks right); with it, the reply's words are the very
tokens of the instruction and the page, and copying is pointing. Products are written as
listed: by number (``click[3]``, the default build) or by id (``click[b09h42ji5s]``, one
token wherever it stands, repeating the ``click [ id`` of the action list).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from app.core.agent import AgentProtocol
from app.environments.webshop.opening import search_keywords
from app.webshop.agents import BUTTONS, goal_option_values
from app.webshop.env import WebShopEnv
from app.webshop.goals import Goal
from trainer.bootstrap.play import LocalEpisode
from trainer.samples import Sample


@dataclass(frozen=True)
class Demonstration:
    """One demonstrator step: what the agent would see, and what the demonstrator did."""

    goal_id: int
    messages: list[dict[str, str]]
    action: str
    """The action as the env sees it: ``click[green]``."""
    shown: str = ""
    """The action as the prompt names it, where that differs: ``click[1]`` for the first
    listed result when the prompt numbers results (:class:`app.core.agent.ResultRefs`)."""

    @property
    def reply(self) -> str:
        """The action as the policy writes it: ``click[ green]``, but a product as listed,
        ``click[b09h42ji5s]`` or ``click[1]`` (see the module docstring)."""
        if action_kind(self.action) == "item":
            return self.shown or self.action
        verb, argument = self.action.split("[", 1)
        return f"{verb}[ {argument}"


def fair_action(
    goal: Goal, available_actions: dict[str, Any], history: list[str], result_choice: str = "first"
) -> str:
    """The demonstrator's next action from the page's actions and the previous actions.

    ``result_choice``: ``first`` opens the best-ranked result, ``random`` one of the page's
    results drawn per goal and page."""
    clickables = list(available_actions.get("clickables") or [])
    if available_actions.get("has_search_bar"):
        return f"search[{search_keywords(goal.instruction)}]"
    products = [c for c in clickables if c not in BUTTONS]
    if "buy now" in clickables:  # item page: the options the instruction names, then buy
        clicks = [f"click[{v}]" for v in goal_option_values(goal, products)]
        last = history[-1] if history else ""
        done = clicks.index(last) + 1 if last in clicks else 0
        return clicks[done] if done < len(clicks) else "click[buy now]"
    if "next >" in clickables:  # results page: the best-ranked result, or any
        if not products:
            return "click[back to search]"
        if result_choice == "random":
            return f"click[{random.Random(f'{goal.index}:{products[0]}').choice(products)}]"
        if result_choice != "first":
            raise ValueError(f"result_choice must be first or random, got {result_choice!r}")
        return f"click[{products[0]}]"
    return "click[< prev]"


def episode(
    env: WebShopEnv, goal_id: int, protocol: AgentProtocol, result_choice: str = "first"
) -> list[Demonstration]:
    """The demonstrator's steps on goal ``goal_id``, each rendered as the agent's prompt
    under ``protocol`` (at most its ``max_steps``)."""
    played = LocalEpisode(env, goal_id, protocol)
    actions: list[str] = []
    demos: list[Demonstration] = []
    for _ in range(protocol.max_steps):
        page = played.state.available_actions
        action = fair_action(played.session.goal, page, actions, result_choice)
        shown = played.state.shown_action(action)
        demos.append(Demonstration(goal_id, played.messages(), action, shown))
        played.act(action)
        actions.append(action)
        if played.done:
            break
    return demos


def collect(
    env: WebShopEnv, goal_ids: Iterable[int], protocol: AgentProtocol, result_choice: str = "first"
) -> list[Demonstration]:
    """Demonstrations of every goal in ``goal_ids``."""
    return [d for g in goal_ids for d in episode(env, g, protocol, result_choice)]


def to_sample(demo: Demonstration, tokenizer: Any) -> Sample:
    """Prompt (chat template, assistant turn opened) + reply + end-of-turn; loss on the
    reply tokens and the end-of-turn token only."""
    prompt = list(
        tokenizer.apply_chat_template(demo.messages, add_generation_prompt=True, return_dict=True)[
            "input_ids"
        ]
    )
    response = [*tokenizer.encode(demo.reply, add_special_tokens=False), tokenizer.eos_token_id]
    n = len(prompt) + len(response)
    return Sample(
        rollout_id=f"demo-{demo.goal_id}",
        group_id=str(demo.goal_id),
        input_ids=prompt + response,
        loss_mask=[0] * len(prompt) + [1] * len(response),
        rollout_logprobs=[0.0] * n,
        advantage=1.0,
        policy_version_min=0,
    )


def action_kind(action: str) -> str:
    """Which decision a demonstrated action is: search, item (a product id), option, buy,
    or other (navigation)."""
    if action.startswith("search["):
        return "search"
    if action == "click[buy now]":
        return "buy"
    argument = action.removeprefix("click[").removesuffix("]")
    if _PRODUCT_ID.fullmatch(argument):
        return "item"
    if argument in BUTTONS:
        return "other"
    return "option"


_PRODUCT_ID = re.compile(r"b0[0-9a-z]{8}")
