"""Command groups of the ``wsrl`` CLI, one module per group.

Each module defines ``register(cli: typer.Typer) -> None``. Modules import heavy
dependencies (torch, transformers, the catalog) inside their commands, so that
``wsrl --help`` stays instant and an install without the ``train`` extra still works.
"""
