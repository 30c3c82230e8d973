"""The ``wsrl`` command: joins the command groups of :mod:`app.commands`."""

from __future__ import annotations

import importlib
import logging
import os
import pkgutil

import typer

from app import commands
from app.commands import fail, service_failure
from app.logging import setup_logging

cli = typer.Typer(
    name="wsrl",
    help="webshop-rl: train LLM shopping agents on WebShop with reinforcement learning.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_command_groups() -> None:
    """Every module of app.commands registers its commands; adding a file adds a group (a
    module named ``_*`` is a helper of several commands, not a group)."""
    for module_info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"app.commands.{module_info.name}")
        module.register(cli)


_register_command_groups()


POSTGRES_CONNECT_TIMEOUT_S = "10"
"""How long a new Postgres connection may take, its handshake included, in this process and
the ones it starts (libpq's ``PGCONNECT_TIMEOUT``; a ``connect_timeout`` in the URL or the
variable set beforehand wins). psycopg's own default is 130 s: a URL naming a host that
drops packets, or a port where another kind of server listens, held a command that long."""


def main() -> None:
    os.environ.setdefault("PGCONNECT_TIMEOUT", POSTGRES_CONNECT_TIMEOUT_S)
    setup_logging()
    try:
        cli()
    except Exception as exc:
        message = service_failure(exc)
        if message is None:
            raise
        logging.getLogger(__name__).debug("the command stopped", exc_info=exc)
        raise SystemExit(fail(message).exit_code) from None


if __name__ == "__main__":
    main()
