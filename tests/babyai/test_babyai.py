"""The BabyAI env server over real HTTP (uvicorn on a thread), driven as AgentGym's
``BabyAIEnvClient`` drives it: ``/create``, then JSON bodies carrying ``id``."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

import gymnasium
import httpx
import pytest
from minigrid.core.actions import Actions
from minigrid.minigrid_env import MiniGridEnv

from app.babyai.game import (
    AGENTGYM_LEVELS,
    GOAL_LEVELS,
    BabyAIGame,
    data_idx_of,
    goals,
    level_and_seed,
)
from app.babyai.server import EnvError, Envs, create_app
from app.webshop.server.runner import serve_in_thread

TEXT = {Actions.left: "turn left", Actions.right: "turn right", Actions.forward: "move forward"}
HEADINGS = ((1, 0), (0, 1), (-1, 0), (0, -1))  # minigrid's agent_dir 0-3


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with serve_in_thread(create_app()) as running, httpx.Client(base_url=running.url) as c:
        yield c


class AgentGymClient:
    """The calls of AgentGym's client: a 200 is asserted on every one, as it does."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http
        self.id = self._ok(http.post("/create"))["id"]

    @staticmethod
    def _ok(response: httpx.Response) -> Any:
        assert response.status_code == 200, response.text
        return response.json()

    def reset(self, data_idx: int) -> dict[str, Any]:
        return self._ok(self.http.post("/reset", json={"id": self.id, "data_idx": data_idx}))

    def step(self, action: str) -> dict[str, Any]:
        return self._ok(self.http.post("/step", json={"id": self.id, "action": action}))

    def observe(self) -> dict[str, Any]:
        return self._ok(self.http.get(f"/observation?id={self.id}"))


def _twin(level: str, seed: int) -> MiniGridEnv:
    """The server's episode, rebuilt here: the same level and seed give the same layout."""
    env = gymnasium.make(level, disable_env_checker=True).unwrapped
    assert isinstance(env, MiniGridEnv)
    env.reset(seed=seed)
    return env


def _path_to_face(env: MiniGridEnv, targets: set[tuple[int, int]]) -> list[Actions]:
    """Shortest turn/forward path over the full grid to stand facing one of ``targets``."""
    start = (*map(int, env.agent_pos), env.agent_dir)
    parent: dict[tuple[int, int, int], tuple[tuple[int, int, int], Actions]] = {}
    queue = deque([start])
    while queue:
        x, y, d = state = queue.popleft()
        dx, dy = HEADINGS[d]
        if (x + dx, y + dy) in targets:
            path = []
            while state != start:
                state, action = parent[state]
                path.append(action)
            return path[::-1]
        cell = env.grid.get(x + dx, y + dy)
        moves = [((x, y, (d - 1) % 4), Actions.left), ((x, y, (d + 1) % 4), Actions.right)]
        if cell is None or cell.can_overlap():
            moves.append(((x + dx, y + dy, d), Actions.forward))
        for nxt, action in moves:
            if nxt not in parent and nxt != start:
                parent[nxt] = (state, action)
                queue.append(nxt)
    raise AssertionError("no path to the target")


@pytest.mark.parametrize(
    "level",
    [
        "BabyAI-GoToRedBallNoDists-v0",
        "BabyAI-GoToRedBall-v0",
        "BabyAI-GoToObjS6-v1",
        "BabyAI-GoToLocalS8N7-v0",
        "BabyAI-GoToDoor-v0",
        "BabyAI-PickupLoc-v0",
        "BabyAI-OpenRedDoor-v0",
    ],
)
def test_scripted_solver_reaches_the_goal(client: httpx.Client, level: str) -> None:
    seed = 1
    env = AgentGymClient(client)
    first = env.reset(data_idx_of(level, seed))
    twin = _twin(level, seed)
    assert first["observation"].startswith(f"Your goal: {twin.mission}\n")
    instr = twin.instrs
    path = _path_to_face(twin, {tuple(map(int, p)) for p in instr.desc.obj_poss})
    assert path, "the level starts solved: pick another seed"
    answer: dict[str, Any] = {}
    for primitive in path:
        assert not answer.get("done")
        answer = env.step(TEXT[primitive])
        twin.step(primitive)
    verb = type(instr).__name__
    if verb == "PickupInstr":  # AgentGym's prompt spells it "pick up"; the nearest is "1"
        obj = twin.grid.get(*twin.front_pos)
        answer = env.step(f"Pick up {obj.color} {obj.type}")
        twin.step(Actions.pickup)
        assert f"You are carrying a {obj.color} {obj.type}." in answer["observation"]
    elif verb == "OpenInstr":
        answer = env.step("toggle")
        twin.step(Actions.toggle)
    expected = 1 - 0.9 * twin.step_count / twin.max_steps
    assert answer["done"] is True
    assert answer["reward"] == pytest.approx(expected) and answer["reward"] > 0
    assert answer["score"] == pytest.approx(expected)
    assert "The task is completed." in answer["observation"]
    assert env.observe()["done"] is True


