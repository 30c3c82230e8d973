"""Environments, and the registry the players and the trainer take them from.

An environment is a folder here and one entry in :data:`ENVIRONMENTS`. It gives the
agent's side of its game: an :class:`~app.core.agent.Episode` subclass (its prompt, the
grammar of a reply, what a success is), its openings (the scripted first steps a
rollout's ``start`` asks for), the client of its env server and how a goal row opens a
session there, and, where the server lists none, its goals. The core plays any of them
the same way and names none (``tests/environments/test_registry.py``); the env servers
are packages of their own (``app/webshop``, ``app/babyai``).

* ``webshop/`` - WebShop (the original's pages, actions and reward), over our native API.
* ``babyai/`` - BabyAI's levels in words, over AgentGym's protocol (:mod:`.agentgym`).
* Any other env server of AgentGym's protocol, by name and URL alone (``WSRL_AGENTGYM``,
  :func:`agentgym_environment`): played with :mod:`.agentgym.agent`, which knows nothing
  of its game; its goals are its ``data_idx`` 0 to N-1.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.config import AgentGymServer, Settings
from app.core.agent import AgentProtocol, Episode
from app.core.enqueue import EnqueueError, insert_goals
from app.core.env_client import EnvSession
from app.core.http_pool import HttpPool
from app.db.lifecycle import GoalSource, RolloutStart, parse_start
from app.db.models import Goal
from app.environments.agentgym.agent import AgentGymEpisode
from app.environments.agentgym.client import AgentGymClient
from app.environments.babyai.agent import BabyAIEpisode
from app.environments.spec import validated_spec
from app.environments.webshop.agent import WebShopEpisode
from app.environments.webshop.client import EnvClient
from app.environments.webshop.client import probe as webshop_probe
from app.environments.webshop.goals import WebShopGoalSpec, ensure_goals
from app.environments.webshop.opening import play_opening as webshop_opening

# BabyAI's goal rows take ids from here on (id = BABYAI_GOAL_IDS + data_idx): goal ids are
# one key for every environment, and WebShop's are its env's goal indices, far below.
BABYAI_GOAL_IDS = 100_000_000
AGENTGYM_GOAL_IDS = 1_000_000_000
"""A server named in ``WSRL_AGENTGYM`` takes the million ids from here + 1,000,000 x (its
name's CRC-32 mod 1,000): its goal ids do not depend on which other servers are named."""


class UnknownEnvironmentError(ValueError):
    """A name that is not in :data:`ENVIRONMENTS`."""


class GoalIdsTaken(EnqueueError):
    """An environment's goal ids are held by another environment's goals."""


class BabyAIGoalSpec(BaseModel):
    """A BabyAI goal's own fields: AgentGym's ``data_idx`` and the level and seed it
    stands for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data_idx: int = Field(ge=0)
    level: str
    seed: int = Field(ge=0)


@dataclass(frozen=True)
class Environment:
    """One registry entry."""

    name: str
    description: str
    episode_type: type[Episode]
    """What a player plays: ``episode_type(instruction, observation, available_actions,
    protocol)``."""
    opening: Callable[[Episode, RolloutStart | str, Callable[[str], bool]], list[str]]
    """Play the scripted steps of a rollout's ``start`` (``step(action)`` performs one and
    says whether the env took it); returns their actions."""
    client: Callable[[Settings], Any]
    """The client of its env server (``close()`` it): ``create_session`` through
    :attr:`open_session`, then ``step``, ``available_actions``, ``close_session``."""
    open_session: Callable[[Any, int, dict[str, Any] | None, str], EnvSession]
    """``open_session(client, goal_id, spec, instruction)``: a goal row's episode."""
    url_setting: str = "env_url"
    """The setting (``WSRL_`` + upper case) naming where its env server listens."""
    url_of: Callable[[Settings], str] | None = None
    """Where its env server listens, where no setting of its own says (else None)."""
    serve: tuple[str, ...] = ("env", "serve")
    """The ``wsrl`` command that serves it (``--port`` is added)."""
    health: str = "/health"
    """A path of its server that answers 200 once it serves."""
    compose: str = ""
    """How the Compose stack starts its server, for the preflight's fix (``, or ...``)."""
    probe: Callable[[Settings], str] | None = None
    """Its own check of its server (else: a GET of :attr:`health` answering 200)."""
    openings: bool = True
    """Whether starts other than ``search`` mean anything here (:func:`no_opening`)."""
    goal_spec: type[BaseModel] | None = None
    """What its goals' ``spec`` holds; :meth:`spec` validates one."""
    goal_rows: Callable[[], list[dict[str, Any]]] | None = None
    """Its goals as ``goals`` rows, where its server does not list them (else None: they
    are loaded from the server, :func:`app.core.enqueue.sync_goals`)."""

    def url(self, settings: Settings) -> str:
        if self.url_of is not None:
            return self.url_of(settings)
        return str(getattr(settings, self.url_setting))

    def env_probe(self, settings: Settings) -> tuple[Callable[[], str], str]:
        """The preflight's check of its env server and the fix it prints on failure."""
        if not self.serve:
            fix = f"start its server, or correct its URL in WSRL_{self.url_setting.upper()}"
        else:
            fix = (
                f"start it (`wsrl {' '.join(self.serve)}`{self.compose}), "
                f"set WSRL_{self.url_setting.upper()}"
            )
        if self.probe is not None:
            return (lambda: self.probe(settings)), fix  # type: ignore[misc]
        url = self.url(settings)

        def probe() -> str:
            pool = HttpPool(url, timeout_s=5.0)
            try:
                response = pool.request("GET", self.health)
            finally:
                pool.close()
            if response.status_code != 200:
                raise RuntimeError(f"{url}{self.health} answered {response.status_code}")
            return f"{url}: serving"

        return probe, fix

    def spec(self, data: dict[str, Any] | None) -> dict[str, Any] | None:
        """``data`` validated as this environment's goal spec (None where it has none);
        raises :class:`ValueError` naming what is wrong."""
        if self.goal_spec is None:
            return None
        return validated_spec(self.goal_spec, data or {}, f"not a {self.name} goal spec")

    def episode(
        self,
        instruction: str,
        observation: str,
        available_actions: dict[str, Any],
        protocol: AgentProtocol,
    ) -> Episode:
        return self.episode_type(instruction, observation, available_actions, protocol)


