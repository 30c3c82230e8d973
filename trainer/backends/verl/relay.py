"""A fixed address for verl's vLLM server that workers on other hosts can reach.

verl 0.9.1 starts each vLLM replica's HTTP server on the node's IP and a port the OS picks
(``vLLMHttpServer.launch_server`` -> ``verl.workers.rollout.utils.run_uvicorn``, which binds
port 0) and has no option for either. Such a port cannot be published by Docker or opened
in a firewall in advance, and a container's IP is not routable from other hosts.
:class:`PortRelay` listens on a fixed port and passes each connection through to verl's
server byte for byte (keep-alive and streamed answers unchanged); the trainer publishes
:func:`published_base_url`, built from ``webshop.endpoint`` of the verl config.

verl runs one vLLM replica per ``tensor_model_parallel_size`` GPUs (8 on an 8-GPU node
at TP 1), each with its own server. The relay spreads new connections over all of them,
in turn, and skips one it cannot reach; a worker's kept-alive connection stays on its
replica. All replicas get the same weights at each sync, so any of them serves the
published version.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import logging
import threading
from collections.abc import Sequence
from urllib.parse import urlsplit

logger = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024


def split_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of a ``host:port`` or ``[ipv6]:port`` address, as verl writes them."""
    parts = urlsplit(f"//{address}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise ValueError(f"not a host:port address: {address!r}")
    return parts.hostname, port


def published_base_url(
    verl_address: str, advertise_host: str | None, port: int | None, node_host: str
) -> str:
    """The ``base_url`` workers are given.

    With a relay (``port`` set): ``advertise_host`` (else ``node_host``, the IP of the node
    the relay runs on) and ``port``. Without one: verl's own address, its host replaced by
    ``advertise_host`` when given.
    """
    verl_host, verl_port = split_address(verl_address)
    if port is None:
        host, port = advertise_host or verl_host, verl_port
    else:
        host = advertise_host or node_host
    if _is_ipv6(host):
        host = f"[{host}]"
    return f"http://{host}:{port}/v1"


def _is_ipv6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).version == 6
    except ValueError:
        return False


class PortRelay:
    """Forwards every TCP connection on ``listen_host:port`` to one of ``targets``
    (``host:port`` each, taken in turn), on an event loop in a daemon thread of its own, so
    the training loop never blocks it. ``port`` 0 takes a free port (:attr:`port` is the
    bound one after :meth:`start`)."""

    def __init__(self, listen_host: str, port: int, targets: str | Sequence[str]) -> None:
        self.listen_host = listen_host
        self.port = port
        addresses = [targets] if isinstance(targets, str) else list(targets)
        if not addresses:
            raise ValueError("the policy relay needs at least one vLLM server address")
        self.targets = [split_address(a) for a in addresses]
        self._turn = itertools.cycle(range(len(self.targets)))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="policy-relay", daemon=True
        )
        self._server: asyncio.Server | None = None

    def start(self) -> PortRelay:
        """Listens; raises ``OSError`` with the setting to change when the port is taken."""
        self._thread.start()
        listening = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._relay, self.listen_host, self.port), self._loop
        )
        try:
            self._server = listening.result(timeout=30)
        except OSError as exc:
            self._stop_loop()
            raise OSError(
                exc.errno,
                f"the policy relay cannot listen on {self.listen_host}:{self.port} ({exc}); "
                "set webshop.endpoint.port (Compose: TRAINER_POLICY_PORT) to a free port",
            ) from exc
        self.port = self._server.sockets[0].getsockname()[1]
        logger.info(
            "policy relay %s:%d -> %s",
            self.listen_host,
            self.port,
            ", ".join(f"{host}:{port}" for host, port in self.targets),
        )
        return self

    def stop(self) -> None:
        """Stops listening and drops the open connections; idempotent."""
        if self._server is not None:
            server, self._server = self._server, None

            async def close() -> None:
                server.close()
                open_connections = asyncio.all_tasks() - {asyncio.current_task()}
                for task in open_connections:
                    task.cancel()
                await asyncio.gather(*open_connections, return_exceptions=True)
                await server.wait_closed()

            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._stop_loop()

    def _stop_loop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._thread.is_alive() and not self._loop.is_closed():
            self._loop.close()

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to the next target in turn, or to the first one after it that
        answers; None when none does."""
        for _ in self.targets:
            host, port = self.targets[next(self._turn)]
            try:
                return await asyncio.open_connection(host, port)
            except OSError as exc:
                logger.warning("policy relay: %s:%d unreachable (%s)", host, port, exc)
        return None

    async def _relay(self, client: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        opened = await self._open()
        if opened is None:
            await _close(client_out)
            return
        server, server_out = opened
        try:
            await asyncio.gather(_pipe(client, server_out), _pipe(server, client_out))
        finally:
            await asyncio.gather(_close(server_out), _close(client_out))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copies until end of stream, then passes the end on (a half-close stays one)."""
    try:
        while chunk := await reader.read(CHUNK_BYTES):
            writer.write(chunk)
            await writer.drain()
        # The other side may be gone already (reset by its peer): asyncio's own loop then
        # ignores write_eof, uvloop's (the loop of Ray's actors) raises RuntimeError.
        if writer.can_write_eof() and not writer.is_closing():
            writer.write_eof()
    except OSError:  # the peer reset: closing the other side ends the opposite pipe too
        writer.close()


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
