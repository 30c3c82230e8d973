"""The agent protocol played in this process, on an in-process WebShop session.

The in-process evaluation and the bootstrap's demonstrations step
:class:`app.webshop.env.WebShopEnv` sessions directly (no HTTP) but prompt and parse
exactly as the Celery worker does: both go through WebShop's episode
(:class:`app.environments.webshop.agent.WebShopEpisode`), and both open an episode that
starts past the search page with its opening
(:func:`app.environments.webshop.opening.play_opening`).
"""

from __future__ import annotations

from typing import Any

from app.core.agent import DEFAULT_PROTOCOL, AgentProtocol
from app.db.lifecycle import RolloutStart
from app.environments.webshop.agent import WebShopEpisode
from app.environments.webshop.opening import play_opening
from app.webshop.env import WebShopEnv


class LocalEpisode:
    """One episode on an in-process session; the session is the truth about the page.

    With ``start`` other than ``search`` the opening's scripted steps are played first
    (``opening`` holds their actions; they count in neither ``invalid`` nor the policy's
    steps), so the first prompt is the one a worker's first LLM call gets.
    """

    def __init__(
        self,
        env: WebShopEnv,
        goal_id: int,
        protocol: AgentProtocol = DEFAULT_PROTOCOL,
        start: RolloutStart | str = RolloutStart.SEARCH,
    ) -> None:
        self.session = env.new_session(goal_id)
        self.state = WebShopEpisode(
            self.session.instruction_text,
            self.session.observation(),
            self.session.available_actions(),
            protocol,
        )
        self.reward = 0.0
        self.done = False
        self.invalid = 0
        self.opening = play_opening(self.state, start, self._step)

    def messages(self) -> list[dict[str, str]]:
        return self.state.messages()

    def structured_outputs(self) -> dict[str, str] | None:
        """The constraint of the next reply, as the worker would send it (or None)."""
        return self.state.structured_outputs()

    def prompt_ids(self, tokenizer: Any) -> list[int]:
        """The chat-templated prompt of the current page, assistant turn opened."""
        encoded = tokenizer.apply_chat_template(
            self.messages(), add_generation_prompt=True, return_dict=True
        )
        return list(encoded["input_ids"])

    def reply(self, text: str) -> bool:
        """Play a policy reply (an invalid step when it holds no action); True if valid."""
        action, invalid = self.state.action(text)
        if action is None:
            self.state.record(None, valid=False, seen=invalid or "")
            self.invalid += 1
            return False
        return self.act(action)

    def act(self, action: str) -> bool:
        """Step the session with ``action``; True if the env took it."""
        valid = self._step(action)
        self.invalid += not valid
        return valid

    def _step(self, action: str) -> bool:
        result = self.session.step(action)
        valid = bool(result.info.get("valid", True))
        seen = result.observation if valid else (result.info.get("error") or "")
        self.state.record(
            action,
            valid=valid,
            seen=seen,
            observation=self.session.observation(),
            available_actions=self.session.available_actions(),
        )
        if result.done:
            self.done, self.reward = True, result.reward
        return valid
