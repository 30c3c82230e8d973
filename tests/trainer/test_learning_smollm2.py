"""The local backend trains a real pretrained model: SmolLM2-135M-Instruct (its own chat
template, a 49,152-token vocabulary, pad = eos, tied embeddings, bf16 weights loaded in
fp32) through the same loop as :mod:`test_learning`.

Every piece is the pipeline's: ``wsrl env serve`` on the generated catalog and a ``wsrl
worker`` process play rollouts against the trainer's policy server over HTTP, starting on
an item page (:mod:`app.environments.webshop.opening`), one step each, replies limited to the page's
valid actions (5-15 tokens); :class:`~trainer.loop.TrainLoop` selects the complete
groups, updates, commits and publishes each version until it has updated ``UPDATES``
times.

The check is the direction of the updates, not a held-out gain (two steps teach a 135M
model little that a held-out measure could see): over the replies trained on, the
logprob under the final weights minus the logprob the worker recorded (under the weights
that sampled it, which the trainer's own forward equals within ``LOGPROB_TOLERANCE``).
Weighted by their advantage, the replies must have moved ``MARGIN`` nats its way
(:class:`Moves`). The advantage is taken here from the rewards (a return against its
group's mean), so advantages flipped inside the trainer (patched as in
:mod:`test_learning`) move the replies against it and fail the check.

Sizes: SmolLM2 buys on an item page in 4-10 % of replies even at temperature 2 (the
highest the API takes), and a group of equal rewards is skipped, so a step plays 2
groups of 8 and the loop runs until ``UPDATES`` updates (at most ``MAX_STEPS`` steps).
A group's replies share their prompt, which the policy server and the learner each run
once. 1.3-2.8 minutes per test, setup included (2-5 loop steps), on a 2-core VM shared
with other jobs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from learning import flip_sign, loop_stack
from sqlalchemy import select

from app.config import Settings
from app.db.models import Rollout
from app.db.session import make_engine, make_sessionmaker, session_scope
from trainer.backends.local import run as local_run
from trainer.backends.local.learner import Learner
from trainer.backends.local.run import start_local_run
from trainer.config import Lora, RunConfig, Sampling, Schedule, TrainerConfig
from trainer.loop import LoopOptions, StepResult, episode_returns
from trainer.ready_groups import rollout_records
from trainer.samples import RolloutRecord, build_samples

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

UPDATES = 2
MAX_STEPS = 12
"""Steps whose groups all had equal rewards do not update; the run gives up after this."""
CONFIG = TrainerConfig(
    lr=1e-5, group_size=8, batch_groups=2, max_staleness=0, micro_batch_size=8, seed=0
)
SAMPLING = {"temperature": 2.0, "max_tokens": 24}
AGENT = {
    "max_steps": 1,
    "llm_max_tokens": 24,
    "agent_constrain_actions": True,
    "agent_history_steps": 0,
}
LORA = Lora(rank=16, alpha=32)
LORA_LR = 2e-4
"""An adapter's learning rate (low-rank updates take a larger one than the model's)."""
LOGPROB_TOLERANCE = 1e-4
"""Per generated token, the workers' recorded logprob against the trainer's forward."""
MARGIN = 0.5
"""Nats the replies must have moved along their advantage's sign, weighted by its size
(:meth:`Moves.along`; measured +1.76 and +1.92, with the sign flipped -1.89 and -2.07)."""


@dataclass
class Moves:
    """Each trained reply's advantage (its return minus its group's mean, the sign and
    proportion GRPO's normalised advantage has) and its logprob after minus before (nats).

    :meth:`along` is the mean of ``sign(A) * delta`` weighted by ``|A|``: to first order,
    what the update climbs, per unit of advantage. Each reply's own sign is not a law:
    with one buyer among 8 replies, the other 7 share a small negative advantage, and in
    six runs their mean moved by -0.04 to -1.55 nats (the buyers' by +1.9 to +4.1)."""

    advantages: list[float]
    deltas: list[float]

    def along(self) -> float:
        pairs = zip(self.advantages, self.deltas, strict=True)
        return sum(a * d for a, d in pairs) / sum(abs(a) for a in self.advantages)

    def mean(self, positive: bool) -> float:
        pairs = zip(self.advantages, self.deltas, strict=True)
        moved = [d for a, d in pairs if (a > 0) == positive]
        return sum(moved) / len(moved)


@pytest.fixture
def stack(fresh_settings: Settings, tmp_path: Path) -> Iterator[Settings]:
    with loop_stack(fresh_settings, tmp_path, **AGENT) as settings:
        yield settings


def trained_records(settings: Settings) -> list[RolloutRecord]:
    """The rollouts of every group a step used, with the calls their workers recorded."""
    engine = make_engine(settings)
    try:
        with session_scope(make_sessionmaker(engine)) as session:
            groups = session.scalars(
                select(Rollout.group_id).where(Rollout.train_step.is_not(None)).distinct()
            ).all()
            return rollout_records(session, [str(g) for g in groups])
    finally:
        engine.dispose()


def moves(learner: Learner, records: list[RolloutRecord]) -> Moves:
    """Each reply of a group with unequal returns: its return minus its group's mean, and
    its logprob under ``learner``'s weights minus the recorded one."""
    returns = episode_returns(records, CONFIG)
    groups: dict[str, list[float]] = {}
    for r in records:
        groups.setdefault(r.group_id, []).append(returns[r.rollout_id])
    advantages = {}
    for r in records:
        mean = sum(groups[r.group_id]) / len(groups[r.group_id])
        if max(groups[r.group_id]) > min(groups[r.group_id]):
            advantages[r.rollout_id] = returns[r.rollout_id] - mean
    informative = [r for r in records if r.rollout_id in advantages]
    samples, _ = build_samples(informative, advantages, "transition", CONFIG.max_sample_tokens)
    if not samples:
        return Moves([], [])
    batch = learner.collate(samples)
    after = learner.logprobs(batch)  # (B, T-1)
    deltas = ((after - batch.rollout_logprobs) * batch.loss_mask).sum(-1)  # (B,)
    return Moves([s.advantage for s in samples], deltas.tolist())


def train(
    settings: Settings, model: Path, tmp_path: Path, lora: Lora | None = None
) -> tuple[list[StepResult], Moves]:
    """The loop until ``UPDATES`` updates (or ``MAX_STEPS`` steps), and the replies' moves;
    with ``lora``, an adapter trains at :data:`LORA_LR` and the base weights are checked
    unchanged."""
    options = LoopOptions(checkpoint_dir=tmp_path / "checkpoints", poll_s=0.2)
    config = CONFIG.with_(lr=LORA_LR) if lora else CONFIG
    run = RunConfig(
        algorithm=config,
        sampling=Sampling(**SAMPLING),
        schedule=Schedule(train_starts=("item",)),
        lora=lora or Lora(),
    )
    trainer = start_local_run(settings, run, model, options)
    stop = threading.Event()
    updated: list[StepResult] = []

    def count(result: StepResult) -> None:
        if not result.metrics.get("update/skipped"):
            updated.append(result)
        if len(updated) >= UPDATES:
            stop.set()

    try:
        results = trainer.loop.run(MAX_STEPS, stop, count, wait_timeout_s=180)
        found = moves(trainer.learner, trained_records(settings))
        if lora:
            assert_base_unchanged(trainer.learner, model)
    finally:
        trainer.close()
    return results, found


def assert_base_unchanged(learner: Learner, model: Path) -> None:
    from safetensors.torch import load_file

    expected: dict = {}
    for shard in model.glob("*.safetensors"):
        expected.update(load_file(shard))
    compared = 0
    for name, value in learner.model.state_dict().items():
        plain = name.replace("base_model.model.", "").replace(".base_layer", "")
        if "lora_" not in name and plain in expected:
            assert torch.equal(value, expected[plain].float()), name
            compared += 1
    assert compared == len(expected), (compared, len(expected))


def check_direction(results: list[StepResult], found: Moves) -> None:
    """What updates that follow the advantages show; raises AssertionError otherwise."""
    updates = [r.metrics for r in results if not r.metrics.get("update/skipped")]
    assert len(updates) >= UPDATES, f"{len(updates)} updates in {len(results)} steps"
    for m in updates:
        diff = m["actor/rollout_vs_old_logprob_abs_diff"]
        assert diff < LOGPROB_TOLERANCE, f"the workers' and the trainer's logprobs differ by {diff}"
    along = found.along()
    print(f"replies moved {along:+.3f} nats along their advantage")
    assert along >= MARGIN, (
        f"replies moved {along:+.3f} nats along their advantage (positive ones "
        f"{found.mean(True):+.3f}, negative ones {found.mean(False):+.3f} on average, "
        f"{len(found.deltas)} replies)"
    )


def test_smollm2_updates_move_replies_along_their_advantage(
    stack: Settings, smollm2: Path, tmp_path: Path
) -> None:
    check_direction(*train(stack, smollm2, tmp_path))


def test_smollm2_lora_updates_move_replies_along_their_advantage(
    stack: Settings, smollm2: Path, tmp_path: Path
) -> None:
    """Only an adapter (rank 16 on every linear layer: 1.8 % of the weights) trains and
    syncs; the replies move as the whole model's do, the base weights stay the file's."""
    check_direction(*train(stack, smollm2, tmp_path, lora=LORA))


def test_smollm2_flipped_advantages_fail_the_check(
    stack: Settings, smollm2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_run, "rollout_advantages", flip_sign(local_run.rollout_advantages))
    with pytest.raises(AssertionError, match="along their advantage"):
        check_direction(*train(stack, smollm2, tmp_path))
