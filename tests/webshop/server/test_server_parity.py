"""Behaviour of the original WebShop text env, checked over HTTP on the native API."""

from __future__ import annotations

import httpx


def _start(client: httpx.Client, goal_id: int) -> str:
    r = client.post("/sessions", json={"goal_id": goal_id})
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def _step(client: httpx.Client, sid: str, action: str) -> dict:
    r = client.post(f"/sessions/{sid}/step", json={"action": action})
    assert r.status_code == 200, r.text
    return r.json()


def test_actions_parsed_as_the_original(client, webshop_env) -> None:
    goal = webshop_env.goals[0]
    sid = _start(client, goal.index)
    searched = _step(client, sid, f"search[{goal.name}] and then click the first one")
    assert searched["info"]["valid"] and searched["info"]["page"] == "results"
    first = searched["available_actions"]["clickables"][2]
    assert _step(client, sid, f"click[{first.upper()}].")["info"]["page"] == "item"
    padded = _step(client, sid, "click[ Buy Now ]")
    assert padded["info"]["valid"] is False and padded["done"] is False
    bought = _step(client, sid, "click[buy now].")
    assert bought["done"] is True and bought["info"]["valid"]
    blank = _step(client, _start(client, goal.index), "search[ ]")
    assert blank["info"]["valid"] and blank["info"]["page"] == "results"
