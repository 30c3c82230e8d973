"""Training backends, and the registry ``wsrl train`` and ``wsrl doctor`` dispatch through
(the Compose trainer services run those commands).

A backend is a folder here and one entry in :data:`BACKENDS`:

* ``local/`` - the policy trained in this process (transformers, CPU or one GPU);
* ``verl/`` - verl 0.9.1 on GPUs (Ray, FSDP, vLLM).

An entry names the ``wsrl train`` options the backend honours (any other one typed is
refused, naming it), and its entry module, imported only when that backend is chosen (so
neither ``wsrl --help`` nor the local backend loads verl's stack). The module provides
what :class:`Entry` lists. This module imports nothing heavy, and nothing of ours.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from app.core.preflight import Check
    from trainer.config import RunConfig


class StartError(Exception):
    """A run that cannot start (or a configuration that cannot be shown); the message says
    why and what to do. ``checks``: the preflight's findings, when the preflight failed."""

    def __init__(self, message: str, checks: list[Check] | None = None) -> None:
        super().__init__(message)
        self.checks = checks or []


class UnknownBackendError(ValueError):
    """A backend name that is not in :data:`BACKENDS`."""


@dataclass(frozen=True)
class ConfigValue:
    """One line of ``wsrl train --print-config``: ``key`` (a run-configuration path, or
    the backend's own key holding ``path``) and where its value came from: typed with the
    option of the run-configuration path ``typed``, else ``source`` (e.g. ``default``)."""

    key: str
    value: Any
    path: str
    typed: str | None = None
    source: str = "default"


class Entry(Protocol):
    """What a backend's entry module provides. ``given``: the run-configuration paths of
    the options the user typed (all of them honoured)."""

    def train(
        self, settings: Any, run: RunConfig, given: set[str], echo: Callable[[str], None]
    ) -> None:
        """Train (until ``run.steps`` or a signal); :class:`StartError` when it cannot start."""
        ...

    def resolved_config(self, run: RunConfig, given: set[str]) -> list[ConfigValue]:
        """The configuration the run would train with."""
        ...

    def checks(self, settings: Any, run: RunConfig, given: set[str]) -> list[Check]:
        """The preflight of a run (``wsrl doctor``)."""
        ...


@dataclass(frozen=True)
class Backend:
    """One registry entry."""

    name: str
    help: str
    honours: frozenset[str]
    """The run-configuration paths (``algorithm.lr``, ...) whose ``wsrl train`` options the
    backend honours."""
    unhonoured_hint: str
    """What to do instead of an option it cannot honour."""
    entry: str
    """Its entry module (an :class:`Entry`), imported by :meth:`load`."""

    def load(self) -> Entry:
        return cast(Entry, importlib.import_module(self.entry))


def _paths(section: str, *names: str) -> frozenset[str]:
    return frozenset(f"{section}.{name}" for name in names)


_EVERY_BACKEND = frozenset({"backend", "model", "steps", "preset"}) | _paths(
    "lora", "rank", "alpha", "target_modules"
)

BACKENDS: dict[str, Backend] = {
    backend.name: backend
    for backend in (
        Backend(
            name="local",
            help="this process, CPU or one GPU",
            honours=_EVERY_BACKEND
            | _paths(
                "algorithm",
                *("group_size", "batch_groups", "max_staleness", "lr", "sample_mode"),
                *("sample_weighting", "step_discount", "seed", "device"),
            )
            | _paths("sampling", "temperature", "max_tokens")
            | _paths(
                "schedule", "split", "train_starts", "eval_every", "eval_goals", "eval_temperature"
            )
            | _paths(
                "local",
                *("enqueue", "policy_port", "policy_host", "advertise_host", "poll_s"),
                "checkpoint_dir",
            ),
            unhonoured_hint="it is for --backend verl",
            entry="trainer.backends.local.entry",
        ),
        Backend(
            name="verl",
            help="GPUs: verl with Ray, FSDP and vLLM",
            # each maps to a key of its config (trainer/backends/verl/config.py)
            honours=_EVERY_BACKEND
            | _paths("verl", "config", "overrides", "preflight")
            | _paths(
                "algorithm",
                *("group_size", "batch_groups", "max_staleness", "lr", "sample_mode"),
                *("step_discount", "seed"),
            )
            | _paths("sampling", "temperature", "max_tokens")
            | _paths(
                "schedule", "split", "train_starts", "eval_every", "eval_goals", "eval_temperature"
            )
            | _paths(
                "local", "policy_port", "policy_host", "advertise_host", "poll_s", "checkpoint_dir"
            ),
            unhonoured_hint="set the verl key with --override KEY=VALUE, or use --backend local",
            entry="trainer.backends.verl.entry",
        ),
    )
}
"""Every backend, by the name ``--backend`` takes."""


def choices() -> str:
    """The backends as help text: ``local (this process, ...) or verl (GPUs: ...)``."""
    return " or ".join(f"{b.name} ({b.help})" for b in BACKENDS.values())


def get_backend(name: str) -> Backend:
    """The backend ``name``; :class:`UnknownBackendError` lists the known ones."""
    if name not in BACKENDS:
        raise UnknownBackendError(
            f"unknown backend {name!r}: use one of {', '.join(sorted(BACKENDS))}"
        )
    return BACKENDS[name]