@pytest.mark.parametrize(
    ("level", "seed", "seen", "action"),
    [
        (
            "BabyAI-GoToRedBallNoDists-v0",
            0,
            "red ball 1, 4 steps ahead and 3 steps to your right",
            "go to red ball 1",
        ),
        (
            "BabyAI-PickupLoc-v0",
            0,
            "grey key 1, 1 step ahead and 2 steps to your left",
            "pickup grey key 1",
        ),
        (
            "BabyAI-OpenRedDoor-v0",
            0,
            "red closed door 1, 1 step ahead and 1 step to your left",
            "toggle and go through red closed door 1",
        ),
    ],
)
def test_one_high_level_action_solves_a_level_with_its_target_in_view(
    client: httpx.Client, level: str, seed: int, seen: str, action: str
) -> None:
    env = AgentGymClient(client)
    first = env.reset(data_idx_of(level, seed))
    assert seen in first["observation"] and f'"{action}"' in first["observation"]
    answer = env.step(action)
    assert answer["done"] is True and answer["reward"] > 0.5
    refused = client.post("/step", json={"id": env.id, "action": "turn left"})
    assert refused.status_code == 409 and "ended" in refused.json()["error"]


def test_doors_are_gone_through_and_objects_carried(client: httpx.Client) -> None:
    env = AgentGymClient(client)
    first = env.reset(data_idx_of("BabyAI-GoToObjDoor-v0", 2))["observation"]
    assert "yellow closed door 1, 1 step to your left;" in first
    assert "red key 1" in first
    # through the doorway: the next room, where nothing is in sight
    beyond = env.step("toggle and go through yellow closed door 1")["observation"]
    assert beyond.startswith("You see no objects.")
    env.step("turn left")
    back = env.step("turn left")["observation"]
    assert back.startswith("You see: yellow open door 1, 1 step ahead;")
    assert '"go through yellow open door 1"' in back
    home = env.step("go through yellow open door 1")["observation"]
    assert home.startswith("You see: red key 1, 2 steps ahead;")
    carrying = env.step("pick up red key")["observation"]
    assert "You are carrying a red key." in carrying and '"drop"' in carrying
    dropped = env.step("drop")["observation"]
    assert "You are carrying nothing." in dropped
    assert "Right in front of you: red key 1." in dropped


def test_unavailable_actions_are_answered_in_the_observation(client: httpx.Client) -> None:
    env = AgentGymClient(client)
    env.reset(data_idx_of("BabyAI-GoToRedBallNoDists-v0", 3))
    for action, says in [
        ("fly to the moon", '"fly to the moon" is not an available action.'),
        ("", "No action was given."),
        ("go to red ball 7", '"go to red ball 7" is not an available action.'),
        ("drop", "You cannot drop anything: you carry nothing."),
    ]:
        answer = env.step(action)
        assert answer["observation"].startswith(says), answer["observation"]
        assert answer["observation"].splitlines()[-1].startswith("Available actions: [")
        assert (answer["reward"], answer["done"]) == (0.0, False)
    listed = env.step("check available actions")["observation"]
    assert listed.startswith("You can take the following actions: turn left, turn right")
    actions = client.get("/available_actions", params={"id": env.id}).json()
    assert actions[:2] == ["turn left", "turn right"] and actions[-1] == "check available actions"


