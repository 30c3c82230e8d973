"""A converted model as the trainers see it: found by name, played in the mode its chat
template can render."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.agent import AgentProtocolMismatch
from trainer.models import (
    ModelError,
    chat_template_supports_tools,
    refuse_tools_unrendered,
    resolve_model,
)


def test_tools_mode_is_refused_for_a_template_that_renders_no_tools(
    smollm2: Path, tmp_path: Path
) -> None:
    assert not chat_template_supports_tools(smollm2)
    refuse_tools_unrendered("text", smollm2, "WSRL_AGENT_MODE=tools", "fix")
    with pytest.raises(AgentProtocolMismatch, match="WSRL_AGENT_MODE=tools asks for tools mode"):
        refuse_tools_unrendered("tools", smollm2, "WSRL_AGENT_MODE=tools", "fix")
    folder = tmp_path / "with-tools"
    folder.mkdir()
    (folder / "chat_template.jinja").write_text(
        "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.content }}"
        "{% endfor %}"
    )
    assert chat_template_supports_tools(folder)
    refuse_tools_unrendered("tools", folder, "WSRL_AGENT_MODE=tools", "fix")


def test_a_run_names_a_converted_model_by_name(smollm2: Path, tmp_path: Path) -> None:
    data_dir = smollm2.parents[1]
    assert resolve_model(data_dir, "smollm2-135m") == smollm2
    assert resolve_model(data_dir, str(smollm2)) == smollm2
    assert resolve_model(data_dir, "tiny") is None
    with pytest.raises(ModelError, match="run `wsrl model get smollm2-135m`"):
        resolve_model(tmp_path, "smollm2-135m")
