"""How a checkpoint is played: the agent protocol a policy folder says it was trained for.

The one place that reads it, for the bootstrap (``wsrl policy bootstrap`` and ``wsrl
policy eval``), the local backend (which publishes it with every version it serves) and
whoever else starts from a policy folder. A folder says it in one of two files:

* a bootstrapped policy's :data:`BOOTSTRAP_MANIFEST` (:mod:`trainer.bootstrap`): the
  ``history_steps`` and ``result_refs`` of its demonstrations; it is played in text mode;
* a local trainer's checkpoint's :data:`STATE_FILE`
  (:mod:`trainer.backends.local.checkpoints`): the ``protocol`` its trainer published.

Reading a folder never imports torch or the bootstrap's builder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.core.agent import AgentProtocol, agent_protocol

BOOTSTRAP_MANIFEST = "bootstrap.json"
"""The manifest ``wsrl policy bootstrap`` writes next to the weights, last."""
STATE_FILE = "trainer_state.json"
"""The state a local trainer's checkpoint carries (step, version, ``protocol``)."""
TINY_HISTORY_STEPS = 1
"""Previous steps the tiny policy's prompts show unless its bootstrap is told otherwise
(:class:`trainer.bootstrap.build.BootstrapConfig` takes its default from here)."""
TINY_RESULT_REFS = "numbers"
"""How the tiny policy's prompts name results unless its bootstrap is told otherwise
(:class:`trainer.bootstrap.build.BootstrapConfig` takes its default from here)."""


def bootstrapped_protocol(model_path: Path) -> dict[str, Any] | None:
    """What a bootstrapped policy (a :data:`BOOTSTRAP_MANIFEST` next to its weights) must
    be played with: text mode, the history and result names of its demonstrations; None
    for any other folder."""
    manifest = model_path / BOOTSTRAP_MANIFEST
    if not manifest.is_file():
        return None
    recorded = json.loads(manifest.read_text())
    return {**{k: recorded.get(k) for k in ("history_steps", "result_refs")}, "mode": "text"}


def policy_protocol(settings: Any, model_path: Path | None) -> AgentProtocol:
    """The agent protocol the policy at ``model_path`` is played with.

    A bootstrapped policy (a :data:`BOOTSTRAP_MANIFEST` next to its weights; ``model_path``
    None: the tiny policy ``wsrl policy bootstrap`` builds with its defaults) is played in
    text mode with the history and result names it was bootstrapped on; a local trainer's
    checkpoint with the protocol its trainer published (:data:`STATE_FILE`); the rest, and
    any other policy's protocol, comes from the settings. Raises
    :class:`app.core.agent.AgentProtocolMismatch` when a setting given explicitly
    contradicts the policy's."""
    if model_path is None:
        expected = {"history_steps": TINY_HISTORY_STEPS, "result_refs": TINY_RESULT_REFS}
        return agent_protocol(settings, "the tiny policy's bootstrap", {**expected, "mode": "text"})
    bootstrapped = bootstrapped_protocol(model_path)
    if bootstrapped is not None:
        source = f"the policy's bootstrap ({model_path / BOOTSTRAP_MANIFEST})"
        return agent_protocol(settings, source, bootstrapped)
    state = model_path / STATE_FILE
    published = json.loads(state.read_text()).get("protocol") if state.is_file() else None
    if published is not None:
        source = f"the checkpoint's trainer ({state})"
        return agent_protocol(settings, source, AgentProtocol.from_dict(published).to_dict())
    return AgentProtocol.from_settings(settings)
