"""The CI learning run's sizes, its policy and its held-out measure (test_learning.py), and
the services every learning test plays through (test_learning.py, test_learning_smollm2.py).

The held-out player is the pipeline's own: :class:`trainer.bootstrap.play.LocalEpisode` (the agent
protocol and the page's ``structured_outputs``) and :func:`trainer.generation.generate_batch`
(the policy server's decoder, masks included), greedy on test goals.

The sub-task: a few steps to act on an item page (training: the first search result, the
``item`` opening; held out: the target's own page, as if search and result click had gone
right); buying ends the episode with the env's reward, not buying within the limit scores
0. A randomly initialised policy buys rarely and at random; what GRPO must learn from
reward differences is to choose ``click[buy now]`` among the page's valid actions, on
goals it never saw.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from helpers.processes import celery_worker, env_server

from app.config import Settings
from app.core.agent import DEFAULT_PROTOCOL
from app.db.session import make_engine, make_sessionmaker, session_scope
from app.environments.webshop.client import EnvClient
from app.environments.webshop.goals import sync_goals
from app.webshop.env import WebShopEnv
from app.webshop.pages import Page
from trainer.backends.local.learner import Learner
from trainer.bootstrap.play import LocalEpisode
from trainer.bootstrap.tiny_policy import TinySize, build_model, train_tokenizer
from trainer.generation import GenerationRequest, generate_batch

SIZE = TinySize(
    vocab_size=1000, hidden_size=64, layers=2, heads=2, intermediate_size=128, max_positions=2048
)


@dataclass(frozen=True)
class Run:
    steps: int = 8
    goals_per_step: int = 8
    group_size: int = 4
    eval_goals: int = 64
    max_steps: int = 4
    max_tokens: int = 24
    lr: float = 3e-3
    seed: int = 0


def build_checkpoint(env: WebShopEnv, out: Path, seed: int = 0) -> Path:
    """A random Qwen2 policy with a tokenizer trained on the catalog (seconds, no download)."""
    names = [env.product(i).name for i in range(env.num_products)]
    asins = [env.product(i).asin for i in range(env.num_products)]
    ids = [*(a.lower() for a in asins), *(a.upper() for a in asins)]
    tokenizer = train_tokenizer(names, SIZE.vocab_size, words=ids)
    build_model(tokenizer, SIZE, seed).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def item_page_episode(env: WebShopEnv, goal_id: int) -> LocalEpisode:
    """An episode on ``goal_id`` already on its target's item page."""
    episode = LocalEpisode(
        env, goal_id, replace(DEFAULT_PROTOCOL, history_steps=1, constrain_actions=True)
    )
    session = episode.session
    session.keywords, session.results, session.page = "target", [session.target_index], Page.RESULTS
    target = env.product(session.target_index).asin.lower()
    assert episode.act(f"click[{target}]"), "the target's result link must open it"
    return episode


def held_out(backend: Learner, env: WebShopEnv, run: Run) -> tuple[float, float]:
    """(mean reward, success rate) greedy on the first ``eval_goals`` test goals."""
    model, tokenizer = backend.model.eval(), backend.tokenizer
    episodes = [item_page_episode(env, g) for g in env.goal_ids("test")[: run.eval_goals]]
    for number in range(run.max_steps):
        active = [e for e in episodes if not e.done]
        if not active:
            break
        requests = [
            GenerationRequest(
                e.prompt_ids(tokenizer),
                run.max_tokens,
                0.0,
                seed=number * 1009 + i,
                structured_outputs=e.structured_outputs(),
            )
            for i, e in enumerate(active)
        ]
        for episode, out in zip(active, generate_batch(model, tokenizer, requests), strict=True):
            episode.reply(out.text)
    rewards = [e.reward for e in episodes]
    return statistics.fmean(rewards), sum(r == 1.0 for r in rewards) / len(rewards)


@contextmanager
def loop_stack(settings: Settings, log_dir: Path, **agent: Any) -> Iterator[Settings]:
    """``wsrl env serve`` on the generated catalog, its goals in Postgres and one ``wsrl
    worker`` whose agent plays with the settings ``agent``; yields the settings the trainer
    runs with (the env server's URL, ``agent``)."""
    server = env_server(log_dir, settings, data=None).start(timeout_s=180)
    settings = settings.model_copy(update={"env_url": server.url, **agent})
    engine = make_engine(settings)
    worker = None
    try:
        with session_scope(make_sessionmaker(engine)) as session, EnvClient(server.url) as client:
            sync_goals(session, client)
        worker = celery_worker(log_dir, settings, concurrency=8, name="learn").start()
        yield settings
    finally:
        if worker is not None:
            worker.stop()
        server.stop()
        engine.dispose()


def flip_sign(original):
    """``original`` (advantages of rollouts) with every advantage's sign flipped: the
    sabotage every learning check must catch."""

    def flipped(*args, **kwargs):
        computed = original(*args, **kwargs)
        return computed._replace(advantages=[-a for a in computed.advantages])

    return flipped
