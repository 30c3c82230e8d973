"""The gateway's Postgres I/O: attempt lookups and call inserts on the event loop.

The gateway writes one row per chat completion, on the response path (the agent gets its
answer only once its call is committed, so a worker counting the attempt's calls after
the agent is done sees every one of them). That write is the largest part of what the
gateway adds to a call, so it skips the ORM and the thread hop of a sync driver: async
psycopg connections in autocommit, statements prepared once per connection, one round
trip per call: the record step's CPU went from about 0.8 ms (SQLAlchemy Core in a worker
thread) to about 0.3 ms (both measured on 2 busy cores).

Connections use ``synchronous_commit = off``: the commit does not wait for the WAL
flush. A Postgres crash can lose the last few milliseconds of calls, but never an
attempt's calls once the worker has finished the attempt: its (synchronous) commit
flushes the WAL up to and including every call committed before it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb
from sqlalchemy.engine import make_url

from app.db.lifecycle import AttemptStatus
from app.db.types import jsonb_dumps, pack_float32, pack_int32

# How the gateway's connections show in ``pg_stat_activity``.
APPLICATION_NAME = "wsrl-gateway"
# One statement, in autocommit: share-lock the attempt row while it is ``running`` (a
# worker finishing the attempt waits for it; a finished attempt gets no row), take
# ``max(index) + 1`` and insert; a unique ``(attempt_id, index)`` conflict (a concurrent
# call of the same attempt took that index) inserts nothing and returns no row.
INSERT_NEXT_CALL = """
WITH running AS (
    SELECT id FROM attempts
    WHERE id = %(attempt_id)s::bigint AND status = %(running)s::varchar
    FOR SHARE
)
INSERT INTO llm_calls (
    attempt_id, index, policy_version, model, request_messages, response_text,
    prompt_token_ids, response_token_ids, response_logprobs, finish_reason, latency_ms,
    trainable, structured_outputs
)
SELECT
    running.id,
    (SELECT coalesce(max(index) + 1, 0) FROM llm_calls
     WHERE attempt_id = %(attempt_id)s::bigint),
    %(policy_version)s::integer, %(model)s::text, %(request_messages)s::jsonb,
    %(response_text)s::text, %(prompt_token_ids)s::bytea, %(response_token_ids)s::bytea,
    %(response_logprobs)s::bytea, %(finish_reason)s::text, %(latency_ms)s::float8,
    %(trainable)s::boolean, %(structured_outputs)s::jsonb
FROM running
ON CONFLICT (attempt_id, index) DO NOTHING
RETURNING index
"""
ATTEMPT_BY_NUMBER = (
    "SELECT id, status FROM attempts WHERE rollout_id = %s::uuid AND number = %s::integer"
)
ATTEMPT_STATUS = "SELECT status FROM attempts WHERE id = %s::bigint"

# The ``llm_calls`` columns of :func:`app.core.llm.call_row`, besides the index.
CALL_COLUMNS = frozenset(
    {
        "policy_version",
        "model",
        "request_messages",
        "response_text",
        "prompt_token_ids",
        "response_token_ids",
        "response_logprobs",
        "finish_reason",
        "latency_ms",
        "trainable",
        "structured_outputs",
    }
)


class StoreUnavailable(RuntimeError):
    """Postgres could not be reached, or the connection broke during a statement."""


class CallStore:
    """A small pool of async connections (at most ``size`` open) and the gateway's queries.

    A connection goes back to the pool only when it is idle and intact; one that broke, or
    whose statement was interrupted (a cancelled request), is closed. A connection error
    also drops the idle ones, which a Postgres restart has broken too.
    """

    def __init__(self, url: str, size: int) -> None:
        """``url``: a libpq URL (``postgresql://``), not SQLAlchemy's ``+psycopg`` form."""
        self._url = url
        self._slots = asyncio.Semaphore(size)
        self._idle: list[psycopg.AsyncConnection[Any]] = []

    async def close(self) -> None:
        """Close the idle connections (those in use close when they come back broken)."""
        idle, self._idle = self._idle, []
        for connection in idle:
            await connection.close()

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self._slots:
            try:
                connection = self._idle.pop() if self._idle else await self._connect()
            except psycopg.OperationalError as exc:
                raise StoreUnavailable(f"cannot connect to Postgres: {exc}") from exc
            try:
                yield connection
            except psycopg.OperationalError as exc:
                await self.close()
                raise StoreUnavailable(f"Postgres connection failed: {exc}") from exc
            finally:
                if (
                    not connection.closed
                    and connection.info.transaction_status == TransactionStatus.IDLE
                ):
                    self._idle.append(connection)
                else:
                    await connection.close()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            self._url,
            autocommit=True,
            options="-c synchronous_commit=off",
            application_name=APPLICATION_NAME,
        )

    async def attempt(self, rollout_id: uuid.UUID, number: int) -> tuple[int, str] | None:
        """``(attempt id, status)`` of attempt ``number`` of the rollout, if it exists."""
        async with self._connection() as connection:
            cursor = await connection.execute(ATTEMPT_BY_NUMBER, (rollout_id, number))
            row = await cursor.fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    async def insert_next_call(self, attempt_id: int, row: dict[str, Any]) -> int | None:
        """Insert ``row`` (a :func:`app.core.llm.call_row`) as the attempt's next call.

        Returns its index; None when nothing was inserted: the attempt is not running, or
        a concurrent call took the index (:meth:`attempt_status` tells which).
        """
        async with self._connection() as connection:
            cursor = await connection.execute(
                INSERT_NEXT_CALL, _insert_params(attempt_id, row), prepare=True
            )
            inserted = await cursor.fetchone()
        return None if inserted is None else int(inserted[0])

    async def attempt_status(self, attempt_id: int) -> str | None:
        async with self._connection() as connection:
            cursor = await connection.execute(ATTEMPT_STATUS, (attempt_id,))
            found = await cursor.fetchone()
        return None if found is None else str(found[0])


def libpq_url(database_url: str) -> str:
    """A SQLAlchemy URL (``postgresql+psycopg://``) as libpq takes it."""
    return make_url(database_url).set(drivername="postgresql").render_as_string(False)


def _insert_params(attempt_id: int, row: dict[str, Any]) -> dict[str, Any]:
    """The insert's parameters, packed as :mod:`app.db.types` stores them; a row with
    other columns than expected is a bug here."""
    unknown = set(row) - CALL_COLUMNS - {"index"}
    if unknown:
        raise ValueError(f"llm_calls columns the gateway does not write: {sorted(unknown)}")
    params = {key: row[key] for key in CALL_COLUMNS}
    params["attempt_id"] = attempt_id
    params["running"] = AttemptStatus.RUNNING.value
    params["request_messages"] = Jsonb(row["request_messages"], dumps=jsonb_dumps)
    if row["structured_outputs"] is not None:
        params["structured_outputs"] = Jsonb(row["structured_outputs"], dumps=jsonb_dumps)
    for key, pack in (
        ("prompt_token_ids", pack_int32),
        ("response_token_ids", pack_int32),
        ("response_logprobs", pack_float32),
    ):
        if row[key] is not None:
            params[key] = pack(row[key])
    return params
