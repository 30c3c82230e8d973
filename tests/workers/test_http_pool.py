"""The worker's keep-alive HTTP client against real TCP servers that misbehave on purpose.

A raw socket server (not uvicorn) is used so that each test decides exactly when the
server answers, how it frames the body and when it closes the connection.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import pytest

from app.core.http_pool import HttpError, HttpPool, HttpTimeout

Handler = Callable[[socket.socket, int], None]


def _read_request(conn: socket.socket) -> bytes:
    """One request (headers + Content-Length body), or b"" when the client closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += conn.recv(65536)
    return head


def _answer(body: bytes, *, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


@contextmanager
def raw_server(handler: Handler) -> Iterator[tuple[str, list[int]]]:
    """Serve ``handler(conn, n)`` for the n-th accepted connection (0-based) on a thread;
    yields the base URL and the list of accepted connection numbers."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            number = len(accepted)
            accepted.append(number)
            threading.Thread(target=_run, args=(conn, number), daemon=True).start()

    def _run(conn: socket.socket, number: int) -> None:
        with conn, suppress(OSError):
            handler(conn, number)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", accepted
    finally:
        stop.set()
        thread.join(2)
        listener.close()


def _keep_alive(conn: socket.socket, number: int) -> None:
    while _read_request(conn):
        conn.sendall(_answer(b'{"n": %d}' % number))


def test_connections_are_reused_across_requests() -> None:
    with raw_server(_keep_alive) as (url, accepted), HttpPool(url, timeout_s=5) as pool:
        answers = [pool.request("POST", "/x", json={"i": i}).json() for i in range(5)]
    assert answers == [{"n": 0}] * 5
    assert accepted == [0]


def test_connection_closed_while_idle_is_replaced() -> None:
    def one_answer_then_close(conn: socket.socket, number: int) -> None:
        _read_request(conn)
        conn.sendall(_answer(b'{"n": %d}' % number))

    for fresh_s in (0.0, 60.0):  # found closed before use / on use (then sent again)
        with (
            raw_server(one_answer_then_close) as (url, accepted),
            HttpPool(url, timeout_s=5, fresh_s=fresh_s) as pool,
        ):
            first = pool.request("GET", "/x").json()
            time.sleep(0.2)  # the server's close reaches the pooled socket
            second = pool.request("GET", "/x").json()
        assert (first, second) == ({"n": 0}, {"n": 1})
        assert accepted == [0, 1]


def test_reused_connection_closed_as_the_request_is_sent_is_retried_once() -> None:
    def close_on_second_request(conn: socket.socket, number: int) -> None:
        _read_request(conn)
        conn.sendall(_answer(b'{"n": %d}' % number))
        if number == 0:
            _read_request(conn)  # closes without answering, as an idle timeout would
            return
        _keep_alive(conn, number)

    with raw_server(close_on_second_request) as (url, accepted), HttpPool(url, timeout_s=5) as pool:
        assert pool.request("POST", "/x", json={}).json() == {"n": 0}
        assert pool.request("POST", "/x", json={}).json() == {"n": 1}
    assert accepted == [0, 1]


def test_new_connection_closed_without_answer_is_an_error_not_a_retry() -> None:
    def hang_up(conn: socket.socket, number: int) -> None:
        _read_request(conn)

    with (
        raw_server(hang_up) as (url, accepted),
        HttpPool(url, timeout_s=5) as pool,
        pytest.raises(HttpError, match="closed"),
    ):
        pool.request("POST", "/x", json={})
    assert accepted == [0]


def test_chunked_and_connection_close_bodies_are_read_whole() -> None:
    def chunked_then_unframed(conn: socket.socket, number: int) -> None:
        _read_request(conn)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b'4\r\n{"a"\r\n4\r\n: 1}\r\n0\r\n\r\n'
        )
        _read_request(conn)
        conn.sendall(b'HTTP/1.1 503 Busy\r\nConnection: close\r\n\r\n{"b": 2}')

    with raw_server(chunked_then_unframed) as (url, _), HttpPool(url, timeout_s=5) as pool:
        assert pool.request("GET", "/x").json() == {"a": 1}
        busy = pool.request("GET", "/x")
    assert (busy.status_code, busy.reason_phrase, busy.json()) == (503, "Busy", {"b": 2})


def test_path_prefix_query_and_headers_are_sent() -> None:
    seen: list[bytes] = []

    def record(conn: socket.socket, number: int) -> None:
        seen.append(_read_request(conn))
        conn.sendall(_answer(b"{}"))

    with (
        raw_server(record) as (url, _),
        HttpPool(f"{url}/v1/", timeout_s=5, headers={"Authorization": "Bearer k"}) as pool,
    ):
        pool.request("GET", "/sessions/a", params={"steps": "true"})
    request_line, *headers = seen[0].split(b"\r\n")
    assert request_line == b"GET /v1/sessions/a?steps=true HTTP/1.1"
    assert b"Authorization: Bearer k" in headers


def test_silent_server_times_out() -> None:
    def never_answer(conn: socket.socket, number: int) -> None:
        _read_request(conn)
        time.sleep(2)

    with raw_server(never_answer) as (url, _), HttpPool(url, timeout_s=0.2) as pool:
        started = time.monotonic()
        with pytest.raises(HttpTimeout):
            pool.request("POST", "/x", json={})
    assert time.monotonic() - started < 1.5


def test_nothing_listening_is_an_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with HttpPool(f"http://127.0.0.1:{port}", timeout_s=1) as pool, pytest.raises(HttpError):
        pool.request("GET", "/x")


def test_threads_share_the_pool() -> None:
    with raw_server(_keep_alive) as (url, accepted), HttpPool(url, timeout_s=5) as pool:
        results: list[int] = []

        def work() -> None:
            for _ in range(20):
                results.append(pool.request("POST", "/x", json={}).status_code)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert results == [200] * 80
    assert len(accepted) <= 4
