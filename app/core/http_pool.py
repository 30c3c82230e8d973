"""A small keep-alive HTTP/1.1 client for the worker's hot path (env steps, LLM calls).

Why not httpx or the ``openai`` client: a rollout makes about two requests per step, and
on a 2-core machine their client-side CPU decides how many episodes fit. Measured against
one local server (1,500-byte JSON answers, loaded machine), one request cost about 2.2 ms
of CPU through the ``openai`` client's ``post``, 1.4 ms with ``httpx.Client``, 0.2 to
0.3 ms with ``http.client`` (most of it its e-mail header parser) and 0.07 ms written
directly on a socket with the ``httptools`` parser (the one uvicorn uses), which is what
this module does. The features the others add (HTTP/2, cookies, redirects, auth flows,
proxies, streaming) are not used here.

Connections are kept alive and shared by the threads of a process: each request takes an
idle connection (or opens one) and puts it back once the answer is read. A pooled
connection the server has closed (its keep-alive timeout) is readable at EOF and is
dropped before use (checked once it has been idle for ``fresh_s``); if a reused
connection still fails before any byte of the answer arrives (the server closed it just
as the request was sent), the request is sent once more on a new connection, as
HTTP/1.1 clients do for a connection closed while idle.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import httptools
import orjson

RECV_BYTES = 256 * 1024
# A connection idle for less than this is reused without the readability check: servers
# close idle connections after seconds (uvicorn: 5 s), and the retry below covers one
# that closes sooner.
FRESH_S = 1.0


class HttpError(Exception):
    """No (complete) HTTP answer: the server could not be reached or broke the exchange."""


class HttpTimeout(HttpError):
    """Connecting, sending or reading took longer than the timeout."""


class _StaleConnection(HttpError):
    """A reused connection failed before any byte of the answer: closed while idle."""


@dataclass(frozen=True)
class HttpResponse:
    """A complete answer (the body is read before the connection is reused)."""

    status_code: int
    reason_phrase: str
    content: bytes

    def json(self) -> Any:
        """The body as JSON; raises ``ValueError`` (``orjson.JSONDecodeError``) if it is not."""
        return orjson.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


class _Answer:
    """``httptools`` callbacks collecting one response."""

    __slots__ = ("body", "complete", "framed", "headers_done", "keep_alive", "parser", "reason")

    def __init__(self) -> None:
        # A cycle (the parser holds its callbacks), broken by ``_exchange`` when done.
        self.parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self.keep_alive = False
        self.body: list[bytes] = []
        self.reason = b""
        self.framed = False
        self.headers_done = False
        self.complete = False

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        # The parser forgets this once the message is complete.
        self.keep_alive = self.parser is not None and self.parser.should_keep_alive()
        self.headers_done = True

    def on_body(self, data: bytes) -> None:
        self.body.append(data)

    def on_message_complete(self) -> None:
        self.complete = True


def _closed_by_peer(sock: socket.socket) -> bool:
    """True when an idle connection cannot carry a request: its socket is readable (EOF
    from a server that closed it, or bytes nobody asked for)."""
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


class HttpPool:
    """Keep-alive connections to one origin, shared by threads; close it when done.

    ``base_url`` may carry a path prefix (``http://host:8000/v1``): request paths are
    appended to it. ``timeout_s`` bounds connecting and each send or receive.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float,
        headers: dict[str, str] | None = None,
        max_idle: int = 256,
        fresh_s: float = FRESH_S,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.base_url = base_url
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._prefix = parts.path.rstrip("/")
        self._timeout_s = timeout_s
        fixed = {
            "Host": parts.netloc,
            "Accept": "application/json",
            "Accept-Encoding": "identity",
            **(headers or {}),
        }
        self._head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()).encode("latin-1")
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self._idle: list[tuple[socket.socket, float]] = []
        self._max_idle = max_idle
        self._fresh_s = fresh_s
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
            self._closed = True
        for sock, _ in idle:
            sock.close()

    def __enter__(self) -> HttpPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
    ) -> HttpResponse:
        """Send one request and read the whole answer (any status is an answer).

        Raises :class:`HttpTimeout` or :class:`HttpError` when no complete answer came.
        """
        target = self._prefix + path
        if params:
            target += "?" + urlencode(params)
        head = f"{method} {target} HTTP/1.1\r\n".encode("latin-1") + self._head
        if json is not None:
            body = orjson.dumps(json)
            head += b"Content-Type: application/json\r\n"
        else:
            body = b""
        if body or method in ("POST", "PUT", "PATCH"):
            head += b"Content-Length: %d\r\n" % len(body)
        message = head + b"\r\n" + body
        sock, reused = self._take()
        try:
            try:
                return self._exchange(sock, message, reused=reused)
            except _StaleConnection:
                sock = self._connect()
                return self._exchange(sock, message, reused=False)
        except TimeoutError as exc:
            sock.close()
            raise HttpTimeout(f"timed out after {self._timeout_s:g}s") from exc
        except HttpError:
            sock.close()
            raise
        except (OSError, httptools.HttpParserError) as exc:
            sock.close()
            raise HttpError(str(exc) or type(exc).__name__) from exc
        except BaseException:
            sock.close()
            raise

    def _connect(self) -> socket.socket:
        try:
            sock = socket.create_connection((self._host, self._port), timeout=self._timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ssl is not None:
                sock = self._ssl.wrap_socket(sock, server_hostname=self._host)
        except TimeoutError as exc:
            raise HttpTimeout(f"connect timed out after {self._timeout_s:g}s") from exc
        except OSError as exc:
            raise HttpError(str(exc) or type(exc).__name__) from exc
        return sock

    def _take(self) -> tuple[socket.socket, bool]:
        """An idle connection that looks alive (reused=True), or a new one."""
        while True:
            with self._lock:
                idle = self._idle.pop() if self._idle else None
            if idle is None:
                return self._connect(), False
            sock, since = idle
            if time.monotonic() - since < self._fresh_s or not _closed_by_peer(sock):
                return sock, True
            sock.close()

    def _give_back(self, sock: socket.socket) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self._max_idle:
                self._idle.append((sock, time.monotonic()))
                return
        sock.close()

    def _exchange(self, sock: socket.socket, message: bytes, *, reused: bool) -> HttpResponse:
        answer = _Answer()
        parser = answer.parser
        assert parser is not None
        received = False
        try:
            sock.sendall(message)
            while not answer.complete:
                data = sock.recv(RECV_BYTES)
                if not data:
                    if answer.headers_done and not answer.framed:
                        break  # the body ran to the end of the connection
                    raise ConnectionResetError("server closed the connection")
                received = True
                parser.feed_data(data)
        except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError) as exc:
            sock.close()
            if reused and not received:
                raise _StaleConnection(str(exc)) from exc
            raise HttpError(str(exc) or type(exc).__name__) from exc
        finally:
            answer.parser = None
        response = HttpResponse(
            parser.get_status_code(),
            answer.reason.decode("latin-1"),
            b"".join(answer.body),
        )
        if answer.complete and answer.keep_alive:
            self._give_back(sock)
        else:
            sock.close()
        return response
