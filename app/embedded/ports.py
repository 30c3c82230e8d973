"""Port checks shared by the embedded services."""

from __future__ import annotations

import os
import socket


class PortInUseError(RuntimeError):
    """A port an embedded service needs is taken by another program."""

    def __init__(self, service: str, port: int, setting: str) -> None:
        super().__init__(
            f"Cannot start the embedded {service}: port {port} on 127.0.0.1 is already in use "
            f"by another program. Set {setting} to a free port (or stop that program)."
        )
        self.port = port
        self.setting = setting


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on ``host:port`` now (SO_REUSEADDR, as servers bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free now (the OS picks it; another program may take it later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
