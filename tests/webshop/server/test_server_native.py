"""The native API over real HTTP: sessions, an episode to buy, goals, health."""

from __future__ import annotations

import httpx
import pytest

from app.webshop.env import WebShopEnv

GOAL_KEYS = {
    "id", "split", "instruction", "asin", "attributes", "goal_options", "price_upper",
    "weight", "category",
}  # fmt: skip


def _play_native(client: httpx.Client, env: WebShopEnv, goal_id: int, oracle) -> tuple:
    created = client.post("/sessions", json={"goal_id": goal_id})
    assert created.status_code == 201, created.text
    body = created.json()
    sid = body["session_id"]

    def act(action: str) -> tuple:
        r = client.post(f"/sessions/{sid}/step", json={"action": action})
        assert r.status_code == 200, r.text
        step = r.json()
        avail = client.get(f"/sessions/{sid}/available_actions").json()
        return step["observation"], avail, step["reward"], step["done"]

    first = (body["observation"], body["available_actions"])
    return sid, oracle(env.goals[goal_id], first, act)


def test_create_session_by_goal_id_returns_goal_and_first_page(client, webshop_env) -> None:
    r = client.post("/sessions", json={"goal_id": 3})
    assert r.status_code == 201
    body = r.json()
    assert set(body) == {"session_id", "goal", "observation", "available_actions"}
    assert set(body["goal"]) == GOAL_KEYS
    goal = webshop_env.goals[3]
    assert body["goal"]["id"] == 3
    assert body["goal"]["instruction"] == goal.instruction
    assert body["goal"]["asin"] == goal.asin
    assert body["observation"].startswith("WebShop [SEP] Instruction: [SEP] ")
    assert goal.instruction in body["observation"]
    assert body["available_actions"] == {"has_search_bar": True, "clickables": ["search"]}


def test_create_session_by_split_and_index(client, webshop_env) -> None:
    train_ids = list(webshop_env.goal_ids("train"))
    r = client.post("/sessions", json={"split": "train", "index": 1})
    assert r.status_code == 201, r.text
    assert r.json()["goal"]["id"] == train_ids[1]
    assert r.json()["goal"]["split"] == "train"


def test_create_session_without_body_draws_a_goal(client, webshop_env) -> None:
    for payload in ({}, None, {"seed": 7}):
        r = (
            client.post("/sessions", json=payload)
            if payload is not None
            else client.post("/sessions")
        )
        assert r.status_code == 201, r.text
        assert 0 <= r.json()["goal"]["id"] < len(webshop_env.goals)


def test_native_episode_to_buy_matches_in_process(
    client, webshop_env, oracle, reference_episode
) -> None:
    for goal_id in (0, 1, 2):
        sid, episode = _play_native(client, webshop_env, goal_id, oracle)
        expected = reference_episode(goal_id)
        assert episode.done
        assert episode.actions == expected.actions
        assert episode.observations == expected.observations
        assert episode.reward == expected.reward
        assert episode.actions[-1] == "click[buy now]"
        summary = client.get(f"/sessions/{sid}").json()
        assert summary["done"] is True
        assert summary["reward"] == expected.reward
        assert summary["goal_id"] == goal_id
        assert summary["num_steps"] == len(episode.actions)
        assert summary["reward_parts"] is not None
        assert summary["purchased_asin"]


def test_buy_step_carries_reward_parts(client, webshop_env, reference_episode) -> None:
    expected = reference_episode(0)
    sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]
    for action in expected.actions:
        step = client.post(f"/sessions/{sid}/step", json={"action": action}).json()
    assert step["done"] is True
    assert step["info"]["valid"] is True
    assert step["info"]["reward_parts"] is not None
    assert step["reward"] == expected.reward


def test_invalid_action_is_a_step_with_valid_false(client) -> None:
    sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]
    r = client.post(f"/sessions/{sid}/step", json={"action": "dance[wildly]"})
    assert r.status_code == 200
    body = r.json()
    assert body["reward"] == 0
    assert body["done"] is False
    assert body["info"]["valid"] is False
    assert body["observation"].startswith("WebShop [SEP] Instruction:")


def test_observation_modes(client) -> None:
    sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]
    client.post(f"/sessions/{sid}/step", json={"action": "search[shirt]"})
    text = client.get(f"/sessions/{sid}/observation").json()["observation"]
    assert text.startswith("Instruction: [SEP]")
    assert "Back to Search" in text
    rich = client.get(f"/sessions/{sid}/observation", params={"mode": "text_rich"})
    assert "[button]" in rich.json()["observation"]
    html = client.get(f"/sessions/{sid}/observation", params={"mode": "html"})
    assert "<" in html.json()["observation"]
    bad = client.get(f"/sessions/{sid}/observation", params={"mode": "pdf"})
    assert bad.status_code == 422
    assert "mode" in bad.json()["detail"]


def test_delete_session_204_then_404(client) -> None:
    sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]
    assert client.delete(f"/sessions/{sid}").status_code == 204
    assert client.get(f"/sessions/{sid}").status_code == 404
    assert client.delete(f"/sessions/{sid}").status_code == 404


def test_delete_unknown_session_404(client) -> None:
    missing = client.delete("/sessions/never-existed")
    assert missing.status_code == 404
    assert "unknown session" in missing.json()["detail"]


