"""Many sessions at once, and many requests on one session at once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

NUM_SESSIONS = 100


def test_100_sessions_step_concurrently_and_match_in_process(
    server, webshop_env, oracle, reference_episode
) -> None:
    num_goals = min(len(webshop_env.goals), 10)
    expected = {g: reference_episode(g) for g in range(num_goals)}
    limits = httpx.Limits(max_connections=NUM_SESSIONS, max_keepalive_connections=NUM_SESSIONS)

    with httpx.Client(base_url=server.url, timeout=60, limits=limits) as client:

        def run(i: int) -> tuple[int, list[str], float]:
            goal_id = i % num_goals
            created = client.post("/sessions", json={"goal_id": goal_id})
            assert created.status_code == 201, created.text
            sid = created.json()["session_id"]

            def act(action: str) -> tuple:
                r = client.post(f"/sessions/{sid}/step", json={"action": action})
                assert r.status_code == 200, r.text
                step = r.json()
                avail = client.get(f"/sessions/{sid}/available_actions").json()
                return step["observation"], avail, step["reward"], step["done"]

            first = (created.json()["observation"], created.json()["available_actions"])
            episode = oracle(webshop_env.goals[goal_id], first, act)
            client.delete(f"/sessions/{sid}")
            return goal_id, episode.observations, episode.reward

        with ThreadPoolExecutor(max_workers=NUM_SESSIONS) as pool:
            results = list(pool.map(run, range(NUM_SESSIONS)))

    assert len(results) == NUM_SESSIONS
    for goal_id, observations, reward in results:
        assert observations == expected[goal_id].observations
        assert reward == expected[goal_id].reward


def test_concurrent_steps_on_one_session_are_serialised(client, server) -> None:
    sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]
    actions = [f"search[item {i}]" for i in range(30)]
    with httpx.Client(base_url=server.url, timeout=60) as shared:

        def step(action: str) -> int:
            return shared.post(f"/sessions/{sid}/step", json={"action": action}).status_code

        with ThreadPoolExecutor(max_workers=30) as pool:
            codes = list(pool.map(step, actions))
    assert codes == [200] * len(actions)
    assert client.get(f"/sessions/{sid}").json()["num_steps"] == len(actions)
    last = client.get(f"/sessions/{sid}/observation").json()["observation"]
    assert "Page 1 (Total results:" in last
