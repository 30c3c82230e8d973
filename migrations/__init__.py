"""Alembic migrations: the only way the schema changes (see :mod:`app.db.migrate`).

A package so that it is installed with the project and ``wsrl db`` finds it anywhere.
"""