def test_list_goals_by_split_with_paging(client, webshop_env) -> None:
    everything = client.get("/goals", params={"limit": 5}).json()
    assert everything["total"] == len(webshop_env.goals)
    assert [g["id"] for g in everything["goals"]] == [0, 1, 2, 3, 4]
    train_ids = list(webshop_env.goal_ids("train"))
    page = client.get("/goals", params={"split": "train", "offset": 2, "limit": 3}).json()
    assert page["total"] == len(train_ids)
    assert [g["id"] for g in page["goals"]] == train_ids[2:5]
    assert all(g["split"] == "train" for g in page["goals"])
    assert client.get("/goals", params={"split": "dev"}).status_code == 422
    assert client.get("/goals", params={"limit": 0}).status_code == 422
    assert client.get("/goals", params={"offset": -1}).status_code == 422


def test_get_goal_by_id(client, webshop_env) -> None:
    r = client.get("/goals/4")
    assert r.status_code == 200
    assert r.json()["instruction"] == webshop_env.goals[4].instruction
    assert set(r.json()) == GOAL_KEYS


def test_get_goal_by_set_reaches_the_human_goals_of_a_synthetic_server(client, webshop_env) -> None:
    """An AGL reset by a human instruction plays a human goal (``goal_set: human``); its
    id is reachable by set, where ``/goals/{id}`` names the synthetic goal of that number."""
    human = webshop_env.goal_set("human")
    reset = client.post("/agl/reset", json={"instruction": human[2].instruction})
    info = reset.json()["info"]
    assert (info["goal_set"], info["goal_id"]) == ("human", 2)
    by_set = client.get(f"/goals/{info['goal_set']}/{info['goal_id']}")
    assert by_set.status_code == 200, by_set.text
    assert by_set.json()["instruction"] == human[2].instruction
    assert by_set.json()["goal_set"] == "human"
    assert set(by_set.json()) == GOAL_KEYS | {"goal_set"}
    assert client.get("/goals/2").json()["instruction"] == webshop_env.goals[2].instruction
    served = client.get("/goals/synthetic/2").json()
    assert served == {**client.get("/goals/2").json(), "goal_set": "synthetic"}
    for path, said in [
        (f"/goals/human/{len(human)}", f"unknown goal {len(human)} of the human set"),
        ("/goals/people/0", "unknown goal set 'people'; expected one of synthetic, human"),
    ]:
        r = client.get(path)
        assert r.status_code == 404 and r.json()["detail"].startswith(said), r.text


@pytest.mark.parametrize("path", ["/health"])
def test_health_counts_products_goals_sessions(client, webshop_env, path) -> None:
    body = client.get(path).json()
    assert body["status"] == "ok"
    assert body["goals"] == len(webshop_env.goals)
    assert body["products"] > 0
    assert isinstance(body["sessions"], int)


def test_step_carries_the_next_available_actions_null_once_done(client, reference_episode) -> None:
    expected = reference_episode(0)
    sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]
    for action in expected.actions:
        step = client.post(f"/sessions/{sid}/step", json={"action": action}).json()
        if not step["done"]:
            separate = client.get(f"/sessions/{sid}/available_actions").json()
            assert step["available_actions"] == separate
    assert step["done"] is True
    assert step["available_actions"] is None


def test_session_steps_list_every_step_taken_in_order(client, reference_episode) -> None:
    expected = reference_episode(0)
    sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]
    client.post(f"/sessions/{sid}/step", json={"action": "click[not a button]"})
    for action in expected.actions:
        client.post(f"/sessions/{sid}/step", json={"action": action})
    plain = client.get(f"/sessions/{sid}").json()
    assert "steps" not in plain
    steps = client.get(f"/sessions/{sid}", params={"steps": "true"}).json()["steps"]
    assert [s["index"] for s in steps] == list(range(len(expected.actions) + 1))
    assert [s["action"] for s in steps] == ["click[not a button]", *expected.actions]
    assert steps[0]["valid"] is False and all(s["valid"] for s in steps[1:])
    assert steps[-1]["done"] is True and steps[-1]["reward"] == plain["reward"]


def test_a_step_answered_ahead_of_fastapi_is_the_routes_answer(client, reference_episode) -> None:
    """A JSON step is answered by ``StepAhead``; one sent as another JSON media type,
    which FastAPI reads as JSON and ``StepAhead`` leaves alone, by the route. The same
    actions on the same goal give the same bytes either way, errors included."""
    expected = reference_episode(0)
    actions = ["click[not a button]", *expected.actions, "search[after the end]"]

    def play(content_type: str) -> list[tuple[int, bytes]]:
        sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]
        answers = []
        for target, action in [(sid, a) for a in actions] + [("nope", "search[a]")]:
            r = client.post(
                f"/sessions/{target}/step",
                content=f'{{"action": "{action}"}}'.encode(),
                headers={"content-type": content_type},
            )
            answers.append((r.status_code, r.content))
        return answers

    ahead = play("application/json")
    routed = play("application/vnd.webshop+json")
    assert ahead == routed
    assert [status for status, _ in ahead] == [200] * len(actions) + [404]
    assert b'"valid":false' in ahead[0][1]