def no_opening(
    episode: Episode, start: RolloutStart | str, step: Callable[[str], bool]
) -> list[str]:
    """An environment without openings plays from its first observation only."""
    if parse_start(start) != RolloutStart.SEARCH:
        raise ValueError(f"start {start!r}: this environment has no openings, only 'search'")
    return []


def _babyai_goal_rows() -> list[dict[str, Any]]:
    from app.babyai.game import goals  # minigrid, loaded only where goals are made

    return [
        {
            "id": BABYAI_GOAL_IDS + goal.data_idx,
            "environment": "babyai",
            "spec": BabyAIGoalSpec(
                data_idx=goal.data_idx, level=goal.level, seed=goal.seed
            ).model_dump(),
            "split": goal.split,
            "instruction": goal.mission,
            "category": goal.level,
            "weight": 1.0,
            "source": GoalSource.SYNTHETIC,
        }
        for goal in goals()
    ]


def _babyai_session(
    client: AgentGymClient, goal_id: int, spec: dict[str, Any] | None, instruction: str
) -> EnvSession:
    data_idx = BabyAIGoalSpec.model_validate(spec).data_idx if spec else goal_id - BABYAI_GOAL_IDS
    return client.create_session(data_idx, instruction)


ENVIRONMENTS: dict[str, Environment] = {
    "webshop": Environment(
        name="webshop",
        description="WebShop: buy the product an instruction asks for (the original's "
        "pages, actions and reward)",
        episode_type=WebShopEpisode,
        opening=webshop_opening,
        client=EnvClient.from_settings,
        open_session=lambda client, goal_id, spec, instruction: client.create_session(goal_id),
        probe=webshop_probe,
        compose=", or the webshop Compose service",
        goal_spec=WebShopGoalSpec,
    ),
    "babyai": Environment(
        name="babyai",
        description="BabyAI: reach, pick up or open what the mission names in a grid "
        "world (minigrid's levels in words, AgentGym's protocol)",
        episode_type=BabyAIEpisode,
        opening=no_opening,
        client=lambda settings: AgentGymClient(settings.babyai_url),
        open_session=_babyai_session,
        url_setting="babyai_url",
        serve=("env", "babyai"),
        health="/",
        openings=False,
        goal_spec=BabyAIGoalSpec,
        goal_rows=_babyai_goal_rows,
    ),
}
WEBSHOP = ENVIRONMENTS["webshop"]


