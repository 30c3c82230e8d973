"""Settings for every part of webshop-rl, in one place.

Every value can be set through an environment variable with the ``WSRL_`` prefix (or a
``.env`` file in the working directory). Nothing else in the project reads
``os.environ``: modules receive a :class:`Settings` (usually from :func:`get_settings`).

When ``WSRL_DATABASE_URL`` / ``WSRL_REDIS_URL`` are unset, the URLs of the embedded
services started by ``wsrl services start`` are used; they are recorded in
``<data_dir>/services.json`` so that every process finds them by itself.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

SERVICES_FILE = "services.json"


class ServicesNotRunningError(RuntimeError):
    """Raised when no URL is configured and no embedded service is running."""


class AgentGymServer(BaseModel):
    """An env server speaking AgentGym's HTTP protocol, trained on by URL alone
    (``WSRL_AGENTGYM``; :func:`app.environments.get_environment`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    goals: int = Field(100, ge=1, le=1_000_000)
    """Its tasks are ``data_idx`` 0 to ``goals - 1``; every fifth is held out (``test``)."""
    success_reward: float = 1.0
    """An episode ending with at least this reward succeeded."""

    @model_validator(mode="before")
    @classmethod
    def _bare_url(cls, data: object) -> object:
        return {"url": data} if isinstance(data, str) else data


class Settings(BaseSettings):
    """All configuration. The README's settings table lists these with their defaults."""

    model_config = SettingsConfigDict(
        env_prefix="WSRL_", env_file=".env", extra="ignore", populate_by_name=True
    )

    # --- where things live -------------------------------------------------------------
    data_dir: Path = Field(Path(".wsrl"), description="State: embedded services, caches.")
    database_url: str | None = Field(
        None, description="PostgreSQL URL; unset = the embedded PostgreSQL."
    )
    redis_url: str | None = Field(None, description="Redis URL; unset = the embedded Redis.")
    embedded_postgres_port: int = Field(55432, description="Port of the embedded PostgreSQL.")
    embedded_redis_port: int = Field(56379, description="Port of the embedded Redis.")

    # --- services talking to each other ------------------------------------------------
    env_url: str = Field("http://127.0.0.1:3000", description="WebShop env server.")
    babyai_url: str = Field(
        "http://127.0.0.1:3100",
        description="BabyAI env server (AgentGym's protocol; `wsrl env babyai`).",
    )
    agentgym: dict[str, AgentGymServer] = Field(
        default_factory=dict,
        description="Env servers of AgentGym's protocol to train on by name, as JSON: "
        '`{"textcraft": "http://host:36001"}`, or `{"name": {"url": ..., "goals": 100, '
        '"success_reward": 1.0}}`; `--environment NAME` plays one.',
    )
    env_token: str | None = Field(
        None,
        description="Bearer token the env server requires on its session routes (`wsrl env "
        "serve` and the workers read it); unset = open.",
    )
    api_url: str = Field("http://127.0.0.1:8000", description="Control-plane API.")
    api_token: str = Field(
        "dev-token", description="Bearer token for API writes and the web dashboard."
    )
    flower_port: int = Field(5555, description="Port of Flower.")
    api_max_body_bytes: int = Field(
        4 * 1024 * 1024, ge=1024, description="Largest request body the API reads (else 413)."
    )
    idempotency_key_retention_s: float = Field(
        86400.0,
        gt=0,
        description="How long an enqueue's Idempotency-Key is kept (a retry with it gets the "
        "same rollouts); the reconciler deletes older keys.",
    )

    # --- `wsrl sql`: read-only SQL for people (app/db/readonly.py) ----------------------
    sql_user: str = Field(
        "wsrl_readonly", description="Login role `wsrl sql` connects as (SELECT grants only)."
    )
    sql_password: str | None = Field(
        None,
        description="Password of that role where the server asks for one; `wsrl db upgrade` "
        "sets it.",
    )
    sql_statement_timeout_s: float = Field(
        30.0, gt=0, description="Statement timeout of `wsrl sql` (its --timeout overrides it)."
    )

    # --- the LLM the agent calls when no trainer has published an endpoint -------------
    llm_base_url: str | None = Field(
        None,
        validation_alias=AliasChoices("WSRL_LLM_BASE_URL", "OPENAI_API_BASE", "llm_base_url"),
        description="OpenAI-compatible endpoint (also read from OPENAI_API_BASE).",
    )

    @field_validator("llm_base_url", mode="before")
    @classmethod
    def _unset_when_empty(cls, value: object) -> object:
        """``OPENAI_API_BASE=`` (as ``.env.example`` has it) means no endpoint, not ``""``."""
        return None if isinstance(value, str) and not value.strip() else value

    llm_api_key: str = Field(
        "EMPTY",
        validation_alias=AliasChoices("WSRL_LLM_API_KEY", "OPENAI_API_KEY", "llm_api_key"),
        description="API key (also read from OPENAI_API_KEY).",
    )
    llm_model: str = Field("policy", description="Model name sent to the endpoint.")
    llm_temperature: float = Field(1.0, description="Sampling temperature.")
    llm_max_tokens: int = Field(256, description="Max new tokens per LLM call.")
    llm_timeout_s: float = Field(60.0, description="Timeout of one LLM call.")

    # --- the WebShop environment -------------------------------------------------------
    env_data: Path | None = Field(
        None, description="Folder with items_shuffle.json etc.; unset = bundled catalog."
    )
    env_goals: str = Field("synthetic", description="Goal set: synthetic or human.")
    noun_tagger: Literal["spacy", "rules"] = Field(
        "spacy",
        description="The reward's noun tagger: spacy (en_core_web_sm, the original's reward) "
        "or rules (approximate, no model; rewards differ on about 1 % of purchases).",
    )
    env_unmatched: Literal["random", "refuse"] = Field(
        "random",
        description="An AGL reset whose instruction matches no goal: random (a random goal, "
        "instruction_matched false) or refuse (409). Either way a warning in the env "
        "server's log and a count in /health.",
    )

    # --- rollouts ------------------------------------------------------------------------
    max_steps: int = Field(15, description="Steps before an episode ends with reward 0.")
    max_attempts: int = Field(3, description="Attempts per rollout before it fails.")
    step_timeout_s: float = Field(
        120.0, description="Upper bound of one agent step (LLM + env); sets task deadlines."
    )
    default_agent_url: str | None = Field(
        None,
        description="External agent (agent-as-a-service) that plays rollouts enqueued without "
        "their own agent_url; unset = the built-in agent.",
    )

    # --- Celery workers, deadlines and the reconciler ------------------------------------
    episode_margin_s: float = Field(
        60.0, description="Slack added to max_steps x step_timeout_s for one episode's budget."
    )
    broker_visibility_timeout_s: float | None = Field(
        None,
        description="Seconds before Redis redelivers an unacknowledged task; unset = the "
        "hard time limit + 60 s (see app.core.celery.time_limits).",
    )
    worker_concurrency: int = Field(8, description="Threads per `wsrl worker` process.")
    worker_heartbeat_s: float = Field(
        10.0,
        description="How often a worker extends the deadline of its running rollouts; a "
        "rollout whose worker missed 3 beats is presumed lost by the reconciler.",
    )
    rollout_queue_timeout_s: float = Field(
        3600.0,
        description="How long a queued rollout may wait before the reconciler assumes its "
        "message was lost and enqueues it again.",
    )
    rollout_message_grace_s: float = Field(
        30.0,
        description="How long a queued rollout's message may be missing from the broker "
        "(Redis flushed or restarted) before the reconciler sends it again.",
    )
    retry_backoff_s: float = Field(
        2.0,
        description="Delay before a failed attempt's rollout is delivered again; doubles with "
        "each attempt.",
    )
    retry_backoff_max_s: float = Field(30.0, description="Cap of that delay.")
    outage_budget_s: float = Field(
        300.0,
        description="How long a rollout retries through an outage (env server, LLM server, "
        "Postgres or Redis unreachable) without using up its attempts, counted from its first "
        "failed attempt; also how long a worker retries recording an outcome while Postgres "
        "is down.",
    )
    record_flush_every: int = Field(
        32, description="Steps + LLM calls a worker buffers before writing them to Postgres."
    )
    reconcile_interval_s: float = Field(30.0, description="Period of `wsrl reconcile`.")
    logs_channel: str = Field(
        "wsrl:logs", description="Redis pub/sub channel of the agents' log lines (wsrl watch)."
    )

    # --- training curves (trainer/tracking.py) -------------------------------------------
    metrics_loggers: str = Field(
        "tensorboard",
        description="Where train-step and evaluation metrics go besides the console: "
        "comma-separated tensorboard, wandb, mlflow, or none.",
    )
    metrics_dir: Path | None = Field(
        None, description="TensorBoard event files; unset = <data_dir>/tensorboard."
    )
    progress_every_s: float = Field(
        10.0,
        gt=0,
        description="Seconds between the plain progress lines of long commands (wsrl eval, "
        "policy eval and bootstrap, exports, catalogs) when their output is not a terminal.",
    )

    # --- the agent and its LLM calls (app/core/agent.py, workers/llm_client.py) ---------------
    agent_history_steps: int = Field(
        4, description="Previous steps (action + short observation) shown in each prompt."
    )
    agent_mode: str = Field(
        "text", description="text: actions parsed from the reply; tools: search/click/buy tools."
    )
    agent_constrain_actions: bool = Field(
        False,
        description="Limit each text-mode reply to the page's valid actions: requests carry "
        "vLLM's structured_outputs regex (honoured by vLLM and the trainer's policy server); "
        "`wsrl dev` turns it on for the tiny policy.",
    )
    agent_result_refs: Literal["ids", "numbers"] = Field(
        "ids",
        description="How prompts name a results page's products: ids (as the original's "
        "pages list them) or numbers (their places, 1 first, mapped back to the ids by the "
        "agent). A bootstrapped policy's own choice is published with it.",
    )
    llm_retry_budget_s: float = Field(
        120.0, description="Total time one LLM call may spend retrying 5xx/timeouts."
    )
    llm_backoff_initial_s: float = Field(0.5, description="First retry/poll backoff.")
    llm_backoff_max_s: float = Field(10.0, description="Cap of the retry/poll backoff.")
    llm_paused_max_wait_s: float = Field(
        1800.0, description="How long a call waits for a paused policy endpoint to serve."
    )
    env_timeout_s: float = Field(30.0, description="Timeout of one env server request.")
    llm_token_capture: bool = Field(
        True,
        description="Ask for token ids + logprobs (vLLM's return_token_ids); off for servers "
        "that reject unknown parameters (their calls are recorded as untrainable).",
    )

    def services_file(self) -> Path:
        return self.data_dir / SERVICES_FILE

    def embedded_services(self) -> dict[str, str]:
        """URLs recorded by ``wsrl services start`` (empty when none are recorded)."""
        path = self.services_file()
        if not path.exists():
            return {}
        return json.loads(path.read_text())

    def resolved_database_url(self) -> str:
        """The configured URL, else the running embedded PostgreSQL's."""
        if self.database_url:
            return self.database_url
        url = self.embedded_services().get("database_url")
        if not url:
            raise ServicesNotRunningError(
                "No database: set WSRL_DATABASE_URL or run `wsrl services start` "
                f"(looked in {self.services_file()})."
            )
        return url

    def resolved_redis_url(self) -> str:
        """The configured URL, else the running embedded Redis's."""
        if self.redis_url:
            return self.redis_url
        url = self.embedded_services().get("redis_url")
        if not url:
            raise ServicesNotRunningError(
                "No Redis: set WSRL_REDIS_URL or run `wsrl services start` "
                f"(looked in {self.services_file()})."
            )
        return url


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
