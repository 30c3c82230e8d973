"""Constrained decoding: the regex subset, token masks, and generation that always matches."""

import re

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.environments.webshop.agent import action_structured_outputs, parse_action
from trainer.constrained import (
    ConstraintError,
    Pattern,
    TokenConstraint,
    allowed_rows,
    compile_pattern,
    regex_of,
    token_index,
)
from trainer.generation import GenerationRequest, generate_batch

PAGE = {"has_search_bar": False, "clickables": ["back to search", "B00ABC123", "size 6.5 [us]"]}


@pytest.mark.parametrize(
    ("regex", "text", "full"),
    [
        (r"click\[ ?(?:a|bc)\]", "click[ bc]", True),
        (r"click\[ ?(?:a|bc)\]", "click[b]", False),
        (r"search\[ ?[^\[\]\n]+\]", "search[ red mug]", True),
        (r"search\[ ?[^\[\]\n]+\]", "search[]", False),
        (r"[a-c]*x?", "abcab", True),
        (r"(?:ab)+", "ababa", False),
    ],
)
def test_pattern_agrees_with_re(regex: str, text: str, full: bool) -> None:
    assert Pattern(regex).matches(text) is full
    assert (re.fullmatch(regex, text) is not None) is full


@pytest.mark.parametrize("regex", [r"a{2}", r"(?=a)", r"\d", r"a)"])
def test_unsupported_regex_is_a_constraint_error(regex: str) -> None:
    with pytest.raises(ConstraintError):
        Pattern(regex)


def test_choice_is_an_alternation_of_escaped_strings() -> None:
    pattern = compile_pattern(regex_of({"choice": ["click[a]", "x.y"]}))
    assert pattern.matches("click[a]") and pattern.matches("x.y") and not pattern.matches("xzy")


def test_page_actions_regex_matches_every_listed_click_and_nothing_else() -> None:
    pattern = compile_pattern(regex_of(action_structured_outputs(PAGE)))
    for clickable in PAGE["clickables"]:
        assert pattern.matches(f"click[ {clickable}]") and pattern.matches(f"click[{clickable}]")
    assert not pattern.matches("click[ B00XYZ999]")
    assert not pattern.matches("search[ mug]")  # no search bar on this page
    search_page = {"has_search_bar": True, "clickables": ["search"]}
    searches = compile_pattern(regex_of(action_structured_outputs(search_page)))
    assert searches.matches("search[ blue ceramic mug]")
    # the prompt lists the search as search[<keywords>]: the placeholder is no search text
    assert not searches.matches("search[<keywords>]")
    assert not re.fullmatch(action_structured_outputs(search_page)["regex"], "search[<keywords>]")


def _prompt(tokenizer) -> list[int]:
    encoded = tokenizer.apply_chat_template(
        [{"role": "user", "content": "buy a mug"}], add_generation_prompt=True, return_dict=True
    )
    return list(encoded["input_ids"])


def test_constrained_generation_always_yields_a_listed_action(tiny_checkpoint) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)  # random: unconstrained junk
    constraint = action_structured_outputs(PAGE)
    prompt = _prompt(tokenizer)
    requests = [
        GenerationRequest(prompt, 40, temperature=1.0, seed=s, structured_outputs=constraint)
        for s in range(6)
    ]
    for gen in generate_batch(model, tokenizer, requests):
        action = parse_action(gen.text)
        assert gen.finish_reason == "stop", gen.text
        assert action in {f"click[{c}]" for c in PAGE["clickables"]}, gen.text


def test_recorded_logprobs_are_renormalised_over_the_allowed_tokens(tiny_checkpoint) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    constraint = action_structured_outputs(PAGE)
    prompt = _prompt(tokenizer)
    (gen,) = generate_batch(
        model, tokenizer, [GenerationRequest(prompt, 40, seed=3, structured_outputs=constraint)]
    )
    index = token_index(tokenizer, [tokenizer.eos_token_id])
    rows = allowed_rows(constraint, gen.token_ids, index)
    ids = torch.tensor([list(prompt) + gen.token_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]  # (n, V)
    for k, (token, allowed) in enumerate(zip(gen.token_ids, rows, strict=True)):
        assert token in allowed
        expected = torch.log_softmax(logits[k, allowed], dim=-1)[allowed.index(token)]
        assert gen.logprobs[k] == pytest.approx(float(expected), abs=1e-4)
    # the replay ends in a state where only the end of the turn was possible
    constraint_state = TokenConstraint(compile_pattern(regex_of(constraint)), index)
    for token in gen.token_ids[:-1]:
        constraint_state.advance(token)
    assert constraint_state.pattern.accepts(constraint_state.state)


def test_a_pattern_shared_by_two_vocabularies_gives_each_its_own_ids(tiny_checkpoint) -> None:
    """compile_pattern shares a pattern between tokenizers; the allowed ids of a state
    were cached on the pattern, so the second tokenizer got the first's ids (a SmolLM2
    reply replayed after a tiny-policy test in one process: its end of turn was outside
    the mask)."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    pattern = compile_pattern(r"search\[ ?[^\[\]\n<>]+\]")
    done = pattern.walk(pattern.start, "search[mug]")
    assert pattern.accepts(done)
    first = token_index(tokenizer, [tokenizer.eos_token_id])
    other_tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    second = token_index(other_tokenizer, [7])  # another end of turn
    assert tokenizer.eos_token_id in first.allowed(pattern, done)
    allowed = second.allowed(pattern, done)
    assert 7 in allowed and tokenizer.eos_token_id not in allowed
