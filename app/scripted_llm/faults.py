"""Faults the scripted server can be told to produce, per server or at run time.

All state lives on the server's one event loop, so no lock is needed.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class FaultMode(StrEnum):
    OK = "ok"
    ERROR_5XX = "error_5xx"
    TIMEOUT = "timeout"
    GARBAGE = "garbage"
    INVALID_ACTION = "invalid_action"


# Replies without a usable action; each trips a different part of an action parser.
GARBAGE_REPLIES = (
    "I am not sure what to buy here. Maybe something nice?",
    "<think>search[this is only a thought]</think> Let me look around first.",
    "click [buy now",
    "search[]",
    "Action: purchase(the cheapest one)",
)
# Well-formed, but no page has this element: the env answers it as an invalid action.
INVALID_ACTION_REPLY = "click[a button that is not there]"


class FaultRequest(BaseModel):
    """Body of ``POST /admin/faults``."""

    model_config = ConfigDict(extra="forbid")

    mode: FaultMode
    count: int | None = Field(
        None, ge=1, description="Requests to affect; unset = until told otherwise."
    )
    latency_ms: float | None = Field(None, ge=0, description="New added latency per call.")
    timeout_s: float | None = Field(
        None, gt=0, description="How long a 'timeout' request hangs (or until the client leaves)."
    )


class FaultState:
    """The current fault and how many more requests it affects (None = all)."""

    def __init__(self, mode: FaultMode = FaultMode.OK, count: int | None = None) -> None:
        self.mode = mode
        self.remaining = count
        self.served: dict[str, int] = {m.value: 0 for m in FaultMode}

    def set(self, mode: FaultMode, count: int | None = None) -> None:
        self.mode = mode
        self.remaining = None if mode == FaultMode.OK else count

    def take(self) -> FaultMode:
        """The fault for the next request; a counted fault returns to ``ok`` when spent."""
        mode = self.mode
        if mode != FaultMode.OK and self.remaining is not None:
            self.remaining -= 1
            if self.remaining <= 0:
                self.set(FaultMode.OK)
        self.served[mode.value] += 1
        return mode

    def as_dict(self) -> dict[str, object]:
        return {"mode": self.mode.value, "remaining": self.remaining, "served": dict(self.served)}
