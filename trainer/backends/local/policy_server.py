"""An OpenAI-compatible endpoint serving the trainer's current weights, in its process.

Responses have vLLM's token-capture shape: ``prompt_token_ids`` on the response,
``token_ids`` on each choice, ``logprobs.content[i].logprob`` per generated token (raw
model logprobs). Concurrent requests are gathered for ``gather_ms`` and sampled together
(left padding + KV cache). A request's ``structured_outputs`` (vLLM's ``regex`` or
``choice``) limits its reply, and its logprobs are then renormalised over the allowed
tokens (:mod:`trainer.generation`). A weight sync is :meth:`PolicyServer.swap`: it waits for the
batch in flight, so every response is produced by exactly one policy version.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.backends.local.checkpoints import weights_sha256
from trainer.constrained import ConstraintError, compile_pattern, regex_of
from trainer.generation import Generation, GenerationRequest, generate_batch
from trainer.lora import AdapterCopy

logger = logging.getLogger(__name__)


class ChatRequest(BaseModel):
    """The subset of the chat completions request this server honours (others ignored)."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    temperature: float = Field(1.0, ge=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(1, ge=1, le=16)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    structured_outputs: dict[str, Any] | None = None
    """vLLM's constraint on the reply: ``{"regex": ...}`` or ``{"choice": [...]}``."""


@dataclass
class _Pending:
    requests: list[GenerationRequest]
    top_logprobs: int
    future: asyncio.Future


