"""BabyAI as a text game: a minigrid level seen through the agent's 7x7 view, in words.

An episode is one minigrid BabyAI level reset with one seed. The agent reads what it sees
(each visible ball, key, box and door, named ``<color> <type> <n>`` or ``<color> <state>
door <n>`` and numbered by distance, with where it is: steps ahead, to the left or
right), what lies straight ahead and what it carries; then it answers one of the listed
actions. The action names are those of AgentGym's BabyAI server, so that prompts written
for it work here: ``turn left``, ``turn right``, ``move forward``, ``pickup <obj> <n>``,
``drop``, ``toggle``, ``go to <obj> <n>``, ``go through <door> <n>``, ``toggle and go
through <door> <n>`` and ``check available actions``. ``pick up <obj>`` (the spelling of
AgentGym's own prompt) and a name without its number (the nearest one) are read too.

A high-level action is a path planned by breadth-first search over the cells the agent
sees now (never over the hidden map), played as minigrid primitives until the episode
ends. ``go to`` an object the agent already faces plays minigrid's no-op ``done``
primitive: one step on which BabyAI checks the mission (else that goal could not be met).
Reward and termination are BabyAI's: ``1 - 0.9 * primitive steps / max_steps`` on
success, 0 on failure or when the level's own step limit truncates it. Every answered
action, refused ones included, spends one of ``max_turns`` turns.

``data_idx`` picks a level and a seed as AgentGym does: ``AGENTGYM_LEVELS[data_idx % 40]``
with seed ``data_idx // 40``. :func:`goals` lists the easy single-room levels among them,
test goals held out by seed.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import gymnasium
from minigrid.core.actions import Actions
from minigrid.core.world_object import Door, WorldObj
from minigrid.minigrid_env import MiniGridEnv

# AgentGym's level table, in its order (its ids 1-40 are positions 0-39 here). minigrid 3
# renamed GoToObjS6-v0 to -v1 (the same level).
AGENTGYM_LEVELS: tuple[str, ...] = tuple(
    f"BabyAI-{name}"
    for name in (
        "GoToRedBallGrey-v0", "GoToRedBall-v0", "GoToRedBallNoDists-v0", "GoToObjS6-v1",
        "GoToLocalS8N7-v0", "GoToObjMazeS7-v0", "GoToImpUnlock-v0", "GoToSeqS5R2-v0",
        "GoToRedBlueBall-v0", "GoToDoor-v0", "GoToObjDoor-v0", "Open-v0",
        "OpenRedDoor-v0", "OpenDoorLoc-v0", "OpenRedBlueDoorsDebug-v0",
        "OpenDoorsOrderN4Debug-v0", "Pickup-v0", "UnblockPickup-v0", "PickupLoc-v0",
        "PickupDistDebug-v0", "PickupAbove-v0", "PutNextLocalS6N4-v0",
        "PutNextS7N4Carrying-v0", "Unlock-v0", "UnlockLocalDist-v0", "KeyInBox-v0",
        "UnlockPickupDist-v0", "BlockedUnlockPickup-v0", "UnlockToUnlock-v0",
        "ActionObjDoor-v0", "FindObjS7-v0", "KeyCorridorS6R3-v0", "OneRoomS20-v0",
        "MoveTwoAcrossS8N9-v0", "SynthS5R2-v0", "SynthLoc-v0", "SynthSeq-v0",
        "MiniBossLevel-v0", "BossLevel-v0", "BossLevelNoUnlock-v0",
    )
)  # fmt: skip

# The goals' levels: one room (or a door of it) where the target can come into view by
# turning, so that a small policy can learn them before the maze levels.
GOAL_LEVELS: tuple[str, ...] = (
    "BabyAI-GoToRedBallGrey-v0",
    "BabyAI-GoToRedBall-v0",
    "BabyAI-GoToRedBallNoDists-v0",
    "BabyAI-GoToObjS6-v1",
    "BabyAI-GoToLocalS8N7-v0",
    "BabyAI-GoToRedBlueBall-v0",
    "BabyAI-GoToDoor-v0",
    "BabyAI-PickupLoc-v0",
)
TEST_EVERY = 5  # seeds 0, 5, 10, ... are the test split
MAX_TURNS = 50
CHECK = "check available actions"
NO_PATH = "no path you can see leads to it"
PICKABLE = ("ball", "key", "box")
NAMED = (*PICKABLE, "door")

# Headings in the agent's view frame (x to the right, y towards the agent): 0 is ahead.
_HEADINGS = ((0, -1), (1, 0), (0, 1), (-1, 0))


@dataclass(frozen=True)
class Goal:
    """One episode the pipeline can ask for: ``data_idx`` is what ``/reset`` takes."""

    data_idx: int
    level: str
    seed: int
    mission: str
    split: str


def level_and_seed(data_idx: int) -> tuple[str, int]:
    if data_idx < 0:
        raise ValueError(f"data_idx must be >= 0, not {data_idx}")
    return AGENTGYM_LEVELS[data_idx % len(AGENTGYM_LEVELS)], data_idx // len(AGENTGYM_LEVELS)


def data_idx_of(level: str, seed: int) -> int:
    return seed * len(AGENTGYM_LEVELS) + AGENTGYM_LEVELS.index(level)


def split_of(seed: int) -> str:
    return "test" if seed % TEST_EVERY == 0 else "train"


def goals(num_seeds: int = 100, levels: Sequence[str] = GOAL_LEVELS) -> list[Goal]:
    """Every (level, seed) of ``levels`` x ``range(num_seeds)``, sorted by ``data_idx``.

    Deterministic: a mission depends on the level and seed only. Test and train never share
    a seed, so a test goal's layout is never trained on."""
    unknown = [level for level in levels if level not in AGENTGYM_LEVELS]
    if unknown:
        raise ValueError(f"not in AgentGym's level table (no data_idx): {unknown}")
    found = []
    for level in levels:
        env = _make(level)
        for seed in range(num_seeds):
            _reset(env, seed)
            found.append(Goal(data_idx_of(level, seed), level, seed, env.mission, split_of(seed)))
    return sorted(found, key=lambda g: g.data_idx)


