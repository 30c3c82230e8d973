"""The address the verl trainer publishes, and the relay that makes it reachable.

verl 0.9.1 puts vLLM's HTTP server on the node's IP and a random port; workers are given
``http://<advertise_host>:<webshop.endpoint.port>/v1`` instead, a relay passing that port
through to verl's server. The relay runs here on real sockets in front of a real HTTP
server (verl and vLLM are not needed)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import uvloop

from trainer.backends.verl.relay import PortRelay, published_base_url, split_address

VERL_ADDRESS = "172.18.0.7:41873"  # a container IP and the port the OS gave vLLM


def test_with_a_relay_workers_are_sent_to_the_advertised_host_and_fixed_port() -> None:
    url = published_base_url(VERL_ADDRESS, "gpu-box.lan", 8200, node_host="172.18.0.7")
    assert url == "http://gpu-box.lan:8200/v1"


def test_without_an_advertised_host_the_relays_node_is_published() -> None:
    assert published_base_url(VERL_ADDRESS, None, 8200, "10.0.0.5") == "http://10.0.0.5:8200/v1"


def test_without_a_relay_verls_own_port_is_published() -> None:
    assert published_base_url(VERL_ADDRESS, None, None, "10.0.0.5") == f"http://{VERL_ADDRESS}/v1"
    renamed = published_base_url(VERL_ADDRESS, "trainer-gpu", None, "10.0.0.5")
    assert renamed == "http://trainer-gpu:41873/v1"


def test_ipv6_addresses_are_bracketed() -> None:
    assert split_address("[fd00::7]:41873") == ("fd00::7", 41873)
    assert (
        published_base_url("[fd00::7]:41873", None, 8200, "fd00::7") == "http://[fd00::7]:8200/v1"
    )


@pytest.mark.parametrize("address", ["172.18.0.7", "172.18.0.7:port", ":8200"])
def test_an_address_without_host_and_port_is_an_error(address: str) -> None:
    with pytest.raises(ValueError, match="host:port"):
        split_address(address)


def test_the_composed_config_publishes_its_endpoint_settings() -> None:
    pytest.importorskip("verl")
    from trainer.backends.verl.config import load_config

    endpoint = load_config("fast", ["webshop.endpoint.advertise_host=gpu-box.lan"]).webshop.endpoint
    url = published_base_url(VERL_ADDRESS, endpoint.advertise_host, endpoint.port, "172.18.0.7")
    assert url == "http://gpu-box.lan:8200/v1"


class _Completions(BaseHTTPRequestHandler):
    """Answers like an OpenAI-compatible server: the request echoed back, padded large."""

    protocol_version = "HTTP/1.1"  # keep-alive, as vLLM's uvicorn

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        answer = json.dumps(
            {
                "echo": body,
                "port": self.server.server_address[1],
                "token_ids": list(range(100_000)),
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def vllm_like_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Completions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_relay_passes_requests_and_large_answers_through(vllm_like_server: str) -> None:
    relay = PortRelay("127.0.0.1", 0, vllm_like_server).start()
    try:
        url = published_base_url(vllm_like_server, "127.0.0.1", relay.port, "unused")
        prompt = "x" * 300_000
        with httpx.Client(base_url=url, timeout=10) as client:
            for turn in range(2):  # two calls on one kept-alive connection
                response = client.post("/chat/completions", json={"prompt": prompt, "n": turn})
                assert response.status_code == 200
                assert response.json()["echo"] == {"prompt": prompt, "n": turn}
                assert len(response.json()["token_ids"]) == 100_000
    finally:
        relay.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"{url}/chat/completions", json={}, timeout=2)


def test_a_taken_port_names_the_setting_to_change(vllm_like_server: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=r"webshop\.endpoint\.port"):
            PortRelay("127.0.0.1", port, vllm_like_server).start()


def _serving(servers: list) -> str:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Completions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    servers.append(server)
    return f"127.0.0.1:{server.server_address[1]}"


def test_connections_are_spread_over_every_replica_and_a_dead_one_is_skipped() -> None:
    """verl serves from one vLLM replica per TP group: the relay must reach all of them."""
    servers: list[ThreadingHTTPServer] = []
    replicas = [_serving(servers), _serving(servers)]
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{closed.getsockname()[1]}"  # nothing listens there
    relay = PortRelay("127.0.0.1", 0, [replicas[0], dead, replicas[1]]).start()
    seen: list[int] = []
    try:
        url = published_base_url(replicas[0], "127.0.0.1", relay.port, "unused")
        for turn in range(6):  # a new connection each time
            with httpx.Client(base_url=url, timeout=10) as client:
                response = client.post("/chat/completions", json={"n": turn})
                assert response.status_code == 200 and response.json()["echo"] == {"n": turn}
                seen.append(response.json()["port"])
    finally:
        relay.stop()
        for server in servers:
            server.shutdown()
            server.server_close()
    ports = [int(r.rsplit(":", 1)[1]) for r in replicas]
    assert sorted(set(seen)) == sorted(ports), seen
    assert seen.count(ports[0]) == seen.count(ports[1]) == 3


def test_a_relay_without_replicas_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        PortRelay("127.0.0.1", 0, [])


@pytest.fixture(params=["asyncio", "uvloop"])
def loop_policy(request: pytest.FixtureRequest) -> Iterator[str]:
    """The relay's loop comes from the process's policy: Ray's actors run uvloop's."""
    if request.param == "uvloop":
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    yield request.param
    asyncio.set_event_loop_policy(None)


def test_a_server_that_resets_its_connection_ends_it_without_an_error(
    loop_policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Seen on a GPU: vLLM's side of a connection reset, then the worker's side closing,
    raised from the relay's handler under uvloop ("Unhandled exception in
    client_connected_cb ... the handler is closed")."""
    listener = socket.create_server(("127.0.0.1", 0))

    def reset_each_connection() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(1024)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()  # a reset, not a FIN

    threading.Thread(target=reset_each_connection, daemon=True).start()
    relay = PortRelay("127.0.0.1", 0, f"127.0.0.1:{listener.getsockname()[1]}").start()
    try:
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", relay.port), timeout=5) as client:
                client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n\r\n")
                time.sleep(0.2)
                with contextlib.suppress(OSError):  # the relay may have closed it first
                    client.shutdown(socket.SHUT_WR)
                    client.recv(1024)
        time.sleep(0.3)
    finally:
        relay.stop()
        listener.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
