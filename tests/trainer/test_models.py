"""A converted model as the trainers see it: found by name, played in the mode its chat
template can render."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import Settings
from app.core.agent import AgentMode, AgentProtocolMismatch
from trainer.bootstrap.build import policy_protocol
from trainer.models import ModelError, resolve_model


def test_a_template_without_tools_is_played_in_text_mode_and_tools_asked_for_are_refused(
    smollm2: Path,
) -> None:
    assert policy_protocol(Settings(_env_file=None), smollm2).mode == AgentMode.TEXT
    # a default of the other mode gives way; the same setting made explicitly is refused
    with pytest.raises(AgentProtocolMismatch, match="WSRL_AGENT_MODE=tools is set here"):
        policy_protocol(Settings(_env_file=None, agent_mode="tools"), smollm2)


def test_a_template_that_renders_tools_keeps_the_settings_mode(smollm2: Path, tmp_path: Path):
    folder = tmp_path / "with-tools"
    folder.mkdir()
    (folder / "chat_template.jinja").write_text(
        "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.content }}"
        "{% endfor %}"
    )
    played = policy_protocol(Settings(_env_file=None, agent_mode="tools"), folder)
    assert played.mode == AgentMode.TOOLS


def test_a_run_names_a_converted_model_by_name(smollm2: Path, tmp_path: Path) -> None:
    data_dir = smollm2.parents[1]
    assert resolve_model(data_dir, "smollm2-135m") == smollm2
    assert resolve_model(data_dir, str(smollm2)) == smollm2
    assert resolve_model(data_dir, "tiny") is None
    with pytest.raises(ModelError, match="run `wsrl model get smollm2-135m`"):
        resolve_model(tmp_path, "smollm2-135m")