def _make(level: str) -> MiniGridEnv:
    if level not in _babyai_levels():
        raise ValueError(f"unknown BabyAI level {level!r}")
    env = gymnasium.make(level, disable_env_checker=True).unwrapped
    assert isinstance(env, MiniGridEnv)
    return env


_QUIET = threading.Lock()


def _reset(env: MiniGridEnv, seed: int) -> None:
    """``env.reset(seed=seed)`` without the lines minigrid prints for each layout it
    rejects while generating one. ``sys.stdout`` is process-wide, hence the lock: two
    overlapping redirections could leave it pointing at a dead buffer."""
    with _QUIET, contextlib.redirect_stdout(io.StringIO()):
        env.reset(seed=seed)


@lru_cache(maxsize=1)
def _babyai_levels() -> frozenset[str]:
    return frozenset(name for name in gymnasium.registry if name.startswith("BabyAI-"))


class GameOverError(Exception):
    """A step on an episode that has ended."""


@dataclass(frozen=True)
class StepResult:
    observation: str
    reward: float
    done: bool


@dataclass(frozen=True)
class _Seen:
    """A named object in view; ``x, y`` in the view frame."""

    name: str
    x: int
    y: int
    obj: WorldObj


@dataclass
class _Options:
    """What the agent can do now: action text -> primitives, and why the others cannot.
    ``through``: the door actions, which end with a step out of the doorway when the cell
    beyond is free (it is seen only once the agent stands in the doorway)."""

    plans: dict[str, list[Actions]] = field(default_factory=dict)
    refusals: dict[str, str] = field(default_factory=dict)
    through: set[str] = field(default_factory=set)


def _steps(n: int) -> str:
    return "1 step" if n == 1 else f"{n} steps"


def _normalise(action: str) -> str:
    text = " ".join(action.lower().split()).rstrip(".")
    return "pickup " + text[len("pick up ") :] if text.startswith("pick up ") else text


