"""Work counters for ``rollout_throughput.py`` (benchmark only; never on a product path).

The benchmark puts this folder first on the workers' ``PYTHONPATH`` with
``WSRL_BENCH_PROBE=<file prefix>``; Python then imports this module at start-up, and it
counts, in that process, the SQL statements, commits and rollbacks (SQLAlchemy engine
events), the Redis commands by name (redis-py's command packing, so pipelined commands
and kombu's BRPOPs count too), the HTTP requests (the keep-alive pool of
:mod:`app.core.http_pool`) and the bytes sent on Python sockets (HTTP and Redis; libpq's
own socket, Postgres, is not seen), and the CPU time of the threads inside the stages of
an episode (``cpu_us:<stage>``, inclusive) with the wall time spent there
(``wall_us:<stage>``: where an episode's time goes besides the LLM's answer). The
benchmark reads the counters before and after a batch through the UNIX socket
``<prefix>.<pid>.sock``, with the CPU of each of the process's threads. Without
``WSRL_BENCH_PROBE`` the module does nothing.
"""

from __future__ import annotations

import collections
import json
import os
import threading
import time

_PREFIX = os.environ.get("WSRL_BENCH_PROBE")


def _install(prefix: str) -> None:
    counts: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def bump(key: str, n: int = 1) -> None:
        with lock:
            counts[key] += n

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "before_cursor_execute")
    def _statement(conn, cursor, statement, parameters, context, executemany):
        verb = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else "?"
        bump("sql")
        bump(f"sql:{verb}")
        if executemany:
            bump("sql_rows", len(parameters))

    # A COPY goes to psycopg's cursor, past SQLAlchemy's events (the finish's rows).
    import psycopg

    cursor_copy = psycopg.Cursor.copy
    copy_write_row = psycopg.Copy.write_row

    def counted_copy(self, statement, *args, **kwargs):
        bump("sql")
        bump("sql:COPY")
        return cursor_copy(self, statement, *args, **kwargs)

    def counted_write_row(self, row):
        bump("sql_rows")
        return copy_write_row(self, row)

    psycopg.Cursor.copy = counted_copy
    psycopg.Copy.write_row = counted_write_row

    @event.listens_for(Engine, "commit")
    def _commit(conn):
        bump("commit")

    @event.listens_for(Engine, "rollback")
    def _rollback(conn):
        bump("rollback")

    from redis import connection

    def counting(pack):
        def counted_pack(self, *args):
            name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
            bump("redis")
            bump(f"redis:{name.split(' ')[0].upper()}")
            return pack(self, *args)

        return counted_pack

    for serializer in (connection.PythonRespSerializer, connection.HiredisRespSerializer):
        serializer.pack = counting(serializer.pack)

    try:
        from app.core.http_pool import HttpPool
    except ImportError:
        HttpPool = None
    if HttpPool is not None:
        request = HttpPool.request

        def counted_request(self, method, path, *args, **kwargs):
            bump("http")
            parts = ["{id}" if len(p) >= 16 else p for p in path.split("?")[0].split("/")]
            bump(f"http:{method} {'/'.join(parts)}")
            return request(self, method, path, *args, **kwargs)

        HttpPool.request = counted_request

    import socket

    for name in ("send", "sendall"):
        original = getattr(socket.socket, name)

        def counted_send(self, data, *args, _original=original):
            sent = _original(self, data, *args)
            bump("bytes_sent", len(data) if sent is None else sent)
            return sent

        setattr(socket.socket, name, counted_send)

    # CPU (this thread's, ``time.thread_time``) and wall time spent inside the stages of an
    # episode, inclusive: a precise split where a sampling profiler mixes waits and work.
    import importlib

    def timed(module_name: str, attribute: str, label: str) -> None:
        owner_name, _, name = attribute.rpartition(".")
        owner = importlib.import_module(module_name)
        if owner_name:
            owner = getattr(owner, owner_name)
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            started = time.thread_time_ns()
            began = time.perf_counter_ns()
            try:
                return original(*args, **kwargs)
            finally:
                bump(f"cpu_us:{label}", (time.thread_time_ns() - started) // 1000)
                bump(f"wall_us:{label}", (time.perf_counter_ns() - began) // 1000)

        setattr(owner, name, wrapper)

    for module_name, attribute, label in (
        ("workers.tasks", "execute_rollout", "task"),
        ("workers.rollout", "_record", "task/postgres transactions"),
        ("workers.rollout", "start_attempt", "task/postgres transactions/start_attempt"),
        ("workers.rollout", "finish_attempt", "task/postgres transactions/finish_attempt"),
        ("workers.persistence", "_insert_rows", "task/postgres transactions/insert rows"),
        ("workers.persistence", "_copy_new_rows", "task/postgres transactions/insert rows"),
        ("sqlalchemy.orm.session", "Session.commit", "postgres commit"),
        ("sqlalchemy.orm.session", "Session.close", "postgres session close"),
        ("sqlalchemy.pool.base", "_ConnectionFairy._checkout", "postgres checkout (pre-ping)"),
        ("workers.rollout", "played_protocol", "task/agent protocol"),
        ("workers.rollout", "run_episode", "task/episode"),
        ("workers.llm_client", "LLMClient.chat", "task/episode/llm call"),
        ("app.core.endpoint", "EndpointResolver.wait_until_serving", "task/episode/llm endpoint"),
        ("app.environments.webshop.client", "EnvClient._call", "task/episode/env call"),
        ("workers.recording", "AttemptRecorder.flush", "task/episode/rows flush"),
        ("workers.recording", "LogPublisher.publish", "task/log lines"),
    ):
        timed(module_name, attribute, label)

    # Counters leave the process only when the benchmark asks: a connection to
    # ``<prefix>.<pid>.sock`` gets them as JSON, with the CPU of each thread of the process
    # (``thread_cpu_us:<name>``, numbered names folded). A file rewritten every 0.2 s
    # instead cost the workers 0.8 ms of CPU per episode at concurrency 8.
    import re
    import socket

    numbered = re.compile(r"[-_]?\d+(_\d+)?$")  # ThreadPoolExecutor-0_12

    def snapshot() -> bytes:
        data: dict[str, int] = {}
        for thread in threading.enumerate():
            try:
                clock = time.pthread_getcpuclockid(thread.ident)
                used_us = time.clock_gettime_ns(clock) // 1000
            except (OSError, TypeError):  # the thread ended meanwhile
                continue
            key = f"thread_cpu_us:{numbered.sub('', thread.name)}"
            data[key] = data.get(key, 0) + used_us
        with lock:
            data.update(counts)
        return json.dumps(data).encode()

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(f"{prefix}.{os.getpid()}.sock")
    server.listen()

    def serve() -> None:
        while True:
            connection, _ = server.accept()
            with connection:
                connection.sendall(snapshot())

    threading.Thread(target=serve, name="wsrl-bench-probe", daemon=True).start()


if _PREFIX:
    _install(_PREFIX)
