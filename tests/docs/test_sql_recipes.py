"""Every ```sql block of docs/operations.md runs through ``wsrl sql`` on a database with data."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers.trajectory_data import insert_dataset
from typer.testing import CliRunner

from app.cli import cli
from app.config import Settings, get_settings
from app.db import migrate
from app.db.session import make_engine

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
SQL_BLOCK = re.compile(r"```sql\n(.*?)```", re.DOTALL)


def recipe_queries() -> list[str]:
    return [block.strip() for block in SQL_BLOCK.findall(OPERATIONS.read_text())]


@pytest.fixture(scope="module")
def recipes_db(make_database: Callable[[], str]) -> Iterator[str]:
    url = make_database()
    migrate.upgrade(url)
    engine = make_engine(Settings(_env_file=None, database_url=url))
    insert_dataset(engine)
    engine.dispose()
    yield url


@pytest.fixture
def wsrl_on(recipes_db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    monkeypatch.setenv("WSRL_DATABASE_URL", recipes_db)
    get_settings.cache_clear()
    yield CliRunner()
    get_settings.cache_clear()


def test_operations_has_sql_recipes() -> None:
    assert len(recipe_queries()) >= 6


@pytest.mark.parametrize("query", recipe_queries(), ids=lambda q: q.split("\n")[0][:40])
def test_sql_recipe_runs_read_only_and_returns_rows(wsrl_on: CliRunner, query: str) -> None:
    result = wsrl_on.invoke(cli, ["sql", query, "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert rows, f"no rows from:\n{query}"
