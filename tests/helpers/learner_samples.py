"""Hand-made samples for the local learner's tests: a prompt, a reply and its advantage."""

from __future__ import annotations

from trainer.samples import Sample


def sample(rid: str, prompt: list[int], response: list[int], advantage: float) -> Sample:
    """One sample of ``prompt`` then ``response`` (trained on), recorded logprobs -1."""
    n = len(prompt) + len(response)
    mask = [0] * len(prompt) + [1] * len(response)
    return Sample(rid, "g", prompt + response, mask, [-1.0] * n, advantage, 0)


SAMPLES = [
    sample("good", [1, 30, 40], [50, 60, 2], 1.0),
    sample("bad", [1, 30, 40, 41], [70, 80, 2], -1.0),
    sample("good2", [1, 31], [50, 60, 2], 1.0),
]
"""Two replies to raise (advantage +1) and one to lower (-1)."""
