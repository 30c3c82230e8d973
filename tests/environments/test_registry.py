"""Environments as plug-ins: the core plays any of them and names none.

The import contracts (``make lint``) keep ``app/core`` from importing an environment; this
test keeps it from naming one in its code and text, which an import contract cannot see
(a prompt, a grammar, a page's buttons written out in the core would make a second
environment play WebShop's game).
"""

from __future__ import annotations

import re
from pathlib import Path

import app.core
from app.core.agent import DEFAULT_PROTOCOL, Episode
from app.environments import ENVIRONMENTS

CORE = Path(app.core.__file__).parent

# WebShop's words: its name, its goals' fields, its action grammar and its page layout.
WEBSHOP_NAMES = re.compile(
    r"webshop|\basin\b|_asin|product|search\[|click\[|buy now|\[SEP\]", re.IGNORECASE
)


def test_the_core_names_no_environment() -> None:
    named = {
        path.name: sorted({m.group(0).lower() for m in WEBSHOP_NAMES.finditer(path.read_text())})
        for path in sorted(CORE.glob("*.py"))
    }
    named = {name: words for name, words in named.items() if words}
    assert named == {}, f"app/core names WebShop: {named}"


def test_every_environment_plays_through_the_core_episode() -> None:
    for name, environment in ENVIRONMENTS.items():
        assert environment.name == name
        episode = environment.episode("an instruction", "a page", {}, DEFAULT_PROTOCOL)
        assert isinstance(episode, Episode)
        # Every part an environment must give is given: the core's episode raises for each.
        messages = episode.messages()
        assert [m["role"] for m in messages] == ["system", "user"]
        assert "an instruction" in messages[1]["content"]
        assert episode.system_prompt() == messages[0]["content"]
        assert episode.action("")[0] is None
        assert episode.success(0.0) is False


def test_the_core_episode_is_no_environment() -> None:
    episode = Episode("an instruction", "a page", {}, DEFAULT_PROTOCOL)
    for part in (episode.messages, episode.invalid_reply, lambda: episode.success(1.0)):
        try:
            part()
        except NotImplementedError:
            continue
        raise AssertionError(f"{part} answered for an environment the core does not know")