class AgentGymGoalSpec(BaseModel):
    """A goal of a server known by URL alone: the ``data_idx`` its ``/reset`` takes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data_idx: int = Field(ge=0)


def agentgym_goal_ids(name: str) -> int:
    """The first goal id of the server named ``name`` (:data:`AGENTGYM_GOAL_IDS`)."""
    return AGENTGYM_GOAL_IDS + (zlib.crc32(name.encode()) % 1000) * 1_000_000


def agentgym_environment(name: str, server: AgentGymServer) -> Environment:
    """The environment of an AgentGym server known by ``name`` and URL alone: its goals are
    ``data_idx`` 0 to ``server.goals - 1`` (every fifth held out), their task the server's
    first observation; an episode succeeds at ``server.success_reward``."""
    if name in ENVIRONMENTS:
        raise ValueError(f"WSRL_AGENTGYM names {name!r}, a built-in environment; rename it")
    first = agentgym_goal_ids(name)
    episode_type = type(
        "AgentGymEpisode", (AgentGymEpisode,), {"success_reward": server.success_reward}
    )

    def goal_rows() -> list[dict[str, Any]]:
        return [
            {
                "id": first + i,
                "environment": name,
                "spec": {"data_idx": i},
                "split": "test" if i % 5 == 0 else "train",
                "instruction": "",
                "weight": 1.0,
                "source": GoalSource.SYNTHETIC,
            }
            for i in range(server.goals)
        ]

    def open_session(
        client: AgentGymClient, goal_id: int, spec: dict[str, Any] | None, instruction: str
    ) -> EnvSession:
        data_idx = AgentGymGoalSpec.model_validate(spec).data_idx if spec else goal_id - first
        return client.create_session(data_idx, instruction)

    def url_of(settings: Settings) -> str:
        configured = settings.agentgym.get(name)
        if configured is None:
            raise UnknownEnvironmentError(f"WSRL_AGENTGYM here names no {name!r} server")
        return configured.url

    return Environment(
        name=name,
        description=f"{name}: the AgentGym server at {server.url} ({server.goals} tasks)",
        episode_type=episode_type,
        opening=no_opening,
        client=lambda settings: AgentGymClient(url_of(settings)),
        open_session=open_session,
        url_setting="agentgym",
        url_of=url_of,
        serve=(),
        health="/",
        openings=False,
        goal_spec=AgentGymGoalSpec,
        goal_rows=goal_rows,
    )


def get_environment(name: str, settings: Settings | None = None) -> Environment:
    """The built-in environment ``name``, else the AgentGym server ``settings`` name so."""
    if name in ENVIRONMENTS:
        return ENVIRONMENTS[name]
    servers = settings.agentgym if settings is not None else {}
    if name in servers:
        return agentgym_environment(name, servers[name])
    known = ", ".join([*sorted(ENVIRONMENTS), *sorted(servers)])
    raise UnknownEnvironmentError(
        f"unknown environment {name!r}; known: {known} (an AgentGym server is named in "
        "WSRL_AGENTGYM)"
    )


def goals_of(session: Session, settings: Settings, environment: Environment, split: str) -> int:
    """Make sure Postgres has ``environment``'s goals of ``split``, loading them (from its
    env server, or its own list) when it has none; returns how many were added."""
    if environment.goal_rows is None:  # WebShop's, from its env server
        return ensure_goals(session, settings, split)
    known = select(Goal.id).where(Goal.environment == environment.name, Goal.split == split)
    if session.scalar(known.limit(1)) is not None:
        return 0
    rows = [{**row, "spec": environment.spec(row.get("spec"))} for row in environment.goal_rows()]
    ids = [row["id"] for row in rows]
    taken = session.execute(
        select(Goal.environment, func.count())
        .where(Goal.id.between(min(ids), max(ids)), Goal.environment != environment.name)
        .group_by(Goal.environment)
    ).all()
    if taken:
        who = ", ".join(f"{count} of {other!r}" for other, count in taken)
        raise GoalIdsTaken(
            f"{environment.name}'s goal ids {ids[0]}-{ids[-1]} are taken by other "
            f"environments' goals ({who}); rename it"
        )
    return insert_goals(session, rows)
