"""A deterministic stand-in tokenizer: word-level pieces hashed to ids.

Real token ids come from the served model's tokenizer; the scripted server only needs
ids that are stable, cheap to compute and shaped like a chat model's (a chat template
with start/end markers, the end marker generated last), so that token capture and the
trainer's sample assembly can be tested without a model.
"""

from __future__ import annotations

import re
import zlib
from functools import lru_cache
from typing import Any

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
IM_START_ID = 1
IM_END_ID = 2
FIRST_PIECE_ID = 16
VOCAB_SIZE = 151_000

_PIECE = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")


def pieces(text: str) -> list[str]:
    """Word pieces with their leading whitespace; joining them gives ``text`` back."""
    return _PIECE.findall(text)


def piece_id(piece: str) -> int:
    return FIRST_PIECE_ID + zlib.crc32(piece.encode()) % (VOCAB_SIZE - FIRST_PIECE_ID)


def encode(text: str) -> list[int]:
    return list(_encode(text))


@lru_cache(maxsize=4096)
def _encode(text: str) -> tuple[int, ...]:
    """Cached per message: every call repeats the system prompt, and episodes on the same
    goal repeat their pages. Encoding every prompt from scratch was about a sixth of this
    server's CPU in the rollout throughput benchmark, CPU the system under test needs."""
    return tuple(piece_id(p) for p in pieces(text))


def logprob(token_id: int, position: int) -> float:
    """A plausible, deterministic log-probability in [-2.5, -0.005]."""
    return -0.005 - ((token_id * 31 + position * 17) % 500) / 200.0


def encode_chat(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
    """The prompt ids of a ChatML-like template, ending with the assistant header."""
    ids: list[int] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, str):
            content = "" if content is None else str(content)
        ids.append(IM_START_ID)
        ids += encode(f"{message.get('role', 'user')}\n{content}")
        ids.append(IM_END_ID)
        ids += encode("\n")
    if tools:
        ids.append(IM_START_ID)
        ids += encode(f"tools\n{tools}")
        ids.append(IM_END_ID)
    ids.append(IM_START_ID)
    ids += encode("assistant\n")
    return ids
