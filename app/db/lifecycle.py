"""Lifecycle states of rollouts, attempts and policy versions, with their allowed moves.

Every status change goes through :func:`check_transition` (or :func:`transition`), so an
illegal move (say a ``succeeded`` rollout going back to ``running``) is an error at the
place it happens instead of a silent overwrite of the source of truth.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


class RolloutMode(StrEnum):
    TRAIN = "train"
    EVAL = "eval"


class RolloutStart(StrEnum):
    """Where the policy's part of an episode begins (:mod:`app.environments.webshop.opening`):
    ``search`` is the original task; ``results`` and ``item`` are reached by scripted steps."""

    SEARCH = "search"
    RESULTS = "results"
    ITEM = "item"


START_VALUES = tuple(start.value for start in RolloutStart)


def parse_start(value: str | RolloutStart) -> RolloutStart:
    """``value`` as a :class:`RolloutStart`; a ``ValueError`` naming the allowed values."""
    try:
        return RolloutStart(value)
    except ValueError:
        allowed = ", ".join(repr(v) for v in START_VALUES)
        raise ValueError(f"start must be one of {allowed}, got {value!r}") from None


def parse_starts(text: str) -> tuple[str, ...]:
    """A comma list of starts (``"search,item"``), validated; duplicates dropped, order kept."""
    starts = [part.strip() for part in text.split(",") if part.strip()]
    if not starts:
        raise ValueError(f"give at least one start of {', '.join(START_VALUES)}, got {text!r}")
    return tuple(dict.fromkeys(parse_start(start).value for start in starts))


class RolloutStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class AttemptStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LOST = "lost"


class PolicyVersionStatus(StrEnum):
    """``syncing``: weights are being loaded (workers wait); ``active``: serving;
    ``retired``: superseded by a newer version."""

    SYNCING = "syncing"
    ACTIVE = "active"
    RETIRED = "retired"


class GoalSource(StrEnum):
    SYNTHETIC = "synthetic"
    HUMAN = "human"


LifecycleKind = Literal["rollout", "attempt", "policy_version"]

# A rollout goes back to ``queued`` when its attempt failed or was lost and attempts are
# left (retry), or when the reconciler re-enqueues it; ``running -> running`` is a new
# attempt of a redelivered job. Finished states are final.
ROLLOUT_TRANSITIONS: dict[RolloutStatus, frozenset[RolloutStatus]] = {
    RolloutStatus.QUEUED: frozenset(
        {RolloutStatus.RUNNING, RolloutStatus.CANCELLED, RolloutStatus.FAILED}
    ),
    RolloutStatus.RUNNING: frozenset(
        {
            RolloutStatus.RUNNING,
            RolloutStatus.QUEUED,
            RolloutStatus.SUCCEEDED,
            RolloutStatus.FAILED,
            RolloutStatus.CANCELLED,
        }
    ),
    RolloutStatus.SUCCEEDED: frozenset(),
    RolloutStatus.FAILED: frozenset(),
    RolloutStatus.CANCELLED: frozenset(),
}

# An attempt ends once; ``lost`` is set by the reconciler for an attempt whose worker
# died (its rows are never used for training).
ATTEMPT_TRANSITIONS: dict[AttemptStatus, frozenset[AttemptStatus]] = {
    AttemptStatus.RUNNING: frozenset(
        {AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.LOST}
    ),
    AttemptStatus.SUCCEEDED: frozenset(),
    AttemptStatus.FAILED: frozenset(),
    AttemptStatus.LOST: frozenset(),
}

POLICY_VERSION_TRANSITIONS: dict[PolicyVersionStatus, frozenset[PolicyVersionStatus]] = {
    PolicyVersionStatus.SYNCING: frozenset(
        {PolicyVersionStatus.ACTIVE, PolicyVersionStatus.RETIRED}
    ),
    PolicyVersionStatus.ACTIVE: frozenset({PolicyVersionStatus.RETIRED}),
    PolicyVersionStatus.RETIRED: frozenset(),
}

TRANSITIONS: dict[str, tuple[type[StrEnum], dict]] = {
    "rollout": (RolloutStatus, ROLLOUT_TRANSITIONS),
    "attempt": (AttemptStatus, ATTEMPT_TRANSITIONS),
    "policy_version": (PolicyVersionStatus, POLICY_VERSION_TRANSITIONS),
}

FINAL_ROLLOUT_STATUSES = frozenset(
    {RolloutStatus.SUCCEEDED, RolloutStatus.FAILED, RolloutStatus.CANCELLED}
)
UNFINISHED_ROLLOUT_STATUSES = frozenset({RolloutStatus.QUEUED, RolloutStatus.RUNNING})


class IllegalTransition(ValueError):
    """A status change the transition table does not allow."""

    def __init__(self, kind: str, old: str, new: str, allowed: frozenset[StrEnum]) -> None:
        allowed_text = ", ".join(sorted(allowed)) or "none: it is final"
        super().__init__(
            f"{kind} cannot go from {old!r} to {new!r} (allowed from {old!r}: {allowed_text})"
        )
        self.kind = kind
        self.old = old
        self.new = new


def check_transition(kind: LifecycleKind, old: str, new: str) -> None:
    """Raise :class:`IllegalTransition` unless ``old -> new`` is allowed for ``kind``.

    ``old``/``new`` may be enum members or their string values; an unknown value is a
    ``ValueError`` naming the valid ones.
    """
    if kind not in TRANSITIONS:
        raise ValueError(f"unknown lifecycle kind {kind!r}; expected one of {sorted(TRANSITIONS)}")
    enum_cls, table = TRANSITIONS[kind]
    old_state, new_state = _parse(enum_cls, kind, old), _parse(enum_cls, kind, new)
    allowed = table[old_state]
    if new_state not in allowed:
        raise IllegalTransition(kind, old_state.value, new_state.value, allowed)


def is_allowed(kind: LifecycleKind, old: str, new: str) -> bool:
    """Whether ``old -> new`` is allowed (unknown states raise like :func:`check_transition`)."""
    try:
        check_transition(kind, old, new)
    except IllegalTransition:
        return False
    return True


def _parse(enum_cls: type[StrEnum], kind: str, value: str) -> StrEnum:
    try:
        return enum_cls(value)
    except ValueError:
        valid = ", ".join(member.value for member in enum_cls)
        raise ValueError(f"unknown {kind} status {value!r}; expected one of: {valid}") from None