class BabyAIGame:
    """One episode of ``level`` with ``seed``; not thread-safe (the server locks it)."""

    def __init__(self, level: str, seed: int, max_turns: int = MAX_TURNS) -> None:
        self.level = level
        self.seed = seed
        self.max_turns = max_turns
        self.env = _make(level)
        _reset(self.env, seed)
        self.mission: str = self.env.mission
        self.turns = 0
        self.done = False
        self.outcome = ""
        self._options = self._compute_options()

    @classmethod
    def from_data_idx(cls, data_idx: int, max_turns: int = MAX_TURNS) -> BabyAIGame:
        return cls(*level_and_seed(data_idx), max_turns=max_turns)

    # --- what the agent reads --------------------------------------------------------------

    @property
    def available_actions(self) -> list[str]:
        return [*self._options.plans, CHECK]

    def observation(self, with_goal: bool = False, feedback: str | None = None) -> str:
        """The text the agent reads: the goal (at reset), ``feedback`` or the view, how the
        episode ended, then ``Available actions: [...]`` as a JSON list."""
        lines = [f"Your goal: {self.mission}"] if with_goal else []
        lines.append(self.describe() if feedback is None else feedback)
        if self.outcome:
            lines.append(self.outcome)
        lines.append(f"Available actions: {json.dumps(self.available_actions)}")
        return "\n".join(lines)

    def describe(self) -> str:
        seen = self._seen()
        if seen:
            where = "; ".join(f"{s.name}, {self._where(s.x, s.y)}" for s in seen)
            sight = f"You see: {where}."
        else:
            sight = "You see no objects."
        carrying = self.env.carrying
        held = f"a {carrying.color} {carrying.type}" if carrying else "nothing"
        return f"{sight} {self._ahead(seen)} You are carrying {held}."

    def _where(self, x: int, y: int) -> str:
        ahead, right = self._agent[1] - y, x - self._agent[0]
        parts = [f"{_steps(ahead)} ahead"] if ahead else []
        if right:
            parts.append(f"{_steps(abs(right))} to your {'right' if right > 0 else 'left'}")
        return " and ".join(parts)

    def _ahead(self, seen: list[_Seen]) -> str:
        names = {(s.x, s.y): s.name for s in seen}
        x, y = self._agent
        free = 0
        while self._passable(x, y - free - 1):
            free += 1
        cell = (x, y - free - 1)
        if not self._visible(*cell):
            return f"Ahead of you: at least {_steps(free)} free, beyond your sight."
        thing = names.get(cell, "a wall")
        return (
            f"Right in front of you: {thing}."
            if free == 0
            else f"Ahead of you: {_steps(free)} free, then {thing}."
        )

    # --- the view -------------------------------------------------------------------------

    @property
    def _agent(self) -> tuple[int, int]:
        size = self.env.agent_view_size
        return size // 2, size - 1

    def _visible(self, x: int, y: int) -> bool:
        size = self.env.agent_view_size
        return 0 <= x < size and 0 <= y < size and bool(self._mask[x, y])

    def _passable(self, x: int, y: int) -> bool:
        """Free to walk on, as far as the agent can see (its own cell holds what it carries)."""
        if (x, y) == self._agent:
            return True
        if not self._visible(x, y):
            return False
        cell = self._grid.get(x, y)
        return cell is None or cell.can_overlap()

    def _seen(self) -> list[_Seen]:
        """Named objects in view, nearest first (ties: the one more straight ahead, then
        the left one), numbered per name in that order, so ``<name> 1`` is the nearest."""
        ax, ay = self._agent
        cells = [
            (abs(x - ax) + ay - y, abs(x - ax), x, y)
            for x in range(self._grid.width)
            for y in range(self._grid.height)
            if (x, y) != (ax, ay) and self._visible(x, y)
        ]
        counts: dict[str, int] = {}
        seen = []
        for _, _, x, y in sorted(cells):
            obj = self._grid.get(x, y)
            if obj is None or obj.type not in NAMED:
                continue
            kind = f"{obj.color} {_door_state(obj)} door" if isinstance(obj, Door) else None
            kind = kind or f"{obj.color} {obj.type}"
            counts[kind] = counts.get(kind, 0) + 1
            seen.append(_Seen(f"{kind} {counts[kind]}", x, y, obj))
        return seen

    # --- the actions ----------------------------------------------------------------------

    def step(self, action: str) -> StepResult:
        """Play ``action``; an unknown or impossible one is answered with why, no crash."""
        if self.done:
            raise GameOverError("the episode has ended; reset to start another")
        self.turns += 1
        key = self._resolve(_normalise(action))
        reward = 0.0
        feedback: str | None = None
        if key == CHECK:
            feedback = "You can take the following actions: " + ", ".join(self.available_actions)
        elif key in self._options.plans:
            plan = self._options.plans[key] or [Actions.done]
            reward = self._play(plan, step_out=key in self._options.through)
        elif key in self._options.refusals:
            feedback = self._options.refusals[key]
        else:
            feedback = (
                f'"{action.strip()}" is not an available action.' if key else "No action was given."
            )

        if not self.done and self.turns >= self.max_turns:
            self.done = True
            self.outcome = f"You are out of turns ({self.max_turns}): the episode is over."
        return StepResult(self.observation(feedback=feedback), reward, self.done)

    def _resolve(self, text: str) -> str:
        known = self._options.plans.keys() | self._options.refusals.keys()
        return f"{text} 1" if text not in known and f"{text} 1" in known else text

    def _play(self, plan: list[Actions], step_out: bool) -> float:
        """Play ``plan`` until the episode ends; ``step_out``: then one step forward, out of
        the doorway the plan ends in, unless something is in the way."""
        reward = 0.0
        for primitive in plan:
            reward = self._primitive(primitive)
            if self.done:
                break
        else:
            ahead = self.env.grid.get(*self.env.front_pos)
            if step_out and (ahead is None or ahead.can_overlap()):
                reward = self._primitive(Actions.forward)
        self._options = self._compute_options()
        return reward

    def _primitive(self, primitive: Actions) -> float:
        _, reward, terminated, truncated, _ = self.env.step(primitive)
        if terminated or truncated:
            self.done = True
            self.outcome = (
                "The task is completed."
                if float(reward) > 0
                else "The episode is over: the mission failed."
                if terminated
                else "The episode is over: the level's step limit is reached."
            )
        return float(reward)

    def _compute_options(self) -> _Options:
        """Look again (the view grid and which of its cells are seen), then list what can
        be done from here."""
        self._grid, self._mask = self.env.gen_obs_grid()
        options = _Options()
        options.plans["turn left"] = [Actions.left]
        options.plans["turn right"] = [Actions.right]
        seen = self._seen()
        self._front_options(options, seen)
        routes = _Routes(self)
        carrying = self.env.carrying
        for s in seen:
            if s.obj.type in PICKABLE:
                key = f"pickup {s.name}"
                if carrying is not None:
                    options.refusals[key] = f"You cannot pick up {s.name}: your hands are full."
                elif (path := routes.facing(s.x, s.y)) is None:
                    options.refusals[key] = f"You cannot pick up {s.name}: {NO_PATH}."
                else:
                    options.plans[key] = [*path, Actions.pickup]
        for s in seen:
            if isinstance(s.obj, Door):
                self._door_options(options, routes, s, carrying)
        for s in seen:
            if (path := routes.facing(s.x, s.y)) is None:
                options.refusals[f"go to {s.name}"] = f"You cannot go to {s.name}: {NO_PATH}."
            else:
                options.plans[f"go to {s.name}"] = path
        return options

    def _front_options(self, options: _Options, seen: list[_Seen]) -> None:
        """The actions on the cell right in front: move forward, drop, toggle."""
        x, y = self._agent
        front = self._grid.get(x, y - 1)
        front_name = next((s.name for s in seen if (s.x, s.y) == (x, y - 1)), "a wall")
        carrying = self.env.carrying
        if self._passable(x, y - 1):
            options.plans["move forward"] = [Actions.forward]
        else:
            options.refusals["move forward"] = (
                f"You cannot move forward: {front_name} is in the way."
            )
        if carrying is None:
            options.refusals["drop"] = "You cannot drop anything: you carry nothing."
        elif front is None:
            options.plans["drop"] = [Actions.drop]
        else:
            options.refusals["drop"] = f"You cannot drop it here: {front_name} is in front of you."
        if front is None or front.type not in ("door", "box"):
            options.refusals["toggle"] = (
                "You cannot toggle: no door or box is right in front of you."
            )
        elif _unlockable(front, carrying):
            options.plans["toggle"] = [Actions.toggle]
        else:
            options.refusals["toggle"] = (
                f"You cannot open {front_name}: it needs a {front.color} key."
            )

    def _door_options(
        self, options: _Options, routes: _Routes, door: _Seen, carrying: WorldObj | None
    ) -> None:
        assert isinstance(door.obj, Door)
        through, toggle = f"go through {door.name}", f"toggle and go through {door.name}"
        if door.obj.is_open:
            if (path := routes.onto(door.x, door.y)) is None:
                options.refusals[through] = f"You cannot go through {door.name}: {NO_PATH}."
            else:
                options.plans[through] = path
                options.through.add(through)
            return
        options.refusals[through] = f"You cannot go through {door.name}: open it first."
        if not _unlockable(door.obj, carrying):
            options.refusals[toggle] = (
                f"You cannot open {door.name}: it needs a {door.obj.color} key."
            )
        elif (path := routes.facing(door.x, door.y)) is None:
            options.refusals[toggle] = f"You cannot go through {door.name}: {NO_PATH}."
        else:
            options.plans[toggle] = [*path, Actions.toggle, Actions.forward]
            options.through.add(toggle)


