"""Enqueueing: rows in the caller's transaction, messages only after it commits."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis
from celery import Celery
from helpers.factories import make_goal
from helpers.processes import FIXTURE_CATALOG
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings
from app.core.celery import QUEUE_EVAL, QUEUE_ROLLOUTS, ROLLOUT_TASK, create_celery
from app.core.enqueue import EnqueueError, enqueue_rollouts
from app.core.env_client import EnvError
from app.core.llm import Sampling
from app.db.lifecycle import RolloutStatus
from app.db.models import Goal, Rollout
from app.db.session import make_engine
from app.environments.webshop.agent import build_messages
from app.environments.webshop.client import EnvClient
from app.environments.webshop.goals import sync_goals
from app.scripted_llm import tokenizer
from app.webshop.server.runner import RunningServer
from workers.llm_client import LLMClient

GOALS = range(910_000, 910_006)
SEARCH_PAGE = {"has_search_bar": True, "clickables": ["search"]}


@pytest.fixture
def broker(test_settings: Settings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(test_settings.resolved_redis_url())
    client.delete(QUEUE_ROLLOUTS, QUEUE_EVAL)
    yield client
    client.delete(QUEUE_ROLLOUTS, QUEUE_EVAL)
    client.close()


@pytest.fixture
def celery(test_settings: Settings) -> Celery:
    return create_celery(test_settings)


@pytest.fixture
def goals(db_session: Session) -> list[int]:
    for goal_id in GOALS:
        make_goal(db_session, goal_id, split="train", weight=1.0)
    make_goal(db_session, 910_100, split="eval")
    return list(GOALS)


def _queued_ids(broker: redis.Redis, queue: str) -> list[str]:
    return [json.loads(raw)["headers"]["argsrepr"] for raw in broker.lrange(queue, 0, -1)]


def test_enqueue_groups_and_sends_after_commit(
    db_session: Session, celery: Celery, broker: redis.Redis, goals: list[int], test_settings
) -> None:
    ids = enqueue_rollouts(
        db_session, celery, goal_ids=goals[:3], group_size=4, settings=test_settings
    )
    assert len(ids) == 12
    assert broker.llen(QUEUE_ROLLOUTS) == 0, "nothing may be sent before the commit"
    db_session.commit()
    assert broker.llen(QUEUE_ROLLOUTS) == 12
    message = json.loads(broker.lindex(QUEUE_ROLLOUTS, 0))
    assert message["headers"]["task"] == ROLLOUT_TASK
    rows = db_session.scalars(select(Rollout).where(Rollout.id.in_(ids))).all()
    groups: dict = {}
    for row in rows:
        groups.setdefault(row.group_id, []).append((row.goal_id, row.sample_index))
        assert row.status == RolloutStatus.QUEUED
        assert row.deadline_at is not None
        assert row.max_attempts == test_settings.max_attempts
    assert len(groups) == 3
    for members in groups.values():
        assert len({goal for goal, _ in members}) == 1
        assert sorted(index for _, index in members) == [0, 1, 2, 3]


def test_enqueue_rollback_sends_nothing(
    db_session: Session, celery: Celery, broker: redis.Redis, goals: list[int], test_settings
) -> None:
    enqueue_rollouts(db_session, celery, goal_ids=goals[:2], settings=test_settings)
    db_session.rollback()
    db_session.commit()
    assert broker.llen(QUEUE_ROLLOUTS) == 0


def test_enqueue_split_count_draws_distinct_goals_and_eval_queue(
    db_session: Session, celery: Celery, broker: redis.Redis, goals: list[int], test_settings
) -> None:
    ids = enqueue_rollouts(
        db_session, celery, split="train", count=4, group_size=2, settings=test_settings, seed=1
    )
    chosen = set(db_session.scalars(select(Rollout.goal_id).where(Rollout.id.in_(ids))))
    assert len(chosen) == 4 and chosen <= set(goals)
    enqueue_rollouts(db_session, celery, split="eval", mode="eval", settings=test_settings)
    db_session.commit()
    assert broker.llen(QUEUE_ROLLOUTS) == 8
    assert broker.llen(QUEUE_EVAL) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"goal_ids": [1_234_567]}, "unknown goal ids"),
        ({"split": "nope"}, "no goals in split 'nope'"),
        ({}, "give goal_ids or split"),
        ({"split": "train", "group_size": 0}, "group_size must be >= 1"),
        ({"split": "train", "count": 0}, "count must be >= 1"),
        ({"split": "train", "mode": "play"}, "mode must be 'train' or 'eval'"),
        ({"split": "train", "start": "cart"}, "start must be one of 'search', 'results', 'item'"),
        (
            {"split": "train", "start": "item", "agent_url": "http://agent.test"},
            "an external agent \\(agent_url\\) always starts at 'search'",
        ),
        ({"split": "train", "sampling": {"temprature": 1}}, "unknown sampling keys"),
        ({"split": "train", "goal_ids": [1]}, "not both"),
    ],
)
def test_enqueue_bad_request_is_a_clear_error(
    db_session: Session, celery: Celery, goals: list[int], test_settings, kwargs, message
) -> None:
    with pytest.raises(EnqueueError, match=message):
        enqueue_rollouts(db_session, celery, settings=test_settings, **kwargs)


@pytest.fixture(scope="module")
def env_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from app.webshop.env import WebShopEnv
    from app.webshop.server.app import create_app
    from app.webshop.server.runner import serve_in_thread

    cache: Path = tmp_path_factory.mktemp("catalog-cache")
    env = WebShopEnv.load(FIXTURE_CATALOG, cache_dir=cache, noun_tagger="rules")
    with serve_in_thread(create_app(env)) as server:
        yield server.url


def test_sync_goals_loads_missing_goals_once(db_session: Session, env_server_url: str) -> None:
    with EnvClient(env_server_url) as env:
        added = sync_goals(db_session, env)
        again = sync_goals(db_session, env)
    assert added >= 1 and again == 0
    goal = db_session.get(Goal, 0)
    assert goal is not None and goal.instruction and goal.spec and goal.spec["asin"]


def test_sync_goals_unreachable_env_is_env_error(db_session: Session) -> None:
    with (
        EnvClient("http://127.0.0.1:9") as env,
        pytest.raises(EnvError, match="unreachable: GET /goals"),
    ):
        sync_goals(db_session, env)


def test_concurrent_enqueues_with_one_key_create_one_batch(
    empty_database_url: str, test_settings: Settings, celery: Celery, broker: redis.Redis
) -> None:
    """The second request waits on the key's row, then returns the first one's rollouts."""
    settings = test_settings.model_copy(update={"database_url": empty_database_url})
    engine = make_engine(settings)
    try:
        with Session(engine) as session, session.begin():
            make_goal(session, 1, split="train")
        first = Session(engine)
        first.begin()
        ids_first = enqueue_rollouts(
            first, celery, goal_ids=[1], group_size=2, settings=settings, idempotency_key="k1"
        )
        results: list[list] = []

        def second() -> None:
            with Session(engine) as session, session.begin():
                results.append(
                    enqueue_rollouts(
                        session,
                        celery,
                        goal_ids=[1],
                        group_size=2,
                        settings=settings,
                        idempotency_key="k1",
                    )
                )

        waiter = threading.Thread(target=second)
        waiter.start()
        waiter.join(timeout=1.0)
        assert waiter.is_alive(), "the second request waits for the first to commit"
        first.commit()
        first.close()
        waiter.join(timeout=10)
        assert results == [ids_first]
        with Session(engine) as session:
            assert len(session.scalars(select(Rollout.id)).all()) == 2
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("sampling", "message"),
    [
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 1e308}, "top_p"),
        ({"seed": -1}, "seed"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ],
)
def test_bad_sampling_values_are_refused(
    db_session: Session, celery: Celery, goals: list[int], sampling: dict, message: str
) -> None:
    with pytest.raises(EnqueueError, match=f"bad sampling values: {message}"):
        enqueue_rollouts(db_session, celery, goal_ids=goals[:1], sampling=sampling)


def test_stop_sequences_are_stored_and_reach_the_llm_server(
    db_session: Session,
    celery: Celery,
    goals: list[int],
    rule_llm: RunningServer,
    llm_admin: httpx.Client,
    make_settings: Callable[..., Settings],
) -> None:
    """The worker's path: the rollout row's sampling over the settings' defaults, sent with
    the call; the scripted server honours ``stop`` as vLLM does."""
    (rollout_id,) = enqueue_rollouts(
        db_session, celery, goal_ids=goals[:1], sampling={"stop": ["desk", "]"], "seed": 3}
    )
    stored = db_session.get(Rollout, rollout_id).sampling
    assert stored == {"stop": ["desk", "]"], "seed": 3}
    settings = make_settings(llm_base_url=f"{rule_llm.url}/v1", llm_temperature=0.5)
    sampling = Sampling.from_settings(settings).overridden(stored)
    assert (sampling.temperature, sampling.seed, sampling.stop) == (0.5, 3, ("desk", "]"))
    messages = build_messages("a red desk lamp", "WebShop [SEP] Search", SEARCH_PAGE, [])
    with LLMClient(settings) as llm:
        call = llm.chat(messages, sampling=sampling)
    assert call.response_text == "search[a red "
    assert call.finish_reason == "stop"
    assert call.trainable
    assert call.response_token_ids == tokenizer.encode("search[a red desk")
