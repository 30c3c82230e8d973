"""Start, stop and inspect the embedded services together, and record their URLs.

``<data_dir>/services.json`` holds the URLs of the embedded services that run; it is
written after a start and removed after a stop, so :meth:`Settings.resolved_database_url`
finds a running database or says clearly that none runs. A service whose URL is
configured (``WSRL_DATABASE_URL`` / ``WSRL_REDIS_URL``) is never started here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from app.config import Settings
from app.embedded.ports import PortInUseError, port_is_free
from app.embedded.postgres import PORT_SETTING as PG_PORT_SETTING
from app.embedded.postgres import EmbeddedPostgres
from app.embedded.redis import PORT_SETTING as REDIS_PORT_SETTING
from app.embedded.redis import EmbeddedRedis


@dataclass(frozen=True)
class ServiceReport:
    """One service's state: started, running, external, stopped or not running."""

    name: str
    state: str
    url: str | None


def _data_dir(settings: Settings) -> Path:
    return settings.data_dir.expanduser().resolve()


def start_services(settings: Settings) -> list[ServiceReport]:
    """Start what is not configured externally; idempotent (a running service is kept)."""
    data_dir = _data_dir(settings)
    data_dir.mkdir(parents=True, exist_ok=True)
    _check_ports(settings, data_dir)
    reports: list[ServiceReport] = []
    recorded: dict[str, str] = {}
    if settings.database_url:
        reports.append(ServiceReport("postgres", "external", settings.database_url))
    else:
        postgres = EmbeddedPostgres(data_dir)
        was_running = postgres.status().running
        url = postgres.start(settings.embedded_postgres_port)
        recorded["database_url"] = url
        reports.append(ServiceReport("postgres", "running" if was_running else "started", url))
    if settings.redis_url:
        reports.append(ServiceReport("redis", "external", settings.redis_url))
    else:
        redis_server = EmbeddedRedis(data_dir)
        was_running = redis_server.status().running
        url = redis_server.start(settings.embedded_redis_port)
        recorded["redis_url"] = url
        reports.append(ServiceReport("redis", "running" if was_running else "started", url))
    _write_services_file(settings.services_file(), recorded)
    return reports


def _check_ports(settings: Settings, data_dir: Path) -> None:
    """Fail before starting anything when a service to start finds its port taken."""
    postgres_down = not settings.database_url and not EmbeddedPostgres(data_dir).status().running
    if postgres_down and not port_is_free(settings.embedded_postgres_port):
        raise PortInUseError("PostgreSQL", settings.embedded_postgres_port, PG_PORT_SETTING)
    redis_down = not settings.redis_url and not EmbeddedRedis(data_dir).status().running
    if redis_down and not port_is_free(settings.embedded_redis_port):
        raise PortInUseError("Redis", settings.embedded_redis_port, REDIS_PORT_SETTING)


def stop_services(settings: Settings) -> list[ServiceReport]:
    """Stop the embedded services under the data dir (external ones are left alone)."""
    data_dir = _data_dir(settings)
    reports = [
        ServiceReport(
            "postgres", "stopped" if EmbeddedPostgres(data_dir).stop() else "not running", None
        ),
        ServiceReport(
            "redis", "stopped" if EmbeddedRedis(data_dir).stop() else "not running", None
        ),
    ]
    settings.services_file().unlink(missing_ok=True)
    return reports


def services_status(settings: Settings) -> list[ServiceReport]:
    """The state of each service as it is now (not as services.json remembers it)."""
    data_dir = _data_dir(settings)
    reports = []
    if settings.database_url:
        reports.append(ServiceReport("postgres", "external", settings.database_url))
    else:
        status = EmbeddedPostgres(data_dir).status()
        state = "running" if status.running else "not running"
        reports.append(ServiceReport("postgres", state, status.url()))
    if settings.redis_url:
        reports.append(ServiceReport("redis", "external", settings.redis_url))
    else:
        redis_status = EmbeddedRedis(data_dir).status()
        state = "running" if redis_status.running else "not running"
        reports.append(ServiceReport("redis", state, redis_status.url()))
    return reports


def _write_services_file(path: Path, urls: dict[str, str]) -> None:
    """Atomic write, so a process reading it never sees half a file."""
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(urls, indent=2) + "\n")
    tmp.replace(path)
