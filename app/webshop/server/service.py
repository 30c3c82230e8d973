"""What the route families share: goal lookup, session creation and stepping.

Routes stay thin: they validate the request shape and turn results into their family's
JSON; everything that touches the env or the store happens here, once.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from app.webshop.env import Goal, StepResult, WebShopEnv
from app.webshop.server.sessions import SessionEntry, SessionError, SessionStore
from app.webshop.store import GOAL_KINDS

logger = logging.getLogger(__name__)

SPLITS = ("test", "eval", "train")
MAX_ACTION_CHARS = 2_000
EMPTY_ACTION = "action is empty; send search[<keywords>] or click[<element>]"


def _not_empty(action: str) -> str:
    if not action:
        raise PydanticCustomError("empty_action", EMPTY_ACTION)
    return action


# An action as the native and AGL step bodies take it: an empty one is refused (422 / 400)
# rather than played as a no-op. AgentGym's family plays it, as its real server does.
Action = Annotated[str, Field(max_length=MAX_ACTION_CHARS), AfterValidator(_not_empty)]


class Unmatched(StrEnum):
    """What an AGL reset does with an instruction that no goal has (``WSRL_ENV_UNMATCHED``)."""

    RANDOM = "random"  # a weighted random goal, ``instruction_matched: false`` (as ever)
    REFUSE = "refuse"  # a 409: nothing is started


class GoalNotFoundError(SessionError):
    """A goal id, split index or instruction that names no goal."""

    status = 404


class UnmatchedInstructionError(SessionError):
    """An AGL reset's instruction matched no goal and the server refuses such resets."""

    status = 409


@dataclass
class Stepped:
    """A step's result with the entry it ran on (for the bookkeeping fields)."""

    entry: SessionEntry
    result: StepResult
    # The page's actions after the step, read under the session's lock (None once done),
    # so that an agent needs no second request to build its next prompt.
    available_actions: dict[str, Any] | None = None


def goal_json(goal: Goal) -> dict[str, Any]:
    """A goal as the native API shows it."""
    return {
        "id": goal.index,
        "split": goal.split,
        "instruction": goal.instruction,
        "asin": goal.asin,
        "attributes": list(goal.attributes),
        "goal_options": goal.goal_options,
        "price_upper": goal.price_upper,
        "weight": goal.weight,
        "category": goal.category,
    }


def step_json(result: StepResult) -> dict[str, Any]:
    """``{observation, reward, done, info}``: the step shape of the native and AGL APIs."""
    return {
        "observation": result.observation,
        "reward": result.reward,
        "done": result.done,
        "info": result.info,
    }


