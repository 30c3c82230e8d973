"""The AgentGym (``/agentgym``) and Agent Lightning (``/agl``) route families over HTTP."""

from __future__ import annotations

import logging

import httpx


def _agentgym_available(client: httpx.Client, env_idx: int) -> dict:
    r = client.get("/agentgym/available_actions", params={"env_idx": env_idx})
    assert r.status_code == 200, r.text
    return r.json()


def test_agentgym_root_says_ok(client) -> None:
    r = client.get("/agentgym/")
    assert r.status_code == 200
    assert r.json() == "ok"


def test_agentgym_episode_to_buy_matches_in_process(
    client, webshop_env, oracle, reference_episode
) -> None:
    env_idx = client.post("/agentgym/create").json()
    assert isinstance(env_idx, int)
    assert env_idx in client.get("/agentgym/list_envs").json()
    goal_id = 2
    reset = client.post("/agentgym/reset", json={"env_idx": env_idx, "session_id": goal_id})
    assert reset.status_code == 200, reset.text
    observation, extra = reset.json()
    assert extra is None
    assert client.get("/agentgym/observation", params={"env_idx": env_idx}).json() == observation
    instruction = client.get("/agentgym/instruction_text", params={"env_idx": env_idx}).json()
    assert webshop_env.goals[goal_id].instruction in instruction

    def act(action: str) -> tuple:
        r = client.post("/agentgym/step", json={"env_idx": env_idx, "action": action})
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == {"state", "reward", "done", "info"}
        return body["state"], _agentgym_available(client, env_idx), body["reward"], body["done"]

    first = (observation, _agentgym_available(client, env_idx))
    episode = oracle(webshop_env.goals[goal_id], first, act)
    expected = reference_episode(goal_id)
    assert episode.done
    assert episode.observations == expected.observations
    assert episode.reward == expected.reward

    state = client.get("/agentgym/state", params={"env_idx": env_idx}).json()
    assert set(state) == {"url", "html", "instruction_text"}

    assert client.post("/agentgym/close", json={"env_idx": env_idx}).json() is True
    assert client.post("/agentgym/close", json={"env_idx": env_idx}).json() is False
    gone = client.post("/agentgym/step", json={"env_idx": env_idx, "action": "search[a]"})
    assert gone.status_code == 404


def test_agentgym_routes_answer_as_the_real_server(client, webshop_env) -> None:
    env_idx = client.post("/agentgym/create").json()
    last = webshop_env.goals[-1]
    reset = client.post("/agentgym/reset", json={"env_idx": env_idx, "session_id": -1})
    assert reset.status_code == 200, reset.text
    assert last.instruction in reset.json()[0]
    params = {"env_idx": env_idx}
    heading = client.get("/agentgym/instruction_text", params=params).json()
    assert heading == f"Instruction: {last.instruction}"
    step = client.post("/agentgym/step", json={"env_idx": env_idx, "action": "search[tea]"})
    assert step.json()["info"] is None
    heading = client.get("/agentgym/instruction_text", params=params).json()
    assert heading == f"Instruction:{last.instruction}"  # the results page's heading
    state = client.get("/agentgym/state", params=params).json()
    assert state["instruction_text"] == f"Instruction: {last.instruction}"
    too_far = -len(webshop_env.goals) - 1
    r = client.post("/agentgym/reset", json={"env_idx": env_idx, "session_id": too_far})
    assert r.status_code == 404 and "goal" in r.json()["detail"]
    assert client.post("/agentgym/close", json=params).json() is True


def test_agentgym_reset_without_goal_draws_one(client) -> None:
    env_idx = client.post("/agentgym/create").json()
    reset = client.post("/agentgym/reset", json={"env_idx": env_idx})
    assert reset.status_code == 200
    assert reset.json()[0].startswith("WebShop [SEP] Instruction:")


def test_agentgym_unknown_env_404(client) -> None:
    r = client.get("/agentgym/observation", params={"env_idx": 987654})
    assert r.status_code == 404
    assert "unknown session" in r.json()["detail"]
    r = client.post("/agentgym/reset", json={"env_idx": 987654, "session_id": 0})
    assert r.status_code == 404
    assert client.get("/agentgym/observation").status_code == 422


def test_agl_episode_to_buy_matches_in_process(
    client, webshop_env, oracle, reference_episode
) -> None:
    goal_id = 1
    reset = client.post("/agl/reset", json={"session_id": goal_id})
    assert reset.status_code == 200, reset.text
    body = reset.json()
    sid = body["session_id"]
    assert body["done"] is False and body["reward"] == 0
    assert body["info"]["goal_id"] == goal_id
    available = body["info"]["available_actions"]

    def act(action: str) -> tuple:
        r = client.post("/agl/step", json={"session_id": sid, "action": action})
        assert r.status_code == 200, r.text
        step = r.json()
        assert step["session_id"] == sid
        avail = client.get(f"/sessions/{sid}/available_actions").json()
        return step["observation"], avail, step["reward"], step["done"]

    episode = oracle(webshop_env.goals[goal_id], (body["observation"], available), act)
    expected = reference_episode(goal_id)
    assert episode.done
    assert episode.observations == expected.observations
    assert episode.reward == expected.reward


