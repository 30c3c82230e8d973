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

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

SERVICES_FILE = "services.json"


class ServicesNotRunningError(RuntimeError):
    """Raised when no URL is configured and no embedded service is running."""


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
    api_url: str = Field("http://127.0.0.1:8000", description="Control-plane API.")
    api_token: str = Field("dev-token", description="Bearer token for API writes.")
    flower_port: int = Field(5555, description="Port of Flower.")

    # --- the LLM the agent calls when no trainer has published an endpoint -------------
    llm_base_url: str | None = Field(
        None,
        validation_alias=AliasChoices("WSRL_LLM_BASE_URL", "OPENAI_API_BASE", "llm_base_url"),
        description="OpenAI-compatible endpoint (also read from OPENAI_API_BASE).",
    )
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

    # --- rollouts ------------------------------------------------------------------------
    max_steps: int = Field(15, description="Steps before an episode ends with reward 0.")
    max_attempts: int = Field(3, description="Attempts per rollout before it fails.")
    step_timeout_s: float = Field(
        120.0, description="Upper bound of one agent step (LLM + env); sets task deadlines."
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
