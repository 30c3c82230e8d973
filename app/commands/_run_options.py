"""The options of ``wsrl train`` and ``wsrl dev``, generated from the run configuration.

Each field of :class:`trainer.config.RunConfig` (its top level and its sections) is one
option: ``--<name>`` (a section's prefix, or the field's own ``flag``, see
:func:`trainer.config.knob`), its default and its help. A field can also be set in a
config file (``--config-file run.toml`` or ``.yaml``: top-level keys and one table per
section, as ``--print-config`` names them) and in the environment (``WSRL_TRAIN_`` and the
option's name: ``WSRL_TRAIN_LR``, ``WSRL_TRAIN_LORA_RANK``). A flag wins over the
environment, which wins over the file; a ``preset`` sets the algorithm's fields that none
of them set. :func:`collect` says where each value came from.

A command's parameters are named by the field's path (``algorithm__lr``), so a value
travels from its option to :meth:`RunConfig.build` by its path, with no table between.
"""

from __future__ import annotations

import inspect
import shlex
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from functools import cache
from pathlib import Path
from typing import Annotated, Any

import typer

from trainer.config import PRESETS, RunConfig, help_of

ENV_PREFIX = "WSRL_TRAIN_"
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class RunOptionError(ValueError):
    """A value of the run configuration that cannot be read (the message names where)."""


@dataclass(frozen=True)
class RunOption:
    """One field of the run configuration as an option."""

    path: str
    """``algorithm.lr``; a top-level field: ``model``."""
    name: str
    """The option's name: ``lr``, ``lora-rank``."""
    kind: type
    """The value's type: int, float, str, bool, Path or tuple (of str)."""
    optional: bool
    repeat: bool
    """A tuple given by repeating the option (``--override A --override B``)."""
    help: str
    default: Any

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    @property
    def param(self) -> str:
        """The command's parameter: the path, identifier-shaped."""
        return self.path.replace(".", "__")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper().replace("-", "_")

    def parameter(self, default: Any) -> inspect.Parameter:
        """The typer parameter of this option, defaulting to ``default``."""
        decl = f"{self.flag}/--no-{self.name}" if self.kind is bool else self.flag
        info = typer.Option(decl, help=self.help, rich_help_panel=self.panel)
        if self.repeat:
            annotation: Any = list[str] | None
            default = None
        elif self.kind is tuple:
            annotation, default = str, ",".join(default)
        else:
            annotation = self.kind | None if self.optional else self.kind
        return inspect.Parameter(
            self.param,
            inspect.Parameter.KEYWORD_ONLY,
            default=default,
            annotation=Annotated[annotation, info],
        )

    @property
    def panel(self) -> str:
        section = self.path.rpartition(".")[0]
        return f"Run: {section}" if section else "Run"

    def value(self, given: Any, where: str) -> Any:
        """``given`` (a flag's, a file's or an environment variable's value) as the field's
        value; :class:`RunOptionError` names ``where`` when it cannot be one."""
        if isinstance(given, str) and not (self.kind is str or self.kind is Path):
            return self._parse(given, where)
        if self.kind is tuple:
            if isinstance(given, list | tuple):
                return tuple(str(v) for v in given)
            raise RunOptionError(f"{where}: a list of strings, not {given!r}")
        if given is None and self.optional:
            return None
        if self.kind is Path:
            return Path(given)
        if self.kind is float and isinstance(given, int) and not isinstance(given, bool):
            return float(given)
        if not isinstance(given, self.kind) or (self.kind is int and isinstance(given, bool)):
            raise RunOptionError(f"{where}: a {self.kind.__name__}, not {given!r}")
        return given

    def _parse(self, text: str, where: str) -> Any:
        if self.optional and text.strip().lower() in ("", "none", "null"):
            return None
        if self.kind is tuple:
            parts = shlex.split(text) if self.repeat else text.split(",")
            return tuple(p.strip() for p in parts if p.strip())
        if self.kind is bool:
            if text.strip().lower() in TRUE + FALSE:
                return text.strip().lower() in TRUE
            raise RunOptionError(f"{where}={text!r}: use true or false")
        try:
            return self.kind(text.strip())
        except ValueError:
            raise RunOptionError(f"{where}={text!r}: not a {self.kind.__name__}") from None


def _option(cls: type, path: str, f: Any, hint: Any, prefix: str) -> RunOption:
    args = typing.get_args(hint)
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if optional else hint
    kind = tuple if typing.get_origin(base) is tuple else base
    default = f.default if f.default is not MISSING else f.default_factory()
    name = f.metadata.get("flag") or f.name.replace("_", "-")
    return RunOption(
        path,
        prefix + name,
        kind,
        optional,
        bool(f.metadata.get("repeat")),
        help_of(cls, f.name),
        default,
    )


@cache
def run_options() -> tuple[RunOption, ...]:
    """Every field of :class:`RunConfig` as an option, in the class's order."""
    out: list[RunOption] = []
    top_hints = typing.get_type_hints(RunConfig)
    for f in fields(RunConfig):
        if "flag_prefix" not in f.metadata:
            out.append(_option(RunConfig, f.name, f, top_hints[f.name], ""))
            continue
        cls = f.default_factory
        hints = typing.get_type_hints(cls)
        for inner in fields(cls):  # type: ignore[arg-type]
            path = f"{f.name}.{inner.name}"
            prefix = f.metadata["flag_prefix"]
            out.append(_option(cls, path, inner, hints[inner.name], prefix))
    names = [o.name for o in out]
    doubled = {n for n in names if names.count(n) > 1}
    if doubled:
        raise RuntimeError(f"two run-configuration fields share the option(s) {sorted(doubled)}")
    return tuple(out)