def test_agl_reset_by_digit_string_and_by_instruction(client, webshop_env) -> None:
    by_digits = client.post("/agl/reset", json={"sessionId": "3"}).json()
    assert by_digits["info"]["goal_id"] == 3
    instruction = webshop_env.goals[5].instruction
    by_text = client.post("/agl/reset", json={"instruction": instruction.upper()})
    assert by_text.status_code == 200, by_text.text
    assert by_text.json()["info"]["goal_id"] == 5
    assert by_text.json()["info"]["instruction_matched"] is True


def test_agl_own_key_is_created_then_reset_on_a_new_goal(client) -> None:
    first = client.post("/agl/reset", json={"session_id": "my-run-42"}).json()
    assert first["session_id"] == "my-run-42"
    step = client.post("/agl/step", json={"session_id": "my-run-42", "action": "search[a]"})
    assert step.status_code == 200
    goals = set()
    for _ in range(10):
        again = client.post("/agl/reset", json={"session_id": "my-run-42"}).json()
        assert again["session_id"] == "my-run-42"
        assert again["observation"].startswith("WebShop [SEP] Instruction:")
        goals.add(again["info"]["goal_id"])
    assert len(goals) > 1  # a weighted draw per reset, not the first goal kept


def test_agl_unmatched_instruction_gets_a_random_goal_said_in_log_and_health(
    client, caplog
) -> None:
    before = client.get("/health").json()["unmatched_instructions"]
    body = {"instruction": "buy me a unicorn that no goal asks for", "task_id": "ws_7"}
    with caplog.at_level(logging.WARNING, logger="app.webshop.server.service"):
        r = client.post("/agl/reset", json=body)
    assert r.status_code == 200, r.text
    info = r.json()["info"]
    assert info["instruction_matched"] is False
    assert isinstance(info["goal_id"], int)
    assert (
        r.json()["observation"]
        == f"WebShop [SEP] Instruction: [SEP] {info['instruction']} [SEP] Search"
    )
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert warned == [
        "no goal has the instruction 'buy me a unicorn that no goal asks for': "
        "playing a random goal"
    ]
    health = client.get("/health").json()
    assert (health["unmatched"], health["unmatched_instructions"]) == ("random", before + 1)
    assert client.get("/agl/health").json()["unmatched_instructions"] == before + 1
    matched = client.post("/agl/reset", json={"instruction": info["instruction"]})
    assert matched.json()["info"]["instruction_matched"] is True
    assert client.get("/health").json()["unmatched_instructions"] == before + 1


def test_agl_unmatched_instruction_refused_409_when_asked(start_server, webshop_env) -> None:
    with (
        start_server(unmatched="refuse", max_sessions=4, max_sessions_per_client=4) as running,
        httpx.Client(base_url=running.url) as c,
    ):
        body = {"session_id": "runner-0", "instruction": "a unicorn", "goal_id": 3}
        r = c.post("/agl/reset", json=body)
        assert r.status_code == 409, r.text
        assert r.json()["error"] == (
            "no goal has the instruction 'a unicorn'; this server refuses unmatched "
            "instructions (WSRL_ENV_UNMATCHED=refuse): send one of its goals' instructions, "
            "or a goal_id and no instruction"
        )
        assert c.get("/health").json()["sessions"] == 0  # nothing was started
        assert c.get("/agl/health").json()["unmatched_instructions"] == 1
        instruction = webshop_env.goals[3].instruction
        ok = c.post("/agl/reset", json={**body, "instruction": instruction})
        assert ok.status_code == 200 and ok.json()["info"]["goal_id"] == 3


def test_agl_reset_by_goal_id(client, webshop_env) -> None:
    r = client.post("/agl/reset", json={"goal_id": 7, "session_id": "mine-7"})
    assert r.status_code == 200, r.text
    assert r.json()["session_id"] == "mine-7"
    assert r.json()["info"]["goal_id"] == 7
    assert r.json()["info"]["instruction"] == webshop_env.goals[7].instruction


def test_agl_reset_with_goal_id_and_instruction_follows_the_instruction(
    client, webshop_env
) -> None:
    """The example's server ignores goal_id: the instruction decides, matched or not."""
    instruction = webshop_env.goals[3].instruction
    both = client.post("/agl/reset", json={"goal_id": 7, "instruction": instruction})
    assert both.status_code == 200, both.text
    info = both.json()["info"]
    assert (info["goal_id"], info["goal_set"], info["instruction_matched"]) == (
        3,
        "synthetic",
        True,
    )
    unknown = client.post("/agl/reset", json={"goal_id": 7, "instruction": "a unicorn"})
    assert unknown.status_code == 200, unknown.text
    assert unknown.json()["info"]["instruction_matched"] is False


def test_agl_bad_bodies_400_with_error(client) -> None:
    sid = client.post("/agl/reset", json={}).json()["session_id"]
    for payload in (
        {"session_id": sid},
        {"action": "search[a]"},
        {"session_id": sid, "action": ""},
    ):
        r = client.post("/agl/step", json=payload)
        assert r.status_code == 400, r.text
        assert r.json()["error"] == r.json()["detail"]
    r = client.post("/agl/step", content=b"{oops", headers={"content-type": "application/json"})
    assert r.status_code == 400
    r = client.post("/agl/step", json={"session_id": "missing", "action": "search[a]"})
    assert r.status_code == 404
    assert "unknown session" in r.json()["error"]
    assert client.get("/agl/health").json()["status"] == "ok"
