"""Running the server: in the foreground (the CLI) or on a background thread (tests, benches).

uvicorn picks uvloop and httptools by itself when they are installed (``uvicorn[standard]``);
access logging is off because a line per step costs more than the step.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI

logger = logging.getLogger(__name__)


def _config(app: FastAPI, host: str, port: int, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        loop="auto",
        http="auto",
        timeout_keep_alive=30,
        backlog=4096,
        log_config=None,
    )


def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 3000) -> None:
    """Serve until interrupted (Ctrl-C / SIGTERM shut down gracefully)."""
    uvicorn.Server(_config(app, host, port, "info")).run()


@dataclass
class RunningServer:
    """A server on a background thread; ``url`` is its base URL."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread


@contextlib.contextmanager
def serve_in_thread(
    app: FastAPI, host: str = "127.0.0.1", startup_timeout_s: float = 30.0
) -> Iterator[RunningServer]:
    """Serve ``app`` on a free port on a daemon thread for the duration of the block.

    The socket is bound here, before the thread starts, so the port cannot be taken by
    anyone else in between; the block starts once uvicorn reports it has started.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(_config(app, host, port, "warning"))
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"webshop-server-{port}", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the env server did not start on {host}:{port}")
        time.sleep(0.01)
    try:
        yield RunningServer(url=f"http://{host}:{port}", server=server, thread=thread)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
