"""Reference agents: the oracle buys the goal; the rule baseline follows the paper."""

from __future__ import annotations

from app.webshop.agents import oracle_action, oracle_policy, rule_action, rule_policy, run_agent
from app.webshop.env import WebShopEnv


def test_oracle_scores_one_on_every_fixture_goal(fixture_env: WebShopEnv) -> None:
    rewards = [run_agent(fixture_env, oracle_policy, g.index).reward for g in fixture_env.goals]
    assert rewards == [1.0] * len(fixture_env.goals)


def test_oracle_scores_one_on_human_goals(human_env: WebShopEnv) -> None:
    for g in human_env.goals:
        assert run_agent(human_env, oracle_policy, g.index).reward == 1.0


def test_oracle_pages_on_and_copes_with_cut_history(fixture_env: WebShopEnv, goal_for) -> None:
    gid = goal_for(fixture_env, "B000000001", **{"flavor name": "plain", "size": "100 count"})
    s = fixture_env.new_session(gid)
    s.step("search[green tea]")  # the tea is on page 3 of this search
    for _ in range(12):
        action = oracle_action(s.goal, s.observation(), s.available_actions(), s.history[-1:])
        r = s.step(action)
        assert r.info["valid"], r.info
        if r.done:
            break
    assert s.reward == 1.0
    assert s.history.count("click[next >]") == 2


def test_oracle_leaves_a_wrong_item(fixture_env: WebShopEnv, goal_for) -> None:
    s = fixture_env.new_session(goal_for(fixture_env, "B000000003"))
    s.step("search[matcha]")
    s.step("click[b000000007]")
    assert oracle_policy(s) == "click[< prev]"


def test_rule_baseline_searches_instruction_clicks_first_and_buys(fixture_env: WebShopEnv) -> None:
    s = fixture_env.new_session(0)
    first = rule_policy(s)
    assert first == f"search[{s.goal.instruction.lower()}]"
    s.step(first)
    top = s.available_actions()["clickables"][2]
    assert rule_policy(s) == f"click[{top}]"
    s.step(f"click[{top}]")
    assert rule_policy(s) == "click[buy now]"
    assert s.step("click[buy now]").done


def test_rule_action_on_empty_results_goes_back() -> None:
    avail = {"has_search_bar": False, "clickables": ["back to search", "next >"]}
    assert rule_action("x", "", avail, []) == "click[back to search]"


def test_run_agent_stops_at_max_steps(fixture_env: WebShopEnv) -> None:
    result = run_agent(fixture_env, lambda s: "click[nothing]", 0, max_steps=3)
    assert not result.done and result.reward == 0.0 and not result.info["valid"]
