"""Worker hosts on one machine: network namespaces on a bridge, as hosts on one LAN.

The head (this namespace) gets ``HEAD_IP`` on a bridge of its own; each worker host is a
network namespace with its own loopback and a veth whose other end is on the bridge, at
``10.213.0.(10 + i)``. Processes started with :meth:`WorkerHost.command` reach the head's
services only at ``HEAD_IP``, as a worker on another machine reaches them at its address.

Faults of a host's link act on the head's end of its veth: :meth:`WorkerHost.cut` takes it
down (packets dropped, connections stall, new ones time out), :meth:`WorkerHost.slow`
puts a token-bucket rate limit on it (``tc tbf``; this kernel has no ``netem`` delay).

Needs root (``ip netns``); :class:`HostsUnavailable` says so before anything is made.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

HEAD_IP = "10.213.0.1"
PREFIX_LEN = 24
SLOW_RATE = "256kbit"

log = logging.getLogger(__name__)


class HostsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, or no ``ip``)."""


def _ip(*args: str, netns: str | None = None) -> None:
    command = ["ip", *args] if netns is None else ["ip", "netns", "exec", netns, "ip", *args]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {result.stderr.strip()}")


def _tc(*args: str) -> None:
    result = subprocess.run(["tc", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"tc {' '.join(args)}: {result.stderr.strip()}")


def check_available() -> None:
    if os.geteuid() != 0:
        raise HostsUnavailable("worker hosts are network namespaces: run as root")
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise HostsUnavailable(f"{' and '.join(missing)} not found (Debian: iproute2)")


@dataclass
class WorkerHost:
    """One namespace: ``name`` (also its Celery node's host part), ``ip`` on the bridge."""

    name: str
    ip: str
    link: str  # the head's end of the veth

    def command(self, args: Sequence[str]) -> list[str]:
        """``args`` run inside this host (``ip netns exec`` execs them: same pid)."""
        return ["ip", "netns", "exec", self.name, *args]

    def cut(self) -> None:
        _ip("link", "set", self.link, "down")

    def mend(self) -> None:
        _ip("link", "set", self.link, "up")

    def slow(self, rate: str = SLOW_RATE) -> None:
        _tc("qdisc", "replace", "dev", self.link, "root", "tbf", "rate", rate,
            "burst", "16kb", "latency", "2s")  # fmt: skip

    def unslow(self) -> None:
        _tc("qdisc", "del", "dev", self.link, "root")


class HostNetwork:
    """The bridge and ``count`` worker hosts; :meth:`remove` deletes them all."""

    def __init__(self, owner: int, count: int) -> None:
        """``owner``: the pid of the run that makes them, part of every name, so that a
        later run can tell a network whose run was killed from one whose run is alive."""
        check_available()
        tag = str(owner)
        self.bridge = f"wsrl{tag}br"
        self.hosts = [
            WorkerHost(f"wsrl{tag}h{i}", f"10.213.0.{10 + i}", f"wsrl{tag}v{i}")
            for i in range(count)
        ]

    def create(self) -> HostNetwork:
        taken = subprocess.run(
            ["ip", "-o", "addr", "show", "to", HEAD_IP], capture_output=True, text=True
        ).stdout.split()
        if taken:
            owner = re.fullmatch(r"wsrl(\d+)br", taken[1])
            if owner is None or _chaos_alive(int(owner[1])):
                raise HostsUnavailable(
                    f"{HEAD_IP} is already on {taken[1]} (another chaos run): stop it, or "
                    f"remove it with `ip link del {taken[1]}`"
                )
            _remove_left_by(owner[1])
        try:
            _ip("link", "add", "name", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{HEAD_IP}/{PREFIX_LEN}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for host in self.hosts:
                inner = f"{host.link}n"
                _ip("netns", "add", host.name)
                _ip("link", "add", host.link, "type", "veth", "peer", "name", inner)
                _ip("link", "set", inner, "netns", host.name)
                _ip("link", "set", host.link, "master", self.bridge)
                _ip("link", "set", host.link, "up")
                _ip("link", "set", "lo", "up", netns=host.name)
                _ip("addr", "add", f"{host.ip}/{PREFIX_LEN}", "dev", inner, netns=host.name)
                _ip("link", "set", inner, "up", netns=host.name)
        except RuntimeError:
            self.remove()
            raise
        return self

    def remove(self) -> None:
        """Deletes what exists of the hosts and the bridge (a deleted namespace takes its
        veth with it)."""
        for host in self.hosts:
            subprocess.run(["ip", "netns", "del", host.name], capture_output=True, check=False)
            subprocess.run(["ip", "link", "del", host.link], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)


def _chaos_alive(pid: int) -> bool:
    """Whether ``pid`` is a running chaos run (a reused pid running something else is not)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"chaos" in command


def _remove_left_by(tag: str) -> None:
    """Deletes the hosts and bridge of a run that was killed before it could remove them."""
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for name in re.findall(rf"^(wsrl{tag}h\d+)\b", spaces, re.MULTILINE):
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for name in re.findall(rf"^\d+: (wsrl{tag}v\d+)[@:]", links, re.MULTILINE):
        subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
    subprocess.run(["ip", "link", "del", f"wsrl{tag}br"], capture_output=True, check=False)
    log.warning("removed the worker hosts of chaos run %s, which was killed before it could", tag)