class PolicyServer:
    """Holds the served model and batches generation requests against it."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        version: int = 0,
        model_name: str = "policy",
        max_batch: int = 16,
        gather_ms: float = 5.0,
        default_max_tokens: int = 256,
    ) -> None:
        self.model, self.tokenizer, self.version = model.eval(), tokenizer, version
        self.model_name = model_name
        self.max_batch, self.gather_s = max_batch, gather_ms / 1000.0
        self.default_max_tokens = default_max_tokens
        self.batches_run = 0
        self._lock = threading.Lock()
        self._rng = random.Random()
        self._queue: asyncio.Queue[_Pending] | None = None

    def swap(self, model: PreTrainedModel, version: int) -> None:
        """Serve ``model`` as ``version`` from the next batch on (waits for the current one).

        The server keeps using ``model``: pass a copy that training does not mutate.
        """
        with self._lock:
            self.model, self.version = model.eval(), version
        logger.info("policy server now serves version %d", version)

    def weights(self) -> dict[str, Any]:
        """``{"version", "sha256"}`` of the served model (waits for the current batch)."""
        with self._lock:
            return {"version": self.version, "sha256": weights_sha256(self.model)}

    def load_adapter(self, copy: AdapterCopy, version: int) -> None:
        """Serve the trained LoRA adapter (``copy`` puts it into the served model, whose
        base weights stay) as ``version`` from the next batch on (waits for the current
        one): an adapter-only sync."""
        with self._lock:
            copy()
            self.version = version
        logger.info("policy server now serves version %d (adapter)", version)

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """The chat template applied to ``messages`` with the assistant turn opened."""
        encoded = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True
        )
        return list(encoded["input_ids"])

    def _run(self, batch: list[_Pending]) -> tuple[list[Generation], int]:
        requests = [r for p in batch for r in p.requests]
        top = max(p.top_logprobs for p in batch)
        with self._lock:
            out = generate_batch(
                self.model, self.tokenizer, requests, self._rng.randrange(2**31), top
            )
            self.batches_run += 1
            return out, self.version

    async def _gather(self) -> list[_Pending]:
        assert self._queue is not None
        batch = [await self._queue.get()]
        deadline = time.monotonic() + self.gather_s
        size = len(batch[0].requests)
        while size < self.max_batch and (left := deadline - time.monotonic()) > 0:
            try:
                batch.append(await asyncio.wait_for(self._queue.get(), left))
                size += len(batch[-1].requests)
            except TimeoutError:
                break
        return batch

    async def batch_loop(self) -> None:
        """Forever: gather requests for a few ms, sample them together, answer each."""
        self._queue = asyncio.Queue()
        while True:
            batch = await self._gather()
            try:
                outs, version = await asyncio.to_thread(self._run, batch)
            except Exception as exc:  # every waiting request learns why
                logger.exception("generation failed")
                for p in batch:
                    if not p.future.done():  # a cancelled request needs no answer
                        p.future.set_exception(exc)
                continue
            for p in batch:
                if not p.future.done():
                    p.future.set_result((outs[: len(p.requests)], version))
                outs = outs[len(p.requests) :]

    async def submit(
        self, requests: list[GenerationRequest], top_logprobs: int
    ) -> tuple[list[Generation], int]:
        """Queue ``requests``; returns their generations and the version that made them."""
        if self._queue is None:
            raise RuntimeError("the batch loop is not running (use create_app's lifespan).")
        future = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(requests, top_logprobs, future))
        return await future

    def start(self, host: str = "127.0.0.1", port: int = 0) -> ServerHandle:
        """Serve on a background thread (the trainer keeps running); returns its handle."""
        return ServerHandle.start(create_app(self), host, port)


def _requests(
    server: PolicyServer, body: ChatRequest, prompt: list[int]
) -> list[GenerationRequest]:
    max_tokens = body.max_completion_tokens or body.max_tokens or server.default_max_tokens
    limit = server.model.config.max_position_embeddings
    if len(prompt) + max_tokens > limit:
        raise HTTPException(
            400,
            f"prompt ({len(prompt)} tokens) + max_tokens ({max_tokens}) exceeds the model's "
            f"context of {limit} tokens; lower max_tokens or shorten the messages.",
        )
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    if body.structured_outputs is not None:
        try:
            compile_pattern(regex_of(body.structured_outputs))
        except ConstraintError as exc:
            raise HTTPException(400, f"structured_outputs: {exc}") from exc
    return [
        GenerationRequest(
            prompt_ids=prompt,
            max_tokens=max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            seed=None if body.seed is None else body.seed + i,
            stop=stop,
            structured_outputs=body.structured_outputs,
        )
        for i in range(body.n)
    ]


def _logprobs(server: PolicyServer, gen: Generation, top: int) -> dict[str, Any]:
    decode = server.tokenizer.decode

    def entry(token: int, logprob: float) -> dict[str, Any]:
        text = decode([token])
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    content = []
    for i, (token, logprob) in enumerate(zip(gen.token_ids, gen.logprobs, strict=True)):
        alternatives = [entry(t, lp) for t, lp in gen.top_logprobs[i][:top]] if top else []
        content.append({**entry(token, logprob), "top_logprobs": alternatives})
    return {"content": content}


def _choice(server: PolicyServer, index: int, gen: Generation, body: ChatRequest) -> dict:
    top = body.top_logprobs or 0
    return {
        "index": index,
        "message": {"role": "assistant", "content": gen.text},
        "logprobs": _logprobs(server, gen, top) if body.logprobs else None,
        "finish_reason": gen.finish_reason,
        "stop_reason": None,
        "token_ids": gen.token_ids,
    }


def _error_body(status: int, message: str) -> dict[str, Any]:
    """Both this project's ``detail`` and OpenAI's ``error`` (which the openai client shows)."""
    kind = "NotFoundError" if status == 404 else "BadRequestError"
    return {"detail": message, "error": {"message": message, "type": kind, "code": status}}


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    return JSONResponse(_error_body(exc.status_code, str(exc.detail)), exc.status_code)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    parts = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    return JSONResponse(_error_body(422, "; ".join(parts)), 422)


def create_app(server: PolicyServer) -> FastAPI:
    """The HTTP face of ``server``; its lifespan runs the batching loop."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        task = asyncio.create_task(server.batch_loop())
        await asyncio.sleep(0)
        yield
        task.cancel()

    app = FastAPI(title="webshop-rl policy server", lifespan=lifespan)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": server.model_name, "object": "model", "owned_by": "webshop-rl"}
        return {"object": "list", "data": [{**card, "policy_version": server.version}]}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": server.model_name, "version": server.version}

    @app.get("/v1/weights")
    async def weights() -> dict[str, Any]:
        """The served version and a digest of its weights, to check them against the
        checkpoint it was published from (``wsrl chaos``)."""
        return await asyncio.to_thread(server.weights)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatRequest) -> dict[str, Any]:
        if body.model != server.model_name:
            raise HTTPException(
                404,
                f"The model `{body.model}` does not exist; "
                f"this server serves `{server.model_name}`.",
            )
        try:
            prompt = server.prompt_ids(body.messages)
        except Exception as exc:
            raise HTTPException(400, f"cannot apply the chat template: {exc}") from exc
        requests = _requests(server, body, prompt)
        gens, version = await server.submit(requests, body.top_logprobs or 0)
        completion = sum(len(g.token_ids) for g in gens)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": server.model_name,
            "choices": [_choice(server, i, g, body) for i, g in enumerate(gens)],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": completion,
                "total_tokens": len(prompt) + completion,
            },
            "prompt_token_ids": prompt,
            "policy_version": version,
        }

    return app


class ServerHandle:
    """A uvicorn server on a daemon thread; ``base_url`` ends with ``/v1``."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread) -> None:
        self._server, self._thread = server, thread

    @classmethod
    def start(cls, app: FastAPI, host: str, port: int) -> ServerHandle:
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="policy-server", daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError(f"policy server did not start on {host}:{port}")
            time.sleep(0.02)
        return cls(server, thread)

    @property
    def base_url(self) -> str:
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        return f"http://{host}:{port}/v1"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
