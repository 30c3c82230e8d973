"""An external WebShop agent for webshop-rl's agent-as-a-service rollouts.

webshop-rl POSTs one episode to ``/episode``; the agent plays it with the official
``openai`` client pointed at the episode's ``llm.base_url`` (the LLM gateway, which
records every call for training) and steps the env server through its native HTTP API,
then answers ``{"done": true, "steps": n}``. Run it with::

    uvicorn agent:app --port 9000     # then: wsrl enqueue --agent-url http://127.0.0.1:9000/episode
"""

from __future__ import annotations

import re
from typing import Any

import httpx
from fastapi import FastAPI
from openai import OpenAI
from pydantic import BaseModel

ACTION = re.compile(r"\b(search|click)\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]", re.IGNORECASE)
SYSTEM = (
    "You are a shopping agent in the WebShop store. Buy the product that best matches the "
    "instruction. Reply with exactly one action: search[<keywords>] or click[<element>], "
    "the element written exactly as listed."
)

app = FastAPI(title="example external WebShop agent")


class Env(BaseModel):
    base_url: str
    session_id: str
    token: str | None = None  # set when the env server requires one (WSRL_ENV_TOKEN)


class Llm(BaseModel):
    base_url: str
    model: str
    api_key: str = "EMPTY"


class Episode(BaseModel):
    rollout_id: str
    attempt: int
    instruction: str
    env: Env
    llm: Llm
    sampling: dict[str, Any] = {}
    max_steps: int = 15


def prompt(instruction: str, history: list[str], observation: str, actions: dict) -> str:
    """The layout of webshop-rl's built-in agent: instruction, past steps, page, actions."""
    past = [f"Step {n}: {a}" for n, a in enumerate(history, 1)] or ["Previous steps: none."]
    listed = ["search[<keywords>]"] if actions.get("has_search_bar") else []
    listed += [f"click[{c}]" for c in actions.get("clickables", []) if c != "search"]
    page = ["Current observation:", observation, "", "Available actions:", *listed]
    return "\n".join([f"Instruction: {instruction}", "", *past, "", *page])


@app.post("/episode")
def episode(body: Episode) -> dict[str, Any]:
    llm = OpenAI(base_url=body.llm.base_url, api_key=body.llm.api_key, max_retries=2)
    sampling = {k: v for k, v in body.sampling.items() if k in ("temperature", "max_tokens")}
    history: list[str] = []
    done, steps = False, 0
    auth = {"Authorization": f"Bearer {body.env.token}"} if body.env.token else {}
    with httpx.Client(base_url=body.env.base_url, timeout=30, headers=auth) as env:
        session = f"/sessions/{body.env.session_id}"
        observation = env.get(f"{session}/observation").json()["observation"]
        for _ in range(body.max_steps):
            actions = env.get(f"{session}/available_actions").json()
            user = prompt(body.instruction, history, observation, actions)
            reply = llm.chat.completions.create(
                model=body.llm.model,
                messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
                **sampling,
            )
            matches = ACTION.findall(reply.choices[0].message.content or "")
            action = f"{matches[-1][0].lower()}[{matches[-1][1].strip()}]" if matches else None
            history.append(action or "(no action)")
            if action is None:
                continue
            step = env.post(f"{session}/step", json={"action": action})
            step.raise_for_status()
            steps += 1
            observation, done = step.json()["observation"], step.json()["done"]
            if done:
                break
    return {"done": done, "steps": steps}
