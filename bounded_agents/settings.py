"""Settings from the environment (prefix ``AGENT_``), built once by `get_settings()`.

Nothing here is read at import time: `get_settings()` is cached and called by the composition
root, and tests build `Settings(...)` directly or clear the cache.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from functools import lru_cache
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from bounded_agents.core.history import HistoryConfig, config_error
from bounded_agents.core.tool_budget import ToolBudget
from bounded_agents.errors import ConfigError
from bounded_agents.redact import redacted_url
from bounded_agents.settings_checks import (
    API_KEYS_FORM,
    base_url_problem,
    database_url_problem,
    parse_api_keys,
)
from bounded_agents.startup import exit_in_one_line

MIN_FINGERPRINT_KEY_CHARS = 32
DEVELOPMENT_FINGERPRINT_KEY = b"bounded-agents local development: not a secret"
"""The fingerprint key of local development mode (no AGENT_FINGERPRINT_KEY, no API keys)."""

OTEL_CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""OpenTelemetry's GenAI opt-in for message content in telemetry."""
_OTEL_CAPTURE_ON = frozenset({"true", "1", "yes", "on", "span_only", "span_and_event"})
"""Its values that turn capture on: the boolean spellings, and the newer conventions' modes
that put content on spans."""

_URL_FIELDS = frozenset(
    {"database_url", "openai_base_url", "anthropic_base_url", "dbos_system_database_url"}
)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="AGENT_", extra="ignore", use_attribute_docstrings=True
    )

    database_url: str = "sqlite+aiosqlite:///./agent.db"
    """SQLAlchemy async URL: `postgresql+asyncpg://user@host/db` in production. SQLite takes
    one writer at a time per process (see docs/reliability.md). A password in it is never
    printed or logged. Only these two drivers: `postgresql://` or `sqlite://` without one
    stops start-up with what to write instead."""
    db_pool_size: int = Field(default=10, ge=1)
    """Connections kept open per process (PostgreSQL)."""
    db_max_overflow: int = Field(default=10, ge=0)
    """Extra connections allowed under load beyond the pool size (PostgreSQL)."""
    db_pool_timeout: float = Field(default=10.0, gt=0)
    """Seconds a request waits for a free connection before failing with a 503 (PostgreSQL)."""
    db_statement_timeout: float = Field(default=30.0, gt=0)
    """Seconds one statement (or opening a connection) may wait for PostgreSQL before the
    request fails with a 503: a server that stops answering (a network partition, a stuck
    host) fails the turn instead of holding it for the kernel's quarter-hour of retransmits.
    Migrations (at start-up too), the search index's switch at start-up and `distribute` are
    not held to it."""
    db_pgbouncer: bool = False
    """The URL points at PgBouncer in transaction mode: asyncpg then keeps no prepared
    statements across transactions (each may run on another server connection). See
    docs/scale-out.md for pool sizes."""
    migrate_on_start: bool = True
    """Run `alembic upgrade head` when the app starts."""

    model: Literal["echo", "openai", "anthropic"] = "echo"
    """`echo`: the offline deterministic model. `openai`: any OpenAI-compatible server.
    `anthropic`: Claude over the native Messages API, with prompt caching (the extra
    `bounded-agents[anthropic]`; docs/anthropic.md)."""
    openai_base_url: str = "https://api.openai.com/v1"
    """OpenAI-compatible API root: OpenAI, or Ollama/vLLM/llama.cpp (`http://host:port/v1`).
    `user:password@` in it is sent as Basic auth and never shown (errors, runs, logs)."""
    openai_api_key: SecretStr | None = None
    """Bearer key for the provider; unset sends none (local servers usually want none)."""
    openai_model: str = "gpt-4o-mini"
    """Model name the provider knows."""
    model_timeout: float = Field(default=60.0, gt=0)
    """Seconds a provider request may wait on the server (to connect, or between two reads of
    a stream) before it is retried (then fails with a 502)."""
    model_call_timeout_seconds: float = Field(default=600.0, gt=0)
    """Seconds one chat model call may take in all, retries and a whole stream included: a
    stream that never ends, or sends only keep-alives, fails the run (`provider_timeout`)
    instead of holding its thread."""
    tool_timeout_seconds: float = Field(default=120.0, gt=0)
    """Seconds one tool call may take; past it the model reads an error result instead, and
    the turn goes on."""
    openai_max_tokens: int | None = Field(default=None, ge=1)
    """Cap on the tokens of each answer (`max_tokens`); unset leaves the length to the server."""
    openai_max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """The request field that cap is sent in: `max_completion_tokens` for OpenAI's reasoning
    models, which refuse `max_tokens`."""
    openai_prompt_cache_key: Literal["auto", "on", "off"] = "auto"
    """Send `prompt_cache_key` (a hash of the thread id, never the id) so a thread's calls
    reach the same OpenAI prompt cache. `auto`: only to api.openai.com (another server may
    refuse the field)."""
    openai_prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    """Sent as `prompt_cache_retention` when set: `24h` keeps an idle thread's prefix cached
    for a day (OpenAI models that support it); unset leaves the server's default."""
    openai_tokenizer: str | None = None
    """A tiktoken encoding (`o200k_base`, `cl100k_base`) that counts the model's tokens
    exactly, offline, before it has reported any usage (the extra `bounded-agents[tiktoken]`;
    needs `TIKTOKEN_CACHE_DIR` holding the encoding). Unset: the chars/4 estimate, calibrated
    by reported usage."""
    anthropic_base_url: str = "https://api.anthropic.com"
    """Anthropic API root (`/v1/messages` is appended): Anthropic, or a gateway in front of it."""
    anthropic_api_key: SecretStr | None = None
    """Key for AGENT_MODEL=anthropic, sent as `x-api-key`; unset falls back to the SDK's own
    ANTHROPIC_API_KEY."""
    anthropic_model: str = "claude-sonnet-4-5"
    """Claude model name for AGENT_MODEL=anthropic."""
    anthropic_max_tokens: int = Field(default=4096, ge=1)
    """Cap on the tokens of each answer: the Messages API requires one."""
    anthropic_cache: bool = True
    """Place prompt-cache breakpoints (`cache_control`) on the stable prefix: cache reads cost
    0.1x the input price, writes 1.25x. False sends none."""

    history_enabled: bool = True
    """False: the model sees only the current user message (no history at all)."""
    history_max_messages: int | None = Field(default=None, ge=1)
    """Module-wide window: newest messages sent per turn (also the rows read per turn). With no
    history setting at all, a turn sends the whole thread."""
    history_max_tokens: int | None = Field(default=None, ge=1)
    """Module-wide token budget (estimated); whichever of the two limits cuts more wins. The
    store reads by it too (each message's estimate is stored with it)."""
    history_min_messages: int | None = Field(default=None, ge=1)
    """The low mark below AGENT_HISTORY_MAX_MESSAGES: the window grows from it to the max and is
    cut back to it at a run's start, so prompts between cuts extend each other and a provider's
    prompt cache hits. Summarizing, the count a fold cuts back to."""
    history_min_tokens: int | None = Field(default=None, ge=1)
    """The same low mark below AGENT_HISTORY_MAX_TOKENS."""
    history_runs: int | None = Field(default=None, ge=1)
    """Module-wide runs window: the newest this many runs, whole (nothing summarized)."""
    history_summarize: bool = False
    """Fold what the window leaves out into a rolling summary made by the model (with no limit
    set, the window is 40 messages)."""
    history_summary_token_threshold: int | None = Field(default=None, ge=1)
    """Summarize old runs once the history's estimated tokens reach this (needs
    AGENT_HISTORY_SUMMARIZE)."""
    history_keep_recent_runs: int | None = Field(default=None, ge=1)
    """With the token threshold: runs kept verbatim (default 5)."""
    history_fold_messages: int | None = Field(default=None, ge=1)
    """Summarizing window: unsummarized messages past the window that trigger a fold (default
    half the window, at least 4)."""
    history_fold_max_tokens: int | None = Field(default=None, ge=1)
    """Summarizer input per call at most (default 8000); a longer backlog folds in chunks."""
    history_summary_carry: Literal["rewrite", "append"] | None = None
    """`rewrite` (default) or `append`: how the built-in summarizer carries the summary so far
    forward (docs/history.md)."""
    history_fold_calls_per_turn: int = Field(default=2, ge=1)
    """Summarizer calls one turn may make: a long backlog is folded over several turns, the
    prompt bounded meanwhile (docs/history.md)."""
    history_fold_timeout_seconds: float = Field(default=120.0, gt=0)
    """How long one summarizer call may take before the turn answers without that fold."""
    history_clear_tool_results_keep: int | None = Field(default=None, ge=0)
    """Tool-result clearing (off when unset): the newest this many tool results ride verbatim,
    older ones are replaced in the prompt by a placeholder (tool, size, seq); the stored rows
    stay and `search_history` finds them (docs/history.md). On its own it gives the default
    40-message window, as AGENT_HISTORY_SUMMARIZE does."""
    history_clear_tool_results_step_tokens: int | None = Field(default=None, ge=1)
    """Clearing moves in steps of at least this many estimated tokens (default 4096), so the
    prompt's prefix, and a provider's prompt cache, changes only at a step."""
    history_cache_ttl_seconds: float = Field(default=300.0, ge=0, allow_inf_nan=False)
    """How long the provider keeps a prompt cache while the thread is idle. A summarizing
    window whose thread sat idle this long folds as soon as the fold is within half a batch:
    the cache is lost anyway, so a later fold does not break a hot one (docs/history.md).
    0 turns it off. Per provider: OpenAI's automatic caching keeps a prefix 5-10 minutes idle
    (up to an hour off-peak; 24 h with extended retention), Anthropic's cache lives 5 minutes
    by default (refreshed on each hit; 1 h on request), DeepSeek's disk cache hours, and
    llama.cpp or vLLM keep a slot's prefix until another request evicts it (set a large value
    for a server that serves one thread, 0 for one shared by many)."""

    search_language: str = Field(default="english", pattern=r"^[a-z][a-z0-9_]{0,62}$")
    """The history search index's language: PostgreSQL's text search configuration of that
    name (`english`, `german`, `simple` for no stemming, ...), SQLite's FTS5 tokenizer
    `porter unicode61` for `english` (FTS5's one stemmer) and plain `unicode61` for any other.
    Read when migration 0012 builds the index; a built index keeps its language (queries
    follow the index, not this setting, so they always agree)."""

    api_keys: SecretStr | None = None
    """`key1=alice,key2=bob`: a bearer key names its actor. Unset: local development mode,
    every request is actor `local`. A pair that is not key=actor, or a key given twice,
    stops start-up (naming the pair by position, never the key). So does a value that names
    no key at all (`AGENT_API_KEYS=""`, or only commas): that is a list of keys gone missing
    (a deployment's secret not filled in), and taking it for local mode would open every
    thread to anyone; leave the variable unset for local mode."""
    max_content_bytes: int = Field(default=256 * 1024, ge=1)
    """Largest user message accepted (UTF-8 bytes); bigger is a 413 before any work is done."""
    durable: Literal["sql", "inline", "dbos"] = "sql"
    """Where runs are journaled. `sql`: the `runs`/`run_steps` tables of the store's database
    (in-process when the store cannot host them). `inline`: no journal (a run cut off by a crash
    is lost; the newest 10,000 ended runs are remembered in memory, with their keys). `dbos`:
    each run a DBOS workflow, each checkpoint a DBOS step (needs the `dbos` extra,
    `pip install '.[dbos]'` from a clone; docs/dbos.md); the thread lease stays in `runs`."""
    dbos_system_database_url: str | None = None
    """DBOS's system database (`AGENT_DURABLE=dbos`); unset: the app's own database (schema
    `dbos` on PostgreSQL). Async drivers are swapped for DBOS's synchronous ones."""
    dbos_executor_id: str | None = None
    """This process's DBOS executor id: DBOS recovers, at start-up, the pending workflows of its
    own executor id only. Give each process its own, stable across restarts; unset is DBOS's
    default (`local`, or `DBOS__VMID`)."""
    dbos_application_version: str | None = None
    """The DBOS application version (recovery only resumes workflows of the same version);
    unset pins `bounded-agents`, code changes being met by the loop's patch markers."""
    run_lease_seconds: float = Field(default=120.0, ge=1, le=7 * 86_400)
    """Lease of a running run on its thread; renewed every third of it while the run works, so
    a run whose process died is resumed (at start-up or by the periodic sweep) once it lapses.
    At least 1 s: a lease a database round trip can outlast is taken from live runs."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Level of the app's own log lines under `python -m app serve` (uvicorn's format)."""
    sweep_seconds: float | None = Field(default=None, ge=0.1, le=86_400)
    """How often each process looks for runs whose lease lapsed (another process died); unset:
    once per AGENT_RUN_LEASE_SECONDS. Lease times are the database's clock, never the host's.
    At most a day: a sweep that never comes would leave a dead process's runs unanswered."""
    sweep_max_resumes: int = Field(default=8, ge=1)
    """Runs of dead processes one process resumes at a time: a sweep claims only as many as
    it has room for, and other processes' sweeps take the rest."""
    journal_retention_seconds: float = Field(default=86_400.0, ge=0, le=100 * 365 * 86_400)
    """A completed run's journal (`run_steps`, ~50 KB a turn with tool calls) is deleted this
    long after it ended; its answer, report and ledger rows stay. Failed runs keep theirs
    until resumed. 0 prunes at the next sweep."""
    failed_run_retention_seconds: float = Field(default=7 * 86_400.0, ge=0, le=100 * 365 * 86_400)
    """A failed run's journal is kept this long after it failed, so it can be resumed
    (`module.loop.resume(run_id)`); then it is deleted like a completed run's, and resuming the run
    is refused (410)."""
    erased_thread_retention_seconds: float = Field(
        default=7 * 86_400.0, ge=0, le=100 * 365 * 86_400
    )
    """After a thread is erased whole, its id and its owner's are kept this long (nothing of its
    content), so a keyed `/v1` retry of the deleted conversation is answered 410
    `answer_erased` instead of running the turn again; then the sweep deletes them, and such a
    retry starts the conversation again as a new request would. Both ids are personal data kept
    after an erasure: the default outlasts any client's retries by far (the SDKs' span
    minutes); shorten it if your privacy terms ask for less. 0 deletes them at the next
    sweep."""
    idempotency_wait_seconds: float = Field(default=30.0, ge=0, le=3_600)
    """How long a request repeating an Idempotency-Key whose turn still runs (in this process
    or another) waits for that turn's answer before it is answered 409 `turn_in_progress`;
    a client whose run another process took over (its lease lapsed) waits as long for it."""
    fingerprint_key: SecretStr | None = None
    """Secret that keys the digest kept of a request sent with an Idempotency-Key
    (`runs.request_fingerprint`, an HMAC-SHA256): without it a digest of a guessed content
    could be confirmed by anyone holding the database, even after the content was erased. At
    least 32 characters; keep it out of the database, the same in every process, and stable
    (a new key makes the repeat of a turn sent before it a 422 `idempotency_key_reused`).
    Unset: derived from AGENT_API_KEYS (a secret every deployment with keys has; changing the
    keys changes it); in local development mode (no keys either) a fixed, public key, as
    guessable as a plain digest."""
    token_quota: int | None = Field(default=None, ge=1)
    """Tokens one actor may spend in total (chat and summaries, as the provider reports them,
    estimated when it reports none); unset means no quota. Checked atomically before every
    model call, concurrent ones included: overshot by at most about one call."""

    search_calls_per_step: int = Field(default=4, ge=1)
    """`search_history` calls one model step may make; the next ones are answered with a short
    refusal the model sees (docs/history.md, "Tool budget")."""
    search_calls_per_turn: int = Field(default=12, ge=1)
    """`search_history` calls one turn may make, all its steps together."""
    tool_result_bytes_per_step: int = Field(default=64 * 1024, ge=1)
    """UTF-8 bytes of tool output (every tool's) one model step's calls may put in the prompt;
    a result past it is replaced by a refusal, so no number of calls can undo the history's
    bound."""
    tool_result_bytes_per_turn: int = Field(default=256 * 1024, ge=1)
    """The same for the whole turn: also what its stored answer carries into later windows."""

    inspector: bool = True
    """Serve the inspector pages at `/inspect` (behind the same actor authentication as the API)."""
    metrics: bool = True
    """Serve Prometheus metrics at `/metrics` (no actor data in them; no authentication)."""
    tracing: bool = True
    """Emit OpenTelemetry spans per run and checkpoint; a no-op until the host configures an
    OpenTelemetry SDK, so leaving it on costs next to nothing without one."""

    trace_content: bool | None = None
    """Put message content in the spans: the user's message, the answers, tool arguments and
    results, error messages (which may quote the input). Unset: as OpenTelemetry's
    `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` says (`true` turns it on), else off.
    Off, spans hold figures, ids and names only: a trace is exported to a backend an erasure
    cannot reach."""

    host: str = "127.0.0.1"
    """Address `python -m app serve` binds."""
    port: int = Field(default=8000, ge=1, le=65535)
    """Port `python -m app serve` listens on, 1-65535: one past it stopped `serve` with
    uvicorn's traceback after the app had started, and 0 (any free port) is one no client
    would know, `chat` included."""
    keep_alive_seconds: int = Field(default=5, ge=1, le=3600)
    """Seconds `python -m app serve` keeps an idle HTTP connection open (uvicorn's
    `timeout_keep_alive`, default 5). Behind a load balancer or proxy that reuses connections,
    set it above that proxy's idle timeout: a proxy that sends on a connection in the instant
    the server closes it gets a reset, and a client a 502 for a request the app never saw."""

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        """The settings as `repr` shows them (and so any log line holding them): URLs with
        their password masked, like the `SecretStr` keys."""
        for name, value in super().__repr_args__():
            if name in _URL_FIELDS and isinstance(value, str):
                value = redacted_url(value)
            yield name, value

    @model_validator(mode="after")
    def _history_is_valid(self) -> Settings:
        try:
            self.history_config()
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return self

    @field_validator("database_url")
    @classmethod
    def _database_url_has_the_async_driver(cls, value: str) -> str:
        problem = database_url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("openai_base_url", "anthropic_base_url")
    @classmethod
    def _base_url_is_an_http_url(cls, value: str) -> str:
        """Parsed as the provider's HTTP client will parse it, so a placeholder left in
        (`http://localhost:PORT/v1`) is one line at start-up, not the client's traceback."""
        problem = base_url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("api_keys")
    @classmethod
    def _api_keys_are_pairs(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not parse_api_keys(value.get_secret_value()):
            raise ValueError(
                f"set but names no key=actor pair; list them like {API_KEYS_FORM}, or "
                "unset AGENT_API_KEYS for local development mode (every request actor 'local')"
            )
        return value

    @field_validator(
        "history_max_messages",
        "history_max_tokens",
        "history_min_messages",
        "history_min_tokens",
        "history_runs",
        "history_summary_token_threshold",
        "history_keep_recent_runs",
        "history_fold_messages",
        "history_fold_max_tokens",
        "history_summary_carry",
        "history_clear_tool_results_keep",
        "history_clear_tool_results_step_tokens",
        "token_quota",
        "openai_max_tokens",
        "openai_prompt_cache_retention",
        "sweep_seconds",
        "trace_content",
        mode="before",
    )
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value

    def history_config(self) -> HistoryConfig | None:
        """The module-wide `history` these settings describe, or None when none is set. Built
        by the same `HistoryConfig` rules as `for_root(history=...)`; a bad combination is a
        `ConfigError` naming the AGENT_HISTORY_* variable."""
        given = {
            key: value
            for key, value in (
                ("max_messages", self.history_max_messages),
                ("max_tokens", self.history_max_tokens),
                ("min_messages", self.history_min_messages),
                ("min_tokens", self.history_min_tokens),
                ("runs", self.history_runs),
                ("summary_token_threshold", self.history_summary_token_threshold),
                ("keep_recent_runs", self.history_keep_recent_runs),
                ("fold_messages", self.history_fold_messages),
                ("fold_max_tokens", self.history_fold_max_tokens),
                ("clear_tool_results_keep", self.history_clear_tool_results_keep),
                ("clear_tool_results_step_tokens", self.history_clear_tool_results_step_tokens),
                # Only beside `summarize`: on its own it describes no history at all.
                ("summary_carry", self.history_summary_carry if self.history_summarize else None),
            )
            if value is not None
        }
        if self.history_summarize:
            given["summarize"] = True
        if not self.history_enabled:
            given["enabled"] = False
        if not given:
            return None
        try:
            return HistoryConfig.model_validate(given)
        except ValidationError as exc:
            raise config_error("history settings", exc, prefix="AGENT_HISTORY_") from None

    @field_validator("fingerprint_key")
    @classmethod
    def _fingerprint_key_is_long(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_FINGERPRINT_KEY_CHARS:
            raise ValueError(
                f"must be at least {MIN_FINGERPRINT_KEY_CHARS} characters (a random secret, "
                "e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
            )
        return value

    def fingerprint_secret(self) -> bytes:
        """The key of request fingerprints (see `fingerprint_key`): the setting, else one
        derived from the API keys, else the public development key."""
        if self.fingerprint_key is not None:
            return self.fingerprint_key.get_secret_value().encode()
        if self.api_keys is not None:
            keys = self.api_keys.get_secret_value().encode()
            return hashlib.sha256(b"bounded-agents request fingerprint\0" + keys).digest()
        return DEVELOPMENT_FINGERPRINT_KEY

    def tool_budget(self) -> ToolBudget:
        """The caps on each turn's tool calls these settings describe."""
        return ToolBudget(
            search_calls_per_step=self.search_calls_per_step,
            search_calls_per_turn=self.search_calls_per_turn,
            result_bytes_per_step=self.tool_result_bytes_per_step,
            result_bytes_per_turn=self.tool_result_bytes_per_turn,
        )

    def captures_content(self) -> bool:
        """Whether spans get message content (see `trace_content`): the setting, else the
        OpenTelemetry GenAI opt-in variable, read when asked (never at import)."""
        if self.trace_content is not None:
            return self.trace_content
        value = os.environ.get(OTEL_CAPTURE_CONTENT, "").strip().lower()
        return value in _OTEL_CAPTURE_ON

    def actor_keys(self) -> dict[str, str]:
        """The API keys as {key: actor id}; empty in local development mode."""
        if self.api_keys is None:
            return {}
        return parse_api_keys(self.api_keys.get_secret_value())


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The environment's settings; a bad one is a `ConfigError` (see `settings_error`), which,
    if nothing catches it (`uvicorn app.main:app` importing the app), prints as one line."""
    try:
        return Settings()
    except ValidationError as exc:
        error = settings_error(exc)
        exit_in_one_line(error)
        raise error from None


def settings_error(exc: ValidationError) -> ConfigError:
    """One line per bad setting, named by its environment variable. Never pydantic's own
    text: it quotes the input, and the input holds every setting given, passwords included."""
    problems = []
    for err in exc.errors(include_input=False, include_url=False):
        message = err["msg"].removeprefix("Value error, ")
        if err["loc"]:
            problems.append(f"AGENT_{str(err['loc'][0]).upper()}: {message}")
        else:  # a cross-field rule (the history settings): its message names the variable
            problems.append(message)
    return ConfigError("invalid settings: " + "; ".join(problems))


__all__ = [
    "API_KEYS_FORM",
    "DEVELOPMENT_FINGERPRINT_KEY",
    "MIN_FINGERPRINT_KEY_CHARS",
    "OTEL_CAPTURE_CONTENT",
    "Settings",
    "base_url_problem",
    "database_url_problem",
    "get_settings",
    "parse_api_keys",
    "settings_error",
]