class WebShopService:
    """The env plus the session store, as the HTTP API uses them."""

    def __init__(
        self, env: WebShopEnv, store: SessionStore, unmatched: Unmatched = Unmatched.RANDOM
    ) -> None:
        self.env = env
        self.store = store
        self.unmatched = Unmatched(unmatched)
        self.unmatched_instructions = 0  # AGL resets whose instruction matched no goal
        self._instruction_index: tuple[dict[str, tuple[int, str]], ...] | None = None
        self._instruction_lock = threading.Lock()

    @property
    def num_products(self) -> int:
        return self.env.num_products

    # --- goals ---------------------------------------------------------------------------
    def goal(self, goal_id: int) -> Goal:
        """The goal with this id; :class:`GoalNotFoundError` when out of range."""
        if not 0 <= goal_id < len(self.env.goals):
            raise GoalNotFoundError(
                f"unknown goal {goal_id}: goal ids run from 0 to {len(self.env.goals) - 1}"
            )
        return self.env.goals[goal_id]

    def goal_in_set(self, kind: str, goal_id: int) -> Goal:
        """Goal ``goal_id`` of the catalog's ``kind`` goals (``synthetic`` or ``human``),
        served or not: a human goal stays reachable on a server that serves synthetic ones
        (as an AGL reset by instruction may play it)."""
        if kind not in GOAL_KINDS:
            raise GoalNotFoundError(
                f"unknown goal set {kind!r}; expected one of {', '.join(GOAL_KINDS)}"
            )
        try:
            goals = self.env.goal_set(kind)
        except FileNotFoundError:
            raise GoalNotFoundError(f"this catalog has no {kind} goals") from None
        if not 0 <= goal_id < len(goals):
            raise GoalNotFoundError(
                f"unknown goal {goal_id} of the {kind} set: its ids run from 0 to {len(goals) - 1}"
            )
        return goals[goal_id]

    def goal_in_split(self, split: str, index: int) -> Goal:
        """The ``index``-th goal of ``split`` (the order of :meth:`WebShopEnv.goal_ids`)."""
        ids = self.env.goal_ids(split)
        if not 0 <= index < len(ids):
            raise GoalNotFoundError(
                f"unknown goal: split {split!r} has {len(ids)} goals, index {index} is outside"
            )
        return self.env.goals[ids[index]]

    def goal_by_instruction(self, instruction: str) -> tuple[Goal, str]:
        """``(goal, goal set)``: the goal whose instruction is ``instruction``, case, spacing
        and the price text (``", and price lower than N dollars"``) ignored.

        The served goals come first, then the catalog's human goals (what the instruction
        files of ``items_human_ins.json`` describe, which clients such as Agent Lightning's
        WebShop recipe read their tasks from) when the server serves synthetic ones. The
        index is built on first use: servers that never need it never pay for it.
        """
        with self._instruction_lock:
            if self._instruction_index is None:
                exact: dict[str, tuple[int, str]] = {}
                priceless: dict[str, tuple[int, str]] = {}
                for kind in self._instruction_sets():
                    for goal in self.env.goal_set(kind):
                        exact.setdefault(_normalise(goal.instruction), (goal.index, kind))
                        priceless.setdefault(_without_price(goal.instruction), (goal.index, kind))
                self._instruction_index = (exact, priceless)
        exact, priceless = self._instruction_index
        found = exact.get(_normalise(instruction)) or priceless.get(_without_price(instruction))
        if found is None:
            raise GoalNotFoundError(f"no goal has the instruction {instruction[:200]!r}")
        goal_id, kind = found
        return self.env.goal_set(kind)[goal_id], kind

    def goal_for_instruction(self, instruction: str) -> tuple[Goal, str] | None:
        """:meth:`goal_by_instruction`, or None (play a random goal) for an instruction no
        goal has: counted, logged as a warning, and refused with a 409 under
        :attr:`Unmatched.REFUSE`. A mistyped task set then shows in the log and in
        ``/health`` instead of silently training on random goals."""
        try:
            return self.goal_by_instruction(instruction)
        except GoalNotFoundError:
            pass
        with self._instruction_lock:
            self.unmatched_instructions += 1
        shown = instruction[:200]
        if self.unmatched == Unmatched.REFUSE:
            logger.warning("refused a reset: no goal has the instruction %r", shown)
            raise UnmatchedInstructionError(
                f"no goal has the instruction {shown!r}; this server refuses unmatched "
                "instructions (WSRL_ENV_UNMATCHED=refuse): send one of its goals' "
                "instructions, or a goal_id and no instruction"
            ) from None
        logger.warning("no goal has the instruction %r: playing a random goal", shown)
        return None

    def _instruction_sets(self) -> list[str]:
        kinds = [self.env.goal_kind]
        if self.env.goal_kind != "human":
            try:
                self.env.goal_set("human")
                kinds.append("human")
            except FileNotFoundError:  # a catalog without items_human_ins.json
                pass
        return kinds

    def list_goals(self, split: str | None, offset: int, limit: int) -> tuple[int, list[Goal]]:
        """``(total, page)`` of the goals of ``split`` (all goals when None)."""
        if split is None:
            goals = self.env.goals
            return len(goals), list(goals[offset : offset + limit])
        ids = self.env.goal_ids(split)
        return len(ids), [self.env.goals[i] for i in ids[offset : offset + limit]]

    # --- sessions ------------------------------------------------------------------------
    def start(
        self,
        goal: Goal | None = None,
        seed: int | None = None,
        key: str | None = None,
        client: str | None = None,
        goal_set: str | None = None,
    ) -> SessionEntry:
        """A new episode on ``goal`` (weighted random when None; of ``goal_set`` when given,
        else of the served goals), stored under ``key`` and counted against ``client``'s
        share of the session cap."""
        if key is None and len(self.store) >= self.store.max_sessions:
            # Fail before paying for a session that the store would refuse anyway.
            self.store.sweep()
        session = self.env.new_session(
            None if goal is None else goal.index, seed=seed, goal_set=goal_set
        )
        return self.store.add(session, key=key, client=client)

    def step(
        self, key: str, action: str, *, with_actions: bool = False, shown: object = None
    ) -> Stepped:
        """Run one action on a session, serialised with every other use of that session.

        ``with_actions`` also reads the page's available actions after the step (not
        once done) under the same lock; ``shown`` is the id as the caller sent it, for
        the errors (see :meth:`SessionStore.get`)."""
        with self.store.using(key, shown) as entry:
            result = entry.session.step(action)
            entry.steps.append(
                {
                    "index": entry.num_steps,
                    "action": action,
                    "observation": result.observation,
                    "reward": result.reward,
                    "done": result.done,
                    "valid": bool(result.info.get("valid", True)),
                }
            )
            entry.num_steps += 1
            if result.done:
                entry.purchased_asin = _purchased_asin(result)
            available = (
                entry.session.available_actions() if with_actions and not result.done else None
            )
            return Stepped(entry, result, available)

    def summary(self, key: str, *, with_steps: bool = False) -> dict[str, Any]:
        """The native ``GET /sessions/{id}`` answer (``steps`` too when asked)."""
        with self.store.using(key) as entry:
            session = entry.session
            extra = {"steps": list(entry.steps)} if with_steps else {}
            return {
                **extra,
                "session_id": entry.key,
                "goal_id": session.goal.index,
                "done": session.done,
                "reward": session.reward,
                "reward_parts": session.reward_parts,
                "num_steps": entry.num_steps,
                "purchased_asin": entry.purchased_asin,
            }


def _normalise(text: str) -> str:
    return " ".join(text.lower().split())


_PRICE_TEXT = re.compile(r",? and price lower than [0-9.]+ dollars\.?$")


def _without_price(text: str) -> str:
    """The instruction without its price text (``items_human_ins.json`` has none)."""
    return _PRICE_TEXT.sub("", _normalise(text)).rstrip()


def _purchased_asin(result: StepResult) -> str | None:
    """The asin bought at ``buy now`` (the env puts it in the final step's info)."""
    value = (result.info or {}).get("asin")
    return value if isinstance(value, str) else None