def _door_state(door: Door) -> str:
    return "open" if door.is_open else "locked" if door.is_locked else "closed"


def _unlockable(obj: WorldObj, carrying: WorldObj | None) -> bool:
    """Whether toggling ``obj`` does something: anything but a locked door opens without a
    key; a locked door needs a key of its color."""
    if not (isinstance(obj, Door) and obj.is_locked):
        return True
    return carrying is not None and carrying.type == "key" and carrying.color == obj.color


class _Routes:
    """Shortest primitive paths from the agent over the cells it sees (one BFS over
    position x heading); cells out of sight count as blocked."""

    def __init__(self, game: BabyAIGame) -> None:
        self.passable = game._passable
        x, y = game._agent
        self.start = (x, y, 0)
        self.parent: dict[tuple[int, int, int], tuple[tuple[int, int, int], Actions]] = {}
        self.order = [self.start]
        queue = deque([self.start])
        reached = {self.start}
        while queue:
            state = queue.popleft()
            cx, cy, heading = state
            dx, dy = _HEADINGS[heading]
            moves = [
                ((cx, cy, (heading - 1) % 4), Actions.left),
                ((cx, cy, (heading + 1) % 4), Actions.right),
            ]
            if self.passable(cx + dx, cy + dy):
                moves.insert(0, ((cx + dx, cy + dy, heading), Actions.forward))
            for nxt, action in moves:
                if nxt not in reached:
                    reached.add(nxt)
                    self.parent[nxt] = (state, action)
                    self.order.append(nxt)
                    queue.append(nxt)

    def _path(self, goal: tuple[int, int, int]) -> list[Actions]:
        path = []
        while goal != self.start:
            goal, action = self.parent[goal]
            path.append(action)
        return path[::-1]

    def facing(self, x: int, y: int) -> list[Actions] | None:
        """The shortest path to stand next to cell (x, y), facing it."""
        for cx, cy, heading in self.order:
            dx, dy = _HEADINGS[heading]
            if (cx + dx, cy + dy) == (x, y):
                return self._path((cx, cy, heading))
        return None

    def onto(self, x: int, y: int) -> list[Actions] | None:
        """The shortest path onto cell (x, y) (an open door's doorway)."""
        for state in self.order:
            if state[:2] == (x, y):
                return self._path(state)
        return None
