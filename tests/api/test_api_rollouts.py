"""POST /v1/rollouts (enqueue) and GET /v1/rollouts[/{id}] (filters, paging, status)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import httpx
import pytest
from celery.signals import after_task_publish
from fastapi.testclient import TestClient
from helpers.api_rows import AUTH, Rows
from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session

from app.core.enqueue import expire_idempotency_keys
from app.db.lifecycle import AttemptStatus, RolloutMode, RolloutStart, RolloutStatus
from app.db.models import Attempt, EnqueueRequest, Rollout


@pytest.fixture
def published() -> Iterator[list[dict[str, Any]]]:
    """Celery messages the app sends (routing key and args), seen in this process."""
    sent: list[dict[str, Any]] = []

    def record(sender: str, headers: dict[str, Any], routing_key: str, **_: Any) -> None:
        sent.append({"task": sender, "queue": routing_key, "rollout": headers["argsrepr"]})

    after_task_publish.connect(record, weak=False)
    yield sent
    after_task_publish.disconnect(record)


def test_post_goal_ids_with_group_size_creates_groups_and_sends_jobs(
    client: TestClient, rows: Rows, db_engine: Engine, published: list[dict[str, Any]]
) -> None:
    goals = [rows.goal(), rows.goal()]
    response = client.post(
        "/v1/rollouts",
        json={"goal_ids": goals, "group_size": 3, "sampling": {"temperature": 0.5}},
        headers=AUTH,
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["count"] == 6
    ids = [uuid.UUID(i) for i in body["ids"]]
    with Session(db_engine) as session:
        created = session.scalars(select(Rollout).where(Rollout.id.in_(ids))).all()
    assert len(created) == 6
    groups: dict[uuid.UUID, list[Rollout]] = {}
    for rollout in created:
        groups.setdefault(rollout.group_id, []).append(rollout)
    assert sorted(len(g) for g in groups.values()) == [3, 3]
    for group in groups.values():
        assert len({r.goal_id for r in group}) == 1
        assert sorted(r.sample_index for r in group) == [0, 1, 2]
    assert {r.mode for r in created} == {RolloutMode.TRAIN}
    assert {r.start for r in created} == {RolloutStart.SEARCH}
    assert {r.sampling["temperature"] for r in created} == {0.5}
    ours = [m for m in published if any(str(i) in m["rollout"] for i in ids)]
    assert len(ours) == 6
    assert {(m["task"], m["queue"]) for m in ours} == {("workers.rollout.run", "rollouts")}


def test_post_split_count_eval_goes_to_eval_queue(
    client: TestClient, rows: Rows, published: list[dict[str, Any]]
) -> None:
    split = f"split-{uuid.uuid4().hex[:8]}"
    for _ in range(3):
        rows.goal(split=split)
    response = client.post(
        "/v1/rollouts",
        json={"split": split, "count": 2, "mode": "eval", "agent_url": "http://127.0.0.1:9/a"},
        headers=AUTH,
    )
    assert response.status_code == 201, response.text
    ids = response.json()["ids"]
    assert len(ids) == 2
    listed = client.get("/v1/rollouts", params={"mode": "eval", "limit": 1000}).json()["items"]
    mine = [r for r in listed if r["id"] in ids]
    assert len(mine) == 2
    assert {r["agent_url"] for r in mine} == {"http://127.0.0.1:9/a"}
    assert {m["queue"] for m in published if any(i in m["rollout"] for i in ids)} == {"eval"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"goal_ids": [1], "split": "test", "count": 1}, "not both"),
        ({"split": "test"}, "split and count"),
        ({}, "give goal_ids"),
        ({"goal_ids": []}, "at least 1"),
        ({"goal_ids": [1], "group_size": 0}, "greater than or equal to 1"),
        ({"goal_ids": [1], "mode": "play"}, "'train' or 'eval'"),
        ({"goal_ids": [1], "start": "cart"}, "'search', 'results' or 'item'"),
        ({"goal_ids": [1], "agent_url": "not a url"}, "URL"),
        ({"goal_ids": [1], "surprise": 1}, "Extra inputs"),
        ({"split": "test", "count": 10_000, "group_size": 6}, "at most 50,000 per request"),
        ({"goal_ids": list(range(200)), "group_size": 256}, "51,200 rollouts"),
    ],
)
def test_post_bad_body_422(client: TestClient, body: dict[str, Any], message: str) -> None:
    response = client.post("/v1/rollouts", json=body, headers=AUTH)
    assert response.status_code == 422
    assert message in response.text


def test_post_unknown_goal_ids_422_names_them(client: TestClient) -> None:
    response = client.post("/v1/rollouts", json={"goal_ids": [7, 1_999_999_999]}, headers=AUTH)
    assert response.status_code == 422
    assert "unknown goal ids" in response.json()["detail"]
    assert "1999999999" in response.json()["detail"]


def test_post_empty_split_422(client: TestClient) -> None:
    response = client.post(
        "/v1/rollouts", json={"split": "no-such-split", "count": 2}, headers=AUTH
    )
    assert response.status_code == 422
    assert "no goals in split 'no-such-split'" in response.json()["detail"]


@pytest.mark.parametrize(
    ("sampling", "message"),
    [
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": "0.5"}, "temperature"),
        ({"temperature": -0.1}, "greater than or equal to 0"),
        ({"temperature": 1e308}, "less than or equal to 2"),
        ({"top_p": 1e308}, "less than or equal to 1"),
        ({"top_p": 0}, "greater than 0"),
        ({"max_tokens": -1}, "greater than or equal to 1"),
        ({"max_tokens": 1e12}, "max_tokens"),
        ({"max_tokens": 10**12}, "less than or equal to 32768"),
        ({"seed": -1}, "greater than or equal to 0"),
        ({"seed": 2**64}, "seed"),
        ({"stop": "x"}, "valid list"),
        ({"stop": []}, "at least 1 item"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "at most 4 items"),
        ({"stop": [""]}, "at least 1 character"),
        ({"stop": ["x" * 65]}, "at most 64 characters"),
        ({"stop": ["a\u0000b"]}, "should match pattern"),
        ({"stop": [7]}, "valid string"),
        ({"beam": 4}, "Extra inputs"),
        ({"temperature": "x" * 1000}, "temperature"),
    ],
)
def test_post_bad_sampling_422(
    client: TestClient, rows: Rows, sampling: dict[str, Any], message: str
) -> None:
    response = client.post(
        "/v1/rollouts", json={"goal_ids": [rows.goal()], "sampling": sampling}, headers=AUTH
    )
    assert response.status_code == 422, response.text
    assert message in response.text


def test_post_stop_sequences_stored_on_the_rollouts(
    client: TestClient, rows: Rows, db_engine: Engine
) -> None:
    sampling = {"stop": ["]", "\n\n", "Observation:", "x" * 64], "temperature": 0.5}
    response = client.post(
        "/v1/rollouts", json={"goal_ids": [rows.goal()], "sampling": sampling}, headers=AUTH
    )
    assert response.status_code == 201, response.text
    (rollout_id,) = response.json()["ids"]
    with Session(db_engine) as session:
        assert session.get(Rollout, uuid.UUID(rollout_id)).sampling == sampling


def test_post_count_beyond_the_split_422(client: TestClient, rows: Rows) -> None:
    split = f"split-{uuid.uuid4().hex[:8]}"
    for _ in range(3):
        rows.goal(split=split)
    response = client.post("/v1/rollouts", json={"split": split, "count": 4}, headers=AUTH)
    assert response.status_code == 422
    assert response.json()["detail"].startswith(
        f"count 4 is more than the 3 goals of split '{split}'"
    )
    exact = client.post("/v1/rollouts", json={"split": split, "count": 3}, headers=AUTH)
    assert exact.status_code == 201 and exact.json()["count"] == 3


def test_post_body_over_the_limit_413_before_reading_it(client: TestClient) -> None:
    limit = client.app.state.settings.api_max_body_bytes
    huge = b'{"goal_ids": [1], "sampling": {"temperature": "' + b"x" * limit + b'"}}'
    response = client.post(
        "/v1/rollouts", content=huge, headers={**AUTH, "content-type": "application/json"}
    )
    assert response.status_code == 413
    assert "WSRL_API_MAX_BODY_BYTES" in response.json()["detail"]


def test_post_chunked_body_over_the_limit_413(client: TestClient) -> None:
    limit = client.app.state.settings.api_max_body_bytes

    def chunks() -> Iterator[bytes]:
        yield b'{"goal_ids": [1], "split": "'
        for _ in range(limit // 65536 + 2):
            yield b"x" * 65536
        yield b'"}'

    response = client.post(
        "/v1/rollouts", content=chunks(), headers={**AUTH, "content-type": "application/json"}
    )
    assert response.status_code == 413


def test_post_same_idempotency_key_returns_the_same_rollouts(
    client: TestClient, rows: Rows, db_engine: Engine, published: list[dict[str, Any]]
) -> None:
    goal = rows.goal()
    key = {"Idempotency-Key": f"retry-{uuid.uuid4().hex}"}
    body = {"goal_ids": [goal], "group_size": 2}
    first = client.post("/v1/rollouts", json=body, headers={**AUTH, **key})
    again = client.post("/v1/rollouts", json=body, headers={**AUTH, **key})
    assert first.status_code == again.status_code == 201, again.text
    assert again.json() == first.json()
    with Session(db_engine) as session:
        count = session.scalar(
            select(func.count()).select_from(Rollout).where(Rollout.goal_id == goal)
        )
    assert count == 2, "the retry created nothing"
    ids = first.json()["ids"]
    assert len([m for m in published if any(i in m["rollout"] for i in ids)]) == 2
    other = client.post("/v1/rollouts", json={**body, "group_size": 3}, headers={**AUTH, **key})
    assert other.status_code == 409
    assert "used for a different request" in other.json()["detail"]


def test_retry_while_the_first_request_still_runs_waits_and_gets_its_rollouts(
    client: TestClient, rows: Rows, db_engine: Engine
) -> None:
    """A client that timed out and retried with the same key while its first large
    enqueue is still inserting: one batch, both answers name it."""
    goals = [rows.goal() for _ in range(5)]
    body = {"goal_ids": goals, "group_size": 200}
    key = {"Idempotency-Key": f"race-{uuid.uuid4().hex}"}

    def post(_: int) -> tuple[float, httpx.Response, float]:
        started = time.monotonic()
        answer = client.post("/v1/rollouts", json=body, headers={**AUTH, **key})
        return started, answer, time.monotonic()

    with ThreadPoolExecutor(2) as pool:
        calls = list(pool.map(post, [0, 1]))
    assert max(c[0] for c in calls) < min(c[2] for c in calls), "the requests overlapped"
    answers = [answer for _, answer, _ in calls]
    assert [a.status_code for a in answers] == [201, 201], answers[1].text
    assert answers[0].json() == answers[1].json()
    with Session(db_engine) as session:
        count = session.scalar(
            select(func.count()).select_from(Rollout).where(Rollout.goal_id.in_(goals))
        )
    assert count == 1000


def test_post_with_a_key_past_its_retention_creates_anew(
    client: TestClient, rows: Rows, db_engine: Engine
) -> None:
    key = f"late-{uuid.uuid4().hex}"
    body = {"goal_ids": [rows.goal()]}
    first = client.post("/v1/rollouts", json=body, headers={**AUTH, "Idempotency-Key": key})
    assert first.status_code == 201
    with Session(db_engine) as session, session.begin():
        session.execute(
            update(EnqueueRequest)
            .where(EnqueueRequest.key == key)
            .values(created_at=func.now() - timedelta(days=2))
        )
        assert expire_idempotency_keys(session, retention_s=86400.0) == 1
    again = client.post("/v1/rollouts", json=body, headers={**AUTH, "Idempotency-Key": key})
    assert again.status_code == 201
    assert set(again.json()["ids"]).isdisjoint(first.json()["ids"])


def test_post_without_idempotency_key_creates_anew(client: TestClient, rows: Rows) -> None:
    body = {"goal_ids": [rows.goal()]}
    first = client.post("/v1/rollouts", json=body, headers=AUTH).json()
    second = client.post("/v1/rollouts", json=body, headers=AUTH).json()
    assert set(first["ids"]).isdisjoint(second["ids"])


def test_post_not_json_422(client: TestClient) -> None:
    response = client.post(
        "/v1/rollouts",
        content=b"{not json",
        headers={**AUTH, "content-type": "application/json"},
    )
    assert response.status_code == 422


def test_list_filters(client: TestClient, rows: Rows) -> None:
    goal = rows.goal()
    group = uuid.uuid4()
    queued = rows.rollout(goal, group_id=group)
    done = rows.rollout(
        goal, group_id=group, status=RolloutStatus.SUCCEEDED, reward=1.0, versions=(3, 5)
    )
    evaluated = rows.rollout(goal, mode=RolloutMode.EVAL, status=RolloutStatus.FAILED)

    def ids(**params: Any) -> set[str]:
        response = client.get("/v1/rollouts", params={"goal_id": goal, **params})
        assert response.status_code == 200, response.text
        return {item["id"] for item in response.json()["items"]}

    assert ids() == {str(queued), str(done), str(evaluated)}
    assert ids(status="queued") == {str(queued)}
    assert ids(status="succeeded") == {str(done)}
    assert ids(mode="eval") == {str(evaluated)}
    assert ids(group_id=str(group)) == {str(queued), str(done)}
    assert ids(policy_version=4) == {str(done)}
    assert ids(policy_version=5) == {str(done)}
    assert ids(policy_version=6) == set()


def test_list_limit_offset_pages_newest_first(client: TestClient, rows: Rows) -> None:
    goal = rows.goal()
    made = [str(rows.rollout(goal)) for _ in range(5)]
    first = client.get("/v1/rollouts", params={"goal_id": goal, "limit": 2}).json()
    second = client.get("/v1/rollouts", params={"goal_id": goal, "limit": 2, "offset": 2}).json()
    rest = client.get("/v1/rollouts", params={"goal_id": goal, "limit": 2, "offset": 4}).json()
    assert first["total"] == 5
    pages = [item["id"] for page in (first, second, rest) for item in page["items"]]
    assert sorted(pages) == sorted(made)
    assert pages[0] == made[-1]


@pytest.mark.parametrize(
    "params",
    [
        {"status": "sleeping"},
        {"mode": "play"},
        {"limit": 0},
        {"limit": 100_000},
        {"offset": -1},
        {"group_id": "not-a-uuid"},
        {"goal_id": 2**40},
        {"policy_version": "x"},
    ],
)
def test_list_bad_filters_422(client: TestClient, params: dict[str, Any]) -> None:
    response = client.get("/v1/rollouts", params=params)
    assert response.status_code == 422
    assert response.json()["detail"]


def test_get_rollout_with_attempts(client: TestClient, rows: Rows) -> None:
    rollout = rows.rollout(status=RolloutStatus.RUNNING)
    rows.attempt(rollout, 1, status=AttemptStatus.FAILED)
    rows.attempt(rollout, 2)
    body = client.get(f"/v1/rollouts/{rollout}").json()
    assert body["status"] == "running"
    assert [(a["number"], a["status"]) for a in body["attempt_history"]] == [
        (1, "failed"),
        (2, "running"),
    ]


def test_post_start_is_stored_and_shown(client: TestClient, rows: Rows) -> None:
    response = client.post(
        "/v1/rollouts", json={"goal_ids": [rows.goal()], "start": "item"}, headers=AUTH
    )
    assert response.status_code == 201, response.text
    [rollout_id] = response.json()["ids"]
    assert client.get(f"/v1/rollouts/{rollout_id}", headers=AUTH).json()["start"] == "item"


def test_get_unknown_rollout_404(client: TestClient) -> None:
    missing = uuid.uuid4()
    response = client.get(f"/v1/rollouts/{missing}")
    assert response.status_code == 404
    assert response.json()["detail"] == f"unknown rollout {missing}"


def test_get_malformed_rollout_id_422(client: TestClient) -> None:
    assert client.get("/v1/rollouts/12345").status_code == 422


def test_post_unknown_sampling_key_422(client: TestClient, rows: Rows) -> None:
    response = client.post(
        "/v1/rollouts",
        json={"goal_ids": [rows.goal()], "sampling": {"temperature": 0.7, "beam": 4}},
        headers=AUTH,
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "sampling", "beam"]


def test_post_body_over_the_limit_413_from_a_real_server(api_app, api_server) -> None:
    limit = api_app.state.settings.api_max_body_bytes
    huge = b'{"goal_ids": [1], "split": "' + b"x" * (2 * limit) + b'"}'
    response = httpx.post(
        f"{api_server.url}/v1/rollouts",
        content=huge,
        headers={**AUTH, "content-type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 413


def test_cancel_ends_unfinished_rollouts_and_leaves_finished_ones(
    client: TestClient, rows: Rows, db_engine: Engine
) -> None:
    queued, running, done = (
        rows.rollout(mode=RolloutMode.EVAL),
        rows.rollout(status=RolloutStatus.RUNNING),
        rows.rollout(status=RolloutStatus.SUCCEEDED, reward=1.0),
    )
    rows.attempt(running, 1)
    chosen = [str(i) for i in (queued, running, done, uuid.uuid4())]

    response = client.post("/v1/rollouts/cancel", json={"ids": chosen}, headers=AUTH)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["count"] == 2 and sorted(body["ids"]) == sorted([str(queued), str(running)])
    with Session(db_engine) as session:
        status = {
            r.id: (r.status, r.last_error)
            for r in session.execute(
                select(Rollout.id, Rollout.status, Rollout.last_error).where(
                    Rollout.id.in_([queued, running, done])
                )
            )
        }
        attempt = session.execute(
            select(Attempt.status, Attempt.error).where(Attempt.rollout_id == running)
        ).one()
    reason = "cancelled: POST /v1/rollouts/cancel"
    assert status == {
        queued: (RolloutStatus.CANCELLED, reason),
        running: (RolloutStatus.CANCELLED, reason),
        done: (RolloutStatus.SUCCEEDED, None),
    }
    assert tuple(attempt) == (AttemptStatus.FAILED, reason)
    again = client.post("/v1/rollouts/cancel", json={"ids": chosen}, headers=AUTH)
    assert again.json() == {"ids": [], "count": 0}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "give ids, a mode, or both"),
        ({"ids": []}, "at least 1 item"),
        ({"mode": "both"}, "'train' or 'eval'"),
        ({"ids": ["not-a-uuid"]}, "valid UUID"),
    ],
)
def test_cancel_without_a_valid_choice_is_a_422(
    client: TestClient, body: dict[str, Any], message: str
) -> None:
    response = client.post("/v1/rollouts/cancel", json=body, headers=AUTH)
    assert response.status_code == 422
    assert message in response.text


def test_cancel_needs_the_token(client: TestClient, rows: Rows, db_engine: Engine) -> None:
    queued = rows.rollout()
    response = client.post("/v1/rollouts/cancel", json={"ids": [str(queued)]})
    assert response.status_code == 401
    with Session(db_engine) as session:
        assert session.get(Rollout, queued).status == RolloutStatus.QUEUED
