"""Settings from the environment (prefix ``AGENT_``), built once by `get_settings()`.

Nothing here is read at import time: `get_settings()` is cached and called by the composition
root, and tests build `Settings(...)` directly or clear the cache.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.core.history import HistoryConfig


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="AGENT_", extra="ignore", use_attribute_docstrings=True
    )

    database_url: str = "sqlite+aiosqlite:///./agent.db"
    """SQLAlchemy async URL: `postgresql+asyncpg://user@host/db` in production."""
    db_pool_size: int = Field(default=10, ge=1)
    """Connections kept open per process (PostgreSQL)."""
    db_max_overflow: int = Field(default=10, ge=0)
    """Extra connections allowed under load beyond the pool size (PostgreSQL)."""
    db_pool_timeout: float = Field(default=10.0, gt=0)
    """Seconds a request waits for a free connection before failing with a 503 (PostgreSQL)."""
    migrate_on_start: bool = True
    """Run `alembic upgrade head` when the app starts."""

    model: Literal["echo", "openai"] = "echo"
    """`echo`: the offline deterministic model. `openai`: any OpenAI-compatible server."""
    openai_base_url: str = "https://api.openai.com/v1"
    """OpenAI-compatible API root: OpenAI, or Ollama/vLLM/llama.cpp (`http://host:port/v1`)."""
    openai_api_key: SecretStr | None = None
    """Bearer key for the provider; unset sends none (local servers usually want none)."""
    openai_model: str = "gpt-4o-mini"
    """Model name the provider knows."""
    model_timeout: float = Field(default=60.0, gt=0)
    """Seconds per provider request before it is retried (then fails with a 502)."""
    openai_max_tokens: int | None = Field(default=None, ge=1)
    """Cap on the tokens of each answer (`max_tokens`); unset leaves the length to the server."""

    history_max_messages: int | None = Field(default=None, ge=1)
    """Module-wide window: newest messages sent per turn (and read from the database, unless
    summarizing: the summarizer needs the dropped rows). With no history setting at all, a turn
    sends the whole thread."""
    history_max_tokens: int | None = Field(default=None, ge=1)
    """Module-wide token budget (estimated); whichever of the two limits cuts more wins."""
    history_summarize: bool = False
    """Fold what the window drops into a summary made by the model (one extra call)."""

    api_keys: SecretStr | None = None
    """`key1=alice,key2=bob`: a bearer key names its actor. Unset: local development mode,
    every request is actor `local`."""
    max_content_bytes: int = Field(default=256 * 1024, ge=1)
    """Largest user message accepted (UTF-8 bytes); bigger is a 413 before any work is done."""
    run_lease_seconds: float = Field(default=120.0, gt=0)
    """Lease of a running run on its thread; renewed every third of it while the run works, so
    a run whose process died is resumed (at start-up or by the periodic sweep) once it lapses."""
    token_quota: int | None = Field(default=None, ge=1)
    """Tokens one actor may spend in total (chat and summaries, as the provider reports them,
    estimated when it reports none); unset means no quota."""

    host: str = "127.0.0.1"
    """Address `python -m app serve` binds."""
    port: int = 8000
    """Port `python -m app serve` listens on."""

    @model_validator(mode="after")
    def _summary_needs_a_window(self) -> Settings:
        if self.history_summarize and self.history_config() is None:
            raise ValueError(
                "AGENT_HISTORY_SUMMARIZE needs AGENT_HISTORY_MAX_MESSAGES or "
                "AGENT_HISTORY_MAX_TOKENS: without a window nothing is dropped to summarize"
            )
        return self

    @field_validator(
        "history_max_messages",
        "history_max_tokens",
        "token_quota",
        "openai_max_tokens",
        mode="before",
    )
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value

    def history_config(self) -> HistoryConfig | None:
        """The module-wide `history` these settings describe, or None when none is set."""
        if self.history_max_messages is None and self.history_max_tokens is None:
            return None
        return HistoryConfig(
            max_messages=self.history_max_messages,
            max_tokens=self.history_max_tokens,
            summarize=self.history_summarize,
        )

    def actor_keys(self) -> dict[str, str]:
        """The API keys as {key: actor id}; empty in local development mode."""
        if self.api_keys is None:
            return {}
        out: dict[str, str] = {}
        for pair in self.api_keys.get_secret_value().split(","):
            pair = pair.strip()
            if not pair:
                continue
            key, sep, actor = pair.partition("=")
            if not sep or not key.strip() or not actor.strip():
                raise ValueError("AGENT_API_KEYS must look like 'key1=alice,key2=bob'")
            out[key.strip()] = actor.strip()
        return out


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
