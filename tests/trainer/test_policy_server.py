"""The policy server with the official openai client; its logprobs match the trainer's."""

import threading
from collections.abc import Iterator

import openai
import pytest
import torch
from transformers import AutoModelForCausalLM

from trainer.backends.local.learner import Learner
from trainer.backends.local.policy_server import PolicyServer, ServerHandle
from trainer.config import TrainerConfig
from trainer.samples import Sample
from trainer.tensors import collate

MESSAGES = [
    {"role": "system", "content": "You are a shopping agent."},
    {"role": "user", "content": "Instruction: buy a red cotton shirt under 30 dollars"},
]


@pytest.fixture(scope="module")
def backend(tiny_checkpoint) -> Learner:
    return Learner(tiny_checkpoint, TrainerConfig(lr=1e-2))


@pytest.fixture(scope="module")
def served(backend: Learner) -> Iterator[tuple[PolicyServer, ServerHandle]]:
    server = PolicyServer(backend.model, backend.tokenizer, version=3, gather_ms=50)
    handle = server.start()
    yield server, handle
    handle.stop()


@pytest.fixture()
def client(served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served[1].base_url, api_key="EMPTY", max_retries=0)


def chat(client: openai.OpenAI, **kwargs):
    params = {"model": "policy", "messages": MESSAGES, "max_tokens": 12, "logprobs": True}
    return client.chat.completions.create(**{**params, **kwargs})


def test_models_lists_the_policy(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list().data] == ["policy"]


def test_logprobs_equal_trainer_forward_pass(client, backend: Learner) -> None:
    response = chat(client, temperature=1.0, seed=7, extra_body={"return_token_ids": True})
    raw = response.model_dump()
    prompt, choice = raw["prompt_token_ids"], raw["choices"][0]
    generated = choice["token_ids"]
    served = [t["logprob"] for t in choice["logprobs"]["content"]]
    assert len(generated) == len(served) > 0
    assert (
        prompt
        == backend.tokenizer.apply_chat_template(
            MESSAGES, add_generation_prompt=True, return_dict=True
        )["input_ids"]
    )
    sample = Sample(
        "r",
        "g",
        prompt + generated,
        [0] * len(prompt) + [1] * len(generated),
        [0.0] * (len(prompt) + len(generated)),
        0.0,
        0,
    )
    batch = collate([sample], backend.pad_id)
    ours = backend.logprobs(batch)[0, len(prompt) - 1 :]  # (len(generated),)
    assert torch.allclose(ours, torch.tensor(served), atol=1e-4)


def test_seed_makes_sampling_reproducible(client) -> None:
    first = chat(client, seed=11).model_dump()["choices"][0]["token_ids"]
    second = chat(client, seed=11).model_dump()["choices"][0]["token_ids"]
    assert first == second


def test_max_tokens_gives_length_finish(client) -> None:
    choice = chat(client, max_tokens=3, temperature=0.0).choices[0]
    assert choice.finish_reason in ("length", "stop")
    assert len(choice.model_dump()["token_ids"]) <= 3


def test_n_choices_and_top_logprobs(client) -> None:
    response = chat(client, n=2, seed=1, top_logprobs=2)
    assert len(response.choices) == 2
    first = response.choices[0].logprobs.content[0]
    assert len(first.top_logprobs) == 2
    assert first.top_logprobs[0].logprob >= first.logprob - 1e-6


def test_stop_string_cuts_text(client) -> None:
    # The untrained test model often ends at once; take the first seed whose sample has
    # at least two characters (sampling with a seed is reproducible, so the cut run
    # generates the same tokens up to the stop string).
    samples = (
        (seed, chat(client, temperature=1.0, seed=seed, max_tokens=8).choices[0].message.content)
        for seed in range(64)
    )
    seed, full = next(((s, text) for s, text in samples if len(text) >= 2), (None, ""))
    assert seed is not None, "no sample of two or more characters in 64 seeds"
    cut = chat(client, temperature=1.0, seed=seed, max_tokens=8, stop=[full[1]])
    assert cut.choices[0].message.content == full[: full.index(full[1])]
    assert cut.choices[0].finish_reason == "stop"


def test_unknown_model_404(client) -> None:
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        chat(client, model="gpt-9")


def test_too_long_request_400(client) -> None:
    with pytest.raises(openai.BadRequestError, match="exceeds the model's context"):
        chat(client, max_tokens=10_000)


def test_bad_body_422(client) -> None:
    with pytest.raises(openai.UnprocessableEntityError, match="temperature"):
        chat(client, temperature=-1.0)


def test_concurrent_requests_are_batched(served, client) -> None:
    server, _ = served
    before = server.batches_run
    results: list = []

    def one(i: int) -> None:
        results.append(chat(client, seed=i, max_tokens=4))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 6
    assert server.batches_run - before < 6


def test_swap_changes_version_and_weights(served, client, tiny_checkpoint) -> None:
    server, _ = served
    old_model = server.model
    other = AutoModelForCausalLM.from_pretrained(str(tiny_checkpoint))
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.5 * torch.randn_like(p))
    before = chat(client, temperature=0.0, max_tokens=4).model_dump()
    server.swap(other, 4)
    try:
        after = chat(client, temperature=0.0, max_tokens=4).model_dump()
        assert after["policy_version"] == 4 and before["policy_version"] == 3
        lp_before = before["choices"][0]["logprobs"]["content"][0]["logprob"]
        lp_after = after["choices"][0]["logprobs"]["content"][0]["logprob"]
        assert lp_before != pytest.approx(lp_after)
    finally:
        server.swap(old_model, 3)


PAGE_ACTIONS = {"has_search_bar": False, "clickables": ["back to search", "b00abc123", "< prev"]}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_constrained_logprobs_equal_trainer_masked_forward(client, backend, seed: int) -> None:
    """The server's recorded logprobs under a structured_outputs mask equal the trainer's
    forward pass renormalised over the replayed masks (an exact importance ratio), and
    differ from the unmasked forward pass."""
    from app.environments.webshop.agent import action_structured_outputs, parse_action
    from trainer.samples import CallRecord, RolloutRecord, build_samples

    constraint = action_structured_outputs(PAGE_ACTIONS)
    raw = chat(
        client,
        temperature=1.0,
        seed=seed,
        max_tokens=30,
        extra_body={"return_token_ids": True, "structured_outputs": constraint},
    ).model_dump()
    choice = raw["choices"][0]
    assert parse_action(choice["message"]["content"]) in {
        f"click[{c}]" for c in PAGE_ACTIONS["clickables"]
    }
    served = [t["logprob"] for t in choice["logprobs"]["content"]]
    call = CallRecord(raw["prompt_token_ids"], choice["token_ids"], served, 3, constraint)
    samples, _ = build_samples(
        [RolloutRecord("r", "g", 1.0, [call])], {"r": 1.0}, "trajectory", 4096
    )
    batch = backend.collate(samples)
    assert batch.allowed is not None and batch.allowed.shape[0] == len(served)
    trainer = backend.logprobs(batch)[batch.loss_mask.bool()]
    assert torch.allclose(trainer, torch.tensor(served), atol=1e-5)
    unmasked = backend.logprobs(collate(samples, backend.pad_id))[batch.loss_mask.bool()]
    assert not torch.allclose(unmasked, torch.tensor(served), atol=1e-3)