def test_an_episode_ends_when_its_turns_run_out() -> None:
    game = BabyAIGame("BabyAI-GoToRedBallNoDists-v0", seed=3, max_turns=3)
    results = [game.step("turn left") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert results[-1].reward == 0.0 and "out of turns (3)" in results[-1].observation


def test_unknown_id_is_a_404(client: httpx.Client) -> None:
    for response in [
        client.post("/step", json={"id": 10**9, "action": "turn left"}),
        client.post("/reset", json={"id": 10**9, "data_idx": 0}),
        client.get("/observation", params={"id": 10**9}),
    ]:
        assert response.status_code == 404
        assert response.json()["error"] == "unknown env id 1000000000 (never created, or closed)"
    assert client.post("/close", json={"id": 10**9}).json() is False


def test_closed_id_is_gone(client: httpx.Client) -> None:
    env = AgentGymClient(client)
    env.reset(0)
    assert client.post("/close", json={"id": env.id}).json() is True
    assert client.post("/step", json={"id": env.id, "action": "turn left"}).status_code == 404


def test_step_before_reset_is_a_409(client: httpx.Client) -> None:
    env = AgentGymClient(client)
    response = client.post("/step", json={"id": env.id, "action": "turn left"})
    assert response.status_code == 409
    assert response.json()["detail"] == "no episode yet: POST /reset first"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"id": "0", "action": "turn left"}, "body.id: Input should be a valid integer"),
        ({"id": 0}, "body.action: Field required"),
        ({"id": 0, "action": "x" * 1001}, "body.action: String should have at most 1000"),
    ],
)
def test_a_malformed_step_is_a_422(client: httpx.Client, body: dict, says: str) -> None:
    response = client.post("/step", json=body)
    assert response.status_code == 422
    assert response.json()["error"].startswith(says)


def test_a_negative_data_idx_is_a_422(client: httpx.Client) -> None:
    env = AgentGymClient(client)
    response = client.post("/reset", json={"id": env.id, "data_idx": -1})
    assert response.status_code == 422 and response.json()["error"].startswith("body.data_idx")


def test_the_same_data_idx_starts_the_same_episode(client: httpx.Client) -> None:
    data_idx = data_idx_of("BabyAI-GoToLocalS8N7-v0", 7)
    one, two = AgentGymClient(client), AgentGymClient(client)
    first = one.reset(data_idx)
    assert first == two.reset(data_idx) == one.reset(data_idx)
    assert first == {**one.observe(), "observation": first["observation"]}
    assert (first["reward"], first["score"], first["done"]) == (0.0, 0.0, False)
    assert one.step("turn right") == two.step("turn right")
    other = two.reset(data_idx + 40)  # same level, next seed
    assert other["observation"] != first["observation"]


def test_data_idx_picks_level_and_seed_as_agentgym() -> None:
    assert len(AGENTGYM_LEVELS) == 40 and set(AGENTGYM_LEVELS) <= set(gymnasium.registry)
    assert level_and_seed(0) == ("BabyAI-GoToRedBallGrey-v0", 0)
    assert level_and_seed(39 + 40 * 5) == ("BabyAI-BossLevelNoUnlock-v0", 5)
    assert data_idx_of("BabyAI-PickupLoc-v0", 2) == 98


def test_goals_are_deterministic_and_test_seeds_are_held_out() -> None:
    listed = goals(num_seeds=10)
    assert listed == goals(num_seeds=10)
    assert len(listed) == 10 * len(GOAL_LEVELS)
    train = {g.seed for g in listed if g.split == "train"}
    test = {g.seed for g in listed if g.split == "test"}
    assert train and test and not train & test
    for goal in listed[:: len(GOAL_LEVELS) + 1]:
        assert level_and_seed(goal.data_idx) == (goal.level, goal.seed)
        assert BabyAIGame(goal.level, goal.seed).mission == goal.mission


def test_ids_step_concurrently(client: httpx.Client) -> None:
    failures: list[BaseException] = []

    def play(data_idx: int) -> None:
        try:
            env = AgentGymClient(client)
            env.reset(data_idx)
            for _ in range(10):
                env.step("turn left")
            assert env.observe()["done"] is False
        except BaseException as exc:  # reported below, from the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=play, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not failures, failures


def test_idle_ids_are_closed_when_ids_are_created() -> None:
    now = [0.0]
    envs = Envs(max_envs=2, ttl_s=10, max_turns=5, clock=lambda: now[0])
    old = envs.create()
    envs.create()
    with pytest.raises(EnvError, match="too many open envs"):
        envs.create()
    now[0] = 11.0
    envs.create()
    with pytest.raises(EnvError, match="unknown env id"), envs.using(old):
        pass