def by_path() -> dict[str, RunOption]:
    return {o.path: o for o in run_options()}


def signature(
    defaults: Mapping[str, Any], options: tuple[RunOption, ...], *own: inspect.Parameter
) -> inspect.Signature:
    """A command's signature: ``ctx``, then each of ``options`` (at ``defaults``, else the
    field's), then the command's ``own`` parameters."""
    ctx = inspect.Parameter(
        "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
    )
    generated = [o.parameter(defaults.get(o.path, o.default)) for o in options]
    return inspect.Signature([ctx, *generated, *own])


def typed_values(ctx: typer.Context, values: Mapping[str, Any]) -> dict[str, Any]:
    """The options the user typed (their parameters' values), by path."""
    out = {}
    for option in run_options():
        source = ctx.get_parameter_source(option.param)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            raw = values[option.param]
            out[option.path] = option.value(raw, option.flag) if raw is not None else None
    return out


@dataclass
class Collected:
    """The values the user set, by path, and where each was set (``preset NAME`` for the
    algorithm fields a preset set)."""

    values: dict[str, Any]
    sources: dict[str, str]

    def set_by_user(self) -> list[str]:
        """The paths set by a flag, the environment or a file (a preset's excluded)."""
        return [p for p, s in self.sources.items() if not s.startswith("preset ")]

    def label(self, path: str) -> str:
        """How the user named ``path`` where they set it: ``--lr``, ``WSRL_TRAIN_LR``,
        ``algorithm.lr in run.toml``."""
        source = self.sources.get(path, "")
        option = by_path()[path]
        if source.startswith("flag "):
            return option.flag
        if source.startswith("env "):
            return option.env
        if source.startswith("file "):
            return f"{path} in {source.removeprefix('file ')}"
        return path

    def build(self) -> RunConfig:
        """The validated run configuration; a bad value's error names where it was set."""
        try:
            return RunConfig.build(self.values)
        except ValueError as exc:
            raise RunOptionError(self._named(str(exc))) from None

    def _named(self, message: str) -> str:
        """``lr=0 must be ...`` -> ``--lr=0 must be ...``, ``WSRL_TRAIN_LR=0 must be ...``,
        or ``algorithm.lr=0 must be ... (in run.toml)``: where the user set it."""
        head = message.split("=")[0].split(":")[0]
        for path in self.sources:
            if path.rpartition(".")[2] == head:
                source = self.sources[path]
                if source.startswith("file "):
                    return f"{path}{message[len(head) :]} (in {source.removeprefix('file ')})"
                return self.label(path) + message[len(head) :]
        return message


def collect(
    typed: Mapping[str, Any],
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    base: Mapping[str, Any] | None = None,
    base_source: str = "default",
) -> Collected:
    """What the user set: ``base`` (a command's own defaults, e.g. ``wsrl dev``'s), then
    the file, the environment and the typed flags, each over the one before."""
    values: dict[str, Any] = dict(base or {})
    sources = dict.fromkeys(values, base_source)
    if config_file is not None:
        for path, value in _file_values(config_file).items():
            values[path] = by_path()[path].value(value, f"{path} in {config_file}")
            sources[path] = f"file {config_file}"
    for option in run_options():
        text = (environ or {}).get(option.env)
        if text is not None:
            values[option.path] = option.value(text, option.env)
            sources[option.path] = f"env {option.env}"
    for path, value in typed.items():
        values[path] = value
        sources[path] = f"flag {by_path()[path].flag}"
    if "preset" in values and values["preset"] in PRESETS:
        for key in PRESETS[values["preset"]]:
            sources.setdefault(f"algorithm.{key}", f"preset {values['preset']}")
    return Collected(values, sources)


def _file_values(path: Path) -> dict[str, Any]:
    """A config file's values by path; an unknown key, section or format is an error."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise RunOptionError(f"--config-file {path}: {exc.strerror}") from None
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            raise RunOptionError(f"--config-file {path}: use a .toml or .yaml file")
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise RunOptionError(f"--config-file {path}: {exc}") from None
    except Exception as exc:  # yaml's errors
        raise RunOptionError(f"--config-file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise RunOptionError(f"--config-file {path}: a mapping of fields and sections")
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    unknown = sorted(set(flat) - set(by_path()))
    if unknown:
        raise RunOptionError(
            f"--config-file {path}: no field {', '.join(unknown)} in the run configuration "
            "(`wsrl train --print-config` lists them)"
        )
    return flat


def as_flags(values: Mapping[str, Any]) -> list[str]:
    """``values`` by path as the options that set them (for a child ``wsrl train``)."""
    out: list[str] = []
    options = by_path()
    for path, value in values.items():
        option = options[path]
        if value is None:
            continue
        if option.kind is bool:
            out.append(option.flag if value else f"--no-{option.name}")
        elif option.repeat:
            for item in value:
                out += [option.flag, str(item)]
        elif option.kind is tuple:
            out += [option.flag, ",".join(value)]
        else:
            out += [option.flag, str(value)]
    return out
