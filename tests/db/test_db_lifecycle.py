"""The transition tables: what may follow what, and how a wrong move fails."""

from __future__ import annotations

import pytest

from app.db.lifecycle import (
    ATTEMPT_TRANSITIONS,
    POLICY_VERSION_TRANSITIONS,
    ROLLOUT_TRANSITIONS,
    AttemptStatus,
    IllegalTransition,
    PolicyVersionStatus,
    RolloutStatus,
    check_transition,
    is_allowed,
)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("queued", "running"),
        ("queued", "cancelled"),
        ("running", "succeeded"),
        ("running", "failed"),
        ("running", "queued"),
        ("running", "running"),
        ("running", "cancelled"),
    ],
)
def test_rollout_allowed_transitions(old: str, new: str) -> None:
    check_transition("rollout", old, new)
    assert is_allowed("rollout", RolloutStatus(old), RolloutStatus(new))


@pytest.mark.parametrize("final", ["succeeded", "failed", "cancelled"])
@pytest.mark.parametrize("new", [s.value for s in RolloutStatus])
def test_rollout_final_states_never_change(final: str, new: str) -> None:
    with pytest.raises(IllegalTransition, match="it is final"):
        check_transition("rollout", final, new)


def test_rollout_queued_cannot_succeed_without_running() -> None:
    with pytest.raises(IllegalTransition) as info:
        check_transition("rollout", RolloutStatus.QUEUED, RolloutStatus.SUCCEEDED)
    message = str(info.value)
    assert "'queued' to 'succeeded'" in message
    assert "cancelled, failed, running" in message
    assert info.value.kind == "rollout"


def test_attempt_ends_once() -> None:
    for end in ("succeeded", "failed", "lost"):
        check_transition("attempt", "running", end)
        for other in AttemptStatus:
            assert not is_allowed("attempt", end, other)


def test_policy_version_lifecycle() -> None:
    check_transition("policy_version", "syncing", "active")
    check_transition("policy_version", "active", "retired")
    with pytest.raises(IllegalTransition):
        check_transition("policy_version", PolicyVersionStatus.RETIRED, "active")


def test_unknown_state_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown rollout status 'done'; expected one of"):
        check_transition("rollout", "done", "queued")
    with pytest.raises(ValueError, match="unknown lifecycle kind"):
        check_transition("job", "queued", "running")  # type: ignore[arg-type]


def test_tables_cover_every_state() -> None:
    assert set(ROLLOUT_TRANSITIONS) == set(RolloutStatus)
    assert set(ATTEMPT_TRANSITIONS) == set(AttemptStatus)
    assert set(POLICY_VERSION_TRANSITIONS) == set(PolicyVersionStatus)
