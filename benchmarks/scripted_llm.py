"""Scripted LLM server: added latency under concurrency, and the agent's LLM call overhead.

Starts ``wsrl scripted-llm --policy rule`` as a separate process on a free port (so the
load generator never shares a GIL with the server) and measures:

1. concurrency: ``--rounds`` waves of ``--concurrency`` simultaneous chat completions on
   warm keep-alive connections (a minimal asyncio HTTP client), each with an
   agent-shaped prompt (a results page, 4 past steps, token ids and logprobs asked for).
   Prints wall time, calls/s and the p50/p95/p99 of per-call latency next to the
   configured ``--latency-ms``: with an async server every call takes about latency_ms
   instead of queueing. The client shares the machine's cores with the server;
2. client overhead: p50 of one :class:`workers.llm_client.LLMClient` call at latency 0, one
   after the other (parse + token capture + HTTP on localhost).

    .venv/bin/python benchmarks/scripted_llm.py --concurrency 128 --rounds 8 --latency-ms 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time

import httpx

from app.config import Settings
from app.core.agent import HistoryStep
from app.environments.webshop.agent import build_messages
from workers.llm_client import LLMClient

RESULTS_OBS = "Instruction: [SEP] i need a red desk lamp [SEP] Back to Search [SEP] " + (
    "Page 1 (Total results: 50) [SEP] Next > [SEP] "
    + " [SEP] ".join(
        f"B0000000{i:02d} [SEP] Desk Lamp Model {i} With Adjustable Arm [SEP] $2{i}.99"
        for i in range(10)
    )
)
RESULTS_PAGE = {
    "has_search_bar": False,
    "clickables": ["back to search", "next >", *[f"b0000000{i:02d}" for i in range(10)]],
}
HISTORY = [HistoryStep(n, f"search[red desk lamp {n}]", RESULTS_OBS) for n in range(1, 5)]
MESSAGES = build_messages("i need a red desk lamp", RESULTS_OBS, RESULTS_PAGE, HISTORY)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(port: int, latency_ms: float) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "app.cli", "scripted-llm", "--policy", "rule"]
    args += ["--port", str(port), "--latency-ms", str(latency_ms)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the scripted LLM server did not start")


class _Connection:
    """A minimal keep-alive HTTP/1.1 client on asyncio streams.

    httpx.AsyncClient spends tens of ms of CPU per request once 128 are in flight, which
    would measure the client instead of the server; this one costs microseconds.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def post(self, request: bytes) -> bytes:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        body = await self.reader.readexactly(length)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {body[:200]!r}")
        return body


async def _rounds(port: int, rounds: int, concurrency: int) -> tuple[float, list[float]]:
    """``rounds`` waves of ``concurrency`` simultaneous calls on warm connections (one
    warm-up wave first, not counted, so connection set-up is not measured)."""
    payload = json.dumps(
        {"model": "policy", "messages": MESSAGES, "logprobs": True, "return_token_ids": True}
    ).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: "
        + str(len(payload)).encode()
        + b"\r\n\r\n"
        + payload
    )
    connections = [
        _Connection(*await asyncio.open_connection("127.0.0.1", port)) for _ in range(concurrency)
    ]

    async def one(connection: _Connection) -> float:
        started = time.perf_counter()
        await connection.post(request)
        return (time.perf_counter() - started) * 1000

    await asyncio.gather(*(one(c) for c in connections))
    latencies: list[float] = []
    started = time.perf_counter()
    for _ in range(rounds):
        latencies += await asyncio.gather(*(one(c) for c in connections))
    wall = time.perf_counter() - started
    for connection in connections:
        connection.writer.close()
    return wall, latencies


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--client-calls", type=int, default=200)
    args = parser.parse_args()

    port = _free_port()
    proc = _start(port, args.latency_ms)
    url = f"http://127.0.0.1:{port}"
    try:
        wall, latencies = asyncio.run(_rounds(port, args.rounds, args.concurrency))
        print(f"prompt: {len(MESSAGES[1]['content'])} chars (user message)")
        print(
            f"concurrency {args.concurrency}, {len(latencies)} calls,"
            f" latency {args.latency_ms:g} ms: wall {wall:.2f}s,"
            f" {len(latencies) / wall:.0f} calls/s, per call"
            f" p50 {_pct(latencies, 0.5):.0f} ms p95 {_pct(latencies, 0.95):.0f} ms"
            f" p99 {_pct(latencies, 0.99):.0f} ms"
        )
        httpx.post(f"{url}/admin/faults", json={"mode": "ok", "latency_ms": 0}).raise_for_status()
        settings = Settings(_env_file=None, llm_base_url=f"{url}/v1")
        with LLMClient(settings) as llm:
            llm.chat(MESSAGES)
            times = []
            for _ in range(args.client_calls):
                started = time.perf_counter()
                call = llm.chat(MESSAGES)
                times.append((time.perf_counter() - started) * 1000)
            assert call.trainable
        print(
            f"LLMClient.chat at latency 0: p50 {statistics.median(times):.2f} ms"
            f" p95 {_pct(times, 0.95):.2f} ms ({args.client_calls} calls, one at a time)"
        )
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
