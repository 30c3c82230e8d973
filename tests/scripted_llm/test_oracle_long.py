"""The ``oracle-long`` policy: the oracle padded so that it buys on a chosen step."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.agent import HistoryStep
from app.environments.webshop.agent import build_messages
from app.scripted_llm.app import Stats, make_policy
from app.scripted_llm.prompt import parse_prompt
from app.webshop.env import WebShopEnv

FIXTURE_CATALOG = Path(__file__).resolve().parents[1] / "webshop" / "fixtures" / "catalog"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> WebShopEnv:
    return WebShopEnv.load(
        data_dir=FIXTURE_CATALOG, goals="synthetic", cache_dir=tmp_path_factory.mktemp("c")
    )


def _play(env: WebShopEnv, policy: str, goal: int, steps: int, max_steps: int = 15):
    """The agent's loop in process: its prompt, the policy's reply, the env's step."""
    play = make_policy(policy, env, Stats(), steps=steps)
    session = env.new_session(goal)
    history: list[HistoryStep] = []
    for number in range(1, max_steps + 1):
        messages = build_messages(
            session.instruction_text, session.observation(), session.available_actions(), history
        )
        action = play(parse_prompt(messages))
        result = session.step(action)
        assert result.info.get("valid", True), (number, action, result.info)
        history.append(HistoryStep(number, action, result.observation))
        if result.done:
            return number, result.reward
    return max_steps, 0.0


def test_oracle_long_buys_on_the_requested_step(env: WebShopEnv) -> None:
    goals = range(min(len(env.goals), 20))
    lengths = {goal: _play(env, "oracle-long", goal, steps=10) for goal in goals}
    on_time = [g for g, (n, _) in lengths.items() if n == 10]
    assert len(on_time) >= 0.8 * len(lengths), lengths
    assert all(n <= 10 for n, _ in lengths.values()), lengths
    plain = {goal: _play(env, "oracle", goal, steps=10) for goal in goals}
    # Padding only adds steps; what is bought (the reward) stays the oracle's.
    assert all(lengths[g][1] == plain[g][1] for g in goals), (lengths, plain)
    assert all(plain[g][0] < lengths[g][0] for g in on_time if plain[g][0] < 10)


def test_oracle_long_with_few_steps_is_the_oracle(env: WebShopEnv) -> None:
    assert _play(env, "oracle-long", 0, steps=1) == _play(env, "oracle", 0, steps=1)


def test_prompt_counts_steps_beyond_the_shown_history() -> None:
    history = [HistoryStep(n, "click[x]" if n != 3 else "(no action)", "obs") for n in range(1, 8)]
    messages = build_messages("buy a lamp", "page", {"clickables": ["buy now"]}, history)
    prompt = parse_prompt(messages)
    assert prompt.steps_taken == 7
    assert len(prompt.history) == 4


def test_unknown_steps_are_refused() -> None:
    from app.scripted_llm import create_app

    with pytest.raises(ValueError, match="steps must be >= 1"):
        create_app("rule", None, steps=0)
