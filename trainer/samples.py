"""Training samples from recorded LLM calls, token for token.

The token ids are the ones the inference server produced (never a re-tokenisation), so
the loss is computed on exactly what was sampled. ``loss_mask`` is aligned with
``input_ids``: 1 on generated tokens, 0 on prompt and observation tokens.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from trainer.config import WEIGHTINGS


@dataclass(frozen=True)
class CallRecord:
    """One LLM call as the inference server answered it."""

    prompt_token_ids: Sequence[int]
    response_token_ids: Sequence[int]
    response_logprobs: Sequence[float]
    policy_version: int
    structured_outputs: dict | None = None
    """The constraint the reply was decoded under (None: unconstrained)."""


@dataclass(frozen=True)
class RolloutRecord:
    """One finished episode: its group, its reward and its LLM calls in order."""

    rollout_id: str
    group_id: str
    reward: float
    calls: Sequence[CallRecord]


@dataclass
class Sample:
    """One training sequence; every list has the length of ``input_ids``."""

    rollout_id: str
    group_id: str
    input_ids: list[int]
    loss_mask: list[int]
    rollout_logprobs: list[float]
    advantage: float
    policy_version_min: int
    weight: float = 1.0
    """Scales this sample's per-token loss (see ``weighting`` in :func:`build_samples`)."""
    constraints: list[tuple[int, dict]] = field(default_factory=list)
    """(index in ``input_ids`` where a constrained reply starts, its ``structured_outputs``):
    the trainer replays these masks (:mod:`trainer.constrained`)."""

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def num_generated(self) -> int:
        return sum(self.loss_mask)


@dataclass
class SampleStats:
    """What happened while building samples (reported as metrics)."""

    samples: int = 0
    prefix_mismatches: int = 0
    dropped_overlength: int = 0
    skipped_empty_calls: int = 0
    generated_tokens: int = 0

    def as_metrics(self) -> dict[str, float]:
        return {f"samples/{k}": float(v) for k, v in self.__dict__.items()}


@dataclass
class _Builder:
    """A sample under construction (trajectory mode appends turns to it)."""

    input_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    rollout_logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    constraints: list[tuple[int, dict]] = field(default_factory=list)

    def extends(self, prompt: Sequence[int]) -> bool:
        n = len(self.input_ids)
        return len(prompt) >= n and list(prompt[:n]) == self.input_ids

    def append(self, call: CallRecord) -> None:
        context = list(call.prompt_token_ids[len(self.input_ids) :])
        if call.structured_outputs is not None:
            self.constraints.append((len(self.input_ids) + len(context), call.structured_outputs))
        self.input_ids += context + list(call.response_token_ids)
        self.loss_mask += [0] * len(context) + [1] * len(call.response_token_ids)
        self.rollout_logprobs += [0.0] * len(context) + [float(x) for x in call.response_logprobs]
        self.versions.append(call.policy_version)


def _check_call(call: CallRecord, rollout_id: str) -> None:
    if len(call.response_logprobs) != len(call.response_token_ids):
        raise ValueError(
            f"rollout {rollout_id}: {len(call.response_token_ids)} response tokens but "
            f"{len(call.response_logprobs)} logprobs; the LLM client must record one per token."
        )
    if not call.prompt_token_ids:
        raise ValueError(f"rollout {rollout_id}: a call has no prompt_token_ids.")


def _split_turns(rollout: RolloutRecord, mode: str, stats: SampleStats) -> list[_Builder]:
    """Turns grouped into sequences: one per call, or joined while prompts extend."""
    builders: list[_Builder] = []
    for call in rollout.calls:
        _check_call(call, rollout.rollout_id)
        if not call.response_token_ids:
            stats.skipped_empty_calls += 1
            continue
        if mode == "trajectory" and builders and builders[-1].extends(call.prompt_token_ids):
            builders[-1].append(call)
            continue
        if mode == "trajectory" and builders:
            stats.prefix_mismatches += 1
        builder = _Builder()
        builder.append(call)
        builders.append(builder)
    return builders


def build_samples(
    rollouts: Iterable[RolloutRecord],
    advantages: Mapping[str, float],
    mode: str,
    max_tokens: int,
    weighting: str = "token",
) -> tuple[list[Sample], SampleStats]:
    """Samples of ``rollouts``; every sample of a rollout gets the rollout's advantage.

    ``mode`` is ``transition`` (one sample per call) or ``trajectory`` (a call whose prompt
    extends the previous prompt + response is appended, its new context tokens masked 0;
    otherwise it starts a new sample and counts as a prefix mismatch). Samples longer than
    ``max_tokens`` are dropped and counted.

    ``weighting`` says how much each rollout counts in a token-mean loss. ``token``: every
    generated token the same, so a rollout counts by its length. ``rollout``: every rollout
    the same, its tokens sharing its weight (``weight`` = mean generated tokens per rollout
    / this rollout's). Why it matters: when the agent rebuilds its prompt every turn, a
    failed episode that wanders to the step limit has several times the turns of a
    successful one (10 turns against 5 for the tiny policy at temperature 1), and under
    ``token`` the tokens every turn shares (``click[``, the end of turn) get a net push
    down from the group's failures, whatever the failures did wrong.
    """
    if mode not in ("transition", "trajectory"):
        raise ValueError(f"mode={mode!r}: use 'transition' or 'trajectory'.")
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting={weighting!r}: use one of {WEIGHTINGS}.")
    stats = SampleStats()
    samples: list[Sample] = []
    for rollout in rollouts:
        for b in _split_turns(rollout, mode, stats):
            if len(b.input_ids) > max_tokens:
                stats.dropped_overlength += 1
                continue
            samples.append(
                Sample(
                    rollout_id=rollout.rollout_id,
                    group_id=rollout.group_id,
                    input_ids=b.input_ids,
                    loss_mask=b.loss_mask,
                    rollout_logprobs=b.rollout_logprobs,
                    advantage=float(advantages[rollout.rollout_id]),
                    policy_version_min=min(b.versions),
                    constraints=b.constraints,
                )
            )
    stats.samples = len(samples)
    stats.generated_tokens = sum(s.num_generated for s in samples)
    if weighting == "rollout":
        _weigh_rollouts_equally(samples)
    return samples, stats


def _weigh_rollouts_equally(samples: list[Sample]) -> None:
    tokens: dict[str, int] = defaultdict(int)
    for sample in samples:
        tokens[sample.rollout_id] += sample.num_generated
    mean = sum(tokens.values()) / max(len(tokens), 1)
    for sample in samples:
        sample.weight = mean / tokens[sample.rollout_id]
