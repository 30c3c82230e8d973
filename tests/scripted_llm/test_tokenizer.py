"""The scripted server's hash tokenizer: deterministic, lossless pieces, chat-shaped."""

from __future__ import annotations

from app.scripted_llm import tokenizer


def test_pieces_join_back_to_text() -> None:
    text = "  search[red lamp, 2 pack]\n<think>ok</think> $19.99 "
    assert "".join(tokenizer.pieces(text)) == text


def test_encode_is_deterministic_and_in_vocab() -> None:
    ids = tokenizer.encode("click[buy now]")
    assert ids == tokenizer.encode("click[buy now]")
    assert all(tokenizer.FIRST_PIECE_ID <= i < tokenizer.VOCAB_SIZE for i in ids)
    assert tokenizer.encode("click[buy now]") != tokenizer.encode("click[buy later]")


def test_chat_prompt_extends_with_each_turn() -> None:
    first = [{"role": "user", "content": "hi"}]
    second = [
        *first,
        {"role": "assistant", "content": "search[x]"},
        {"role": "user", "content": "ok"},
    ]
    header = [tokenizer.IM_START_ID, *tokenizer.encode("assistant\n")]
    a = tokenizer.encode_chat(first, None)
    b = tokenizer.encode_chat(second, None)
    assert a[0] == tokenizer.IM_START_ID
    assert a[-len(header) :] == header
    assert b[: len(a) - len(header)] == a[: -len(header)]


def test_logprobs_are_negative_and_deterministic() -> None:
    values = [tokenizer.logprob(t, i) for i, t in enumerate(tokenizer.encode("a b c d e f"))]
    assert all(-2.6 < v < 0 for v in values)
    assert values == [
        tokenizer.logprob(t, i) for i, t in enumerate(tokenizer.encode("a b c d e f"))
    ]
