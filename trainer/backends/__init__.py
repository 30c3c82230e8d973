"""Training backends, and the registry ``wsrl train`` and ``wsrl doctor`` dispatch through
(the Compose trainer services run those commands).

A backend is a folder here and one entry in :data:`BACKENDS`:

* ``local/`` - the policy trained in this process (transformers, CPU or one GPU);
* ``verl/`` - verl 0.9.1 on GPUs (Ray, FSDP, vLLM).

An entry names the run-configuration sections the backend honours, and a table of its own
keys for the fields it honours elsewhere (any other field the user sets is refused, naming
it), and its entry module, imported only when that backend is chosen (so
neither ``wsrl --help`` nor the local backend loads verl's stack). The module provides
what :class:`Entry` lists. This module imports nothing heavy, and nothing of ours.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
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
    the backend's own key holding ``path``) and where its value came from (``default``,
    ``flag --lr``, ``env WSRL_TRAIN_LR``, ``file run.toml``, ``preset dr_grpo``, or the
    backend's own config)."""

    key: str
    value: Any
    path: str
    source: str = "default"


class Entry(Protocol):
    """What a backend's entry module provides. ``given``: each run-configuration path the
    user set (by a flag, the environment, a file or a preset, all of them honoured) -> where
    it was set."""

    def train(
        self,
        settings: Any,
        run: RunConfig,
        given: Mapping[str, str],
        echo: Callable[[str], None],
    ) -> None:
        """Train (until ``run.steps`` or a signal); :class:`StartError` when it cannot start."""
        ...

    def resolved_config(self, run: RunConfig, given: Mapping[str, str]) -> list[ConfigValue]:
        """The configuration the run would train with."""
        ...

    def checks(self, settings: Any, run: RunConfig, given: Mapping[str, str]) -> list[Check]:
        """The preflight of a run (``wsrl doctor``)."""
        ...


@dataclass(frozen=True)
class Backend:
    """One registry entry."""

    name: str
    help: str
    sections: tuple[str, ...]
    """The run-configuration sections whose every field the backend honours (``""``: the
    top level: ``backend``, ``model``, ...)."""
    unhonoured_hint: str
    """What to do instead of an option it cannot honour."""
    entry: str
    """Its entry module (an :class:`Entry`), imported by :meth:`load`."""
    keys: str | None = None
    """A module whose ``HONOURED`` paths the backend honours besides its sections: the
    table of the fields it maps to keys of its own (verl's config)."""

    def load(self) -> Entry:
        return cast(Entry, importlib.import_module(self.entry))

    def honours(self, path: str) -> bool:
        """Whether the backend trains with the run-configuration field ``path``."""
        if path.rpartition(".")[0] in self.sections:
            return True
        return self.keys is not None and path in importlib.import_module(self.keys).HONOURED


BACKENDS: dict[str, Backend] = {
    backend.name: backend
    for backend in (
        Backend(
            name="local",
            help="this process, CPU or one GPU",
            sections=("", "algorithm", "sampling", "schedule", "lora", "local"),
            unhonoured_hint="it is for --backend verl",
            entry="trainer.backends.local.entry",
        ),
        Backend(
            name="verl",
            help="GPUs: verl with Ray, FSDP and vLLM",
            sections=("", "verl"),
            keys="trainer.backends.verl.keys",
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
