"""The dashboard's answers to bad input and missing credentials: clear 4xx pages, never a
500; and that it reads as the read-only role."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient
from helpers.api_rows import AUTH, TOKEN, Rows
from sqlalchemy import text

from app.api.main import create_app
from app.config import Settings
from app.db.lifecycle import AttemptStatus, RolloutStatus
from app.db.session import session_scope


@pytest.fixture
def signed_in(client: TestClient) -> TestClient:
    client.headers.update(AUTH)
    return client


@pytest.mark.parametrize(
    "path",
    [
        "/dashboard",
        "/dashboard/rollouts",
        f"/dashboard/rollouts/{uuid.UUID(int=1)}",
        "/dashboard/compare?goal=1",
    ],
)
def test_every_page_needs_the_token(client: TestClient, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    assert "needs the API token" in answer.text and 'name="token"' in answer.text
    wrong = client.get(path, headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401
    client.cookies.set("wsrl_dashboard", TOKEN)  # the cookie holds a digest, not the token
    assert client.get(path).status_code == 401
    client.cookies.clear()


def test_login_sets_a_cookie_that_opens_the_pages(client: TestClient) -> None:
    refused = client.post(
        "/dashboard/login",
        data={"token": "nope", "next": "/dashboard/rollouts"},
        follow_redirects=False,
    )
    assert refused.status_code == 401 and "wrong token" in refused.text
    answer = client.post(
        "/dashboard/login",
        data={"token": TOKEN, "next": "/dashboard/rollouts?mode=train"},
        follow_redirects=False,
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == "/dashboard/rollouts?mode=train"
    assert TOKEN not in answer.headers["set-cookie"]
    assert client.get("/dashboard/rollouts").status_code == 200


def test_login_goes_nowhere_but_the_dashboard(client: TestClient) -> None:
    for target in ("https://evil.example/", "//evil.example/dashboard", "/docs"):
        answer = client.post(
            "/dashboard/login", data={"token": TOKEN, "next": target}, follow_redirects=False
        )
        assert answer.headers["location"] == "/dashboard", target


def test_without_a_token_configured_the_pages_are_open(api_settings: Settings) -> None:
    with TestClient(create_app(api_settings.model_copy(update={"api_token": ""}))) as open_client:
        assert open_client.get("/dashboard").status_code == 200


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("limit=100000", "limit=100000 is out of range (1 to 200)"),
        ("limit=0", "limit=0 is out of range"),
        ("limit=ten", "limit='ten' is not a whole number"),
        ("version=-1", "version=-1 is out of range"),
        ("version=1.5", "is not a whole number"),
        ("version=99999999999", "is out of range"),
        ("reward_min=abc", "reward_min='abc' is not a number"),
        ("reward_max=nan", "is not a finite number"),
        ("reward_min=0.9&reward_max=0.1", "is above reward_max"),
        ("success=maybe", "success='maybe' is not one of: yes, no"),
        ("mode=play", "mode='play' is not one of: train, eval"),
        ("status=done", "is not one of"),
        ("failure=cosmic", "failure='cosmic' is not one of: infrastructure, episode"),
        ("q=" + "x" * 201, "longer than 200 characters"),
        ("after=yesterday", "after='yesterday' is not a page cursor"),
        (f"after=2026-01-01T00:00:00~{uuid.UUID(int=2)}", "no UTC offset"),
        ("after=2026-01-01T00:00:00%2B00:00~not-a-uuid", "is not a page cursor"),
        ("version=1&version=2", "version is given 2 times"),
        ("q=shoes%00", "q holds a NUL character"),
    ],
)
def test_malformed_filters_get_a_400_page(signed_in: TestClient, query: str, message: str) -> None:
    answer = signed_in.get(f"/dashboard/rollouts?{query}")
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"].startswith("text/html")
    assert message in answer.text.replace("&#39;", "'")


def test_unknown_and_malformed_ids(signed_in: TestClient, rows: Rows) -> None:
    missing = uuid.uuid4()
    answer = signed_in.get(f"/dashboard/rollouts/{missing}")
    assert answer.status_code == 404 and f"no rollout {missing}" in answer.text
    answer = signed_in.get("/dashboard/rollouts/not-a-uuid")
    assert answer.status_code == 400 and "is not a rollout id" in answer.text
    assert signed_in.get("/dashboard/compare").status_code == 400
    assert signed_in.get("/dashboard/compare?goal=x").status_code == 400
    answer = signed_in.get("/dashboard/compare?goal=2000000001")
    assert answer.status_code == 404 and "no finished episode of goal" in answer.text
    goal = rows.goal()
    rows.rollout(goal, status=RolloutStatus.SUCCEEDED, reward=1.0, versions=(3, 3))
    answer = signed_in.get(f"/dashboard/compare?goal={goal}")
    assert answer.status_code == 404 and "one policy version only (v3)" in answer.text
    answer = signed_in.get(f"/dashboard/compare?goal={goal}&a=3&b=4")
    assert answer.status_code == 404 and "no finished episode of goal" in answer.text


def test_a_filter_that_matches_nothing_is_an_empty_table(signed_in: TestClient) -> None:
    answer = signed_in.get("/dashboard/rollouts?q=%25_%5C&reward_min=5")
    assert answer.status_code == 200 and "No rollout matches these filters" in answer.text


def test_pages_read_as_the_readonly_role(signed_in: TestClient, api_settings: Settings) -> None:
    engine = signed_in.app.state.dashboard_engine
    with engine.connect() as conn:
        assert conn.execute(text("SELECT current_user")).scalar() == api_settings.sql_user
        assert conn.execute(text("SHOW transaction_read_only")).scalar() == "on"
    assert signed_in.get("/dashboard").status_code == 200


def test_an_episode_with_a_failed_attempt_and_odd_records(
    signed_in: TestClient, rows: Rows
) -> None:
    """A retry's error, a call whose request is not a list of messages (an external
    agent's), a call without token ids, and an invalid step: shown, not a 500."""
    rollout = rows.rollout(rows.goal(), status=RolloutStatus.RUNNING)
    rows.attempt(rollout, 1, status=AttemptStatus.FAILED)
    with session_scope(signed_in.app.state.engine) as session:
        session.execute(
            text("UPDATE attempts SET error = 'env error: 503' WHERE rollout_id = :r"),
            {"r": rollout},
        )
    rows.attempt(
        rollout,
        2,
        steps=[{"action": "fly away", "valid": False, "info": {"error": "no such action"}}],
        calls=[{"request_messages": {"prompt": "raw"}, "response_text": "fly away"}],
    )
    page = signed_in.get(f"/dashboard/rollouts/{rollout}")
    assert page.status_code == 200, page.text
    assert page.text.count('class="attempt"') == 2
    assert "env error: 503" in page.text and "no such action" in page.text
    assert "&#34;prompt&#34;: &#34;raw&#34;" in page.text or '"prompt": "raw"' in page.text
    assert "no token ids / logprobs recorded for this call" in page.text


def test_a_goal_of_another_environment_shows_its_own_fields(
    signed_in: TestClient, rows: Rows
) -> None:
    """A BabyAI goal has no product: its page shows the environment and the goal's spec."""
    goal = rows.goal(instruction="go to the red ball", spec={"data_idx": 1, "seed": 0})
    rollout = rows.rollout(goal, status=RolloutStatus.RUNNING)
    page = signed_in.get(f"/dashboard/rollouts/{rollout}")
    assert page.status_code == 200, page.text
    assert "<th>environment</th><td>babyai</td>" in page.text
    assert "data_idx: 1" in page.text and "target product" not in page.text
    assert "None" not in page.text
