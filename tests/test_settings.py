"""Settings come from AGENT_* variables, and a wrong one is a clear error at start-up."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from bounded_agents.core.history import HistoryConfig, WindowHistory, policy_from_config
from bounded_agents.errors import ConfigError
from bounded_agents.providers.echo import EchoModel
from bounded_agents.settings import DEVELOPMENT_FINGERPRINT_KEY, Settings, get_settings


def _settings_error() -> str:
    """The one-line `ConfigError` the environment's settings raise, read afresh (the settings
    are cached per process, so the cache is cleared before and after)."""
    get_settings.cache_clear()
    try:
        with pytest.raises(ConfigError) as caught:
            get_settings()
    finally:
        get_settings.cache_clear()
    return str(caught.value)


def test_settings_read_the_agent_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_DATABASE_URL", "sqlite+aiosqlite:///x.db")
    monkeypatch.setenv("AGENT_HISTORY_MAX_MESSAGES", "12")
    monkeypatch.setenv("AGENT_API_KEYS", "k1=alice, k2=bob")
    settings = Settings()
    assert settings.database_url == "sqlite+aiosqlite:///x.db"
    config = settings.history_config()
    assert config is not None and config.max_messages == 12
    assert settings.actor_keys() == {"k1": "alice", "k2": "bob"}
    assert "k1" not in repr(settings)


def test_no_history_setting_means_no_module_ceiling() -> None:
    assert Settings(history_max_messages="").history_config() is None


def test_a_summary_without_a_limit_is_the_default_forty_message_window() -> None:
    """One rule with `for_root(history={"summarize": True})`: the window's default limit."""
    config = Settings(history_summarize=True).history_config()
    assert config == HistoryConfig(summarize=True)
    policy = policy_from_config(config, EchoModel())
    assert isinstance(policy, WindowHistory) and policy.count_limit == 40


def test_every_history_knob_has_an_agent_history_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(history_runs=4).history_config() == HistoryConfig(runs=4)
    assert Settings(history_enabled=False).history_config() == HistoryConfig(enabled=False)
    fold = Settings(history_max_messages=10, history_summarize=True, history_fold_messages=6)
    assert fold.history_config() == HistoryConfig(max_messages=10, summarize=True, fold_messages=6)
    monkeypatch.setenv("AGENT_HISTORY_SUMMARY_TOKEN_THRESHOLD", "3000")
    monkeypatch.setenv("AGENT_HISTORY_KEEP_RECENT_RUNS", "3")
    monkeypatch.setenv("AGENT_HISTORY_SUMMARIZE", "true")
    monkeypatch.setenv("AGENT_HISTORY_FOLD_MAX_TOKENS", "2000")
    config = Settings().history_config()
    assert config == HistoryConfig(
        summary_token_threshold=3000, keep_recent_runs=3, summarize=True, fold_max_tokens=2000
    )


@pytest.mark.parametrize(
    ("values", "variable"),
    [
        ({"history_runs": 3, "history_max_messages": 5}, "AGENT_HISTORY_RUNS"),
        ({"history_summary_token_threshold": 100}, "AGENT_HISTORY_SUMMARY_TOKEN_THRESHOLD"),
        (
            {"history_keep_recent_runs": 2, "history_max_messages": 5},
            "AGENT_HISTORY_KEEP_RECENT_RUNS",
        ),
        ({"history_fold_messages": 2, "history_max_messages": 5}, "AGENT_HISTORY_FOLD_MESSAGES"),
        ({"history_runs": 0}, "history_runs"),
    ],
)
def test_a_bad_history_setting_names_its_variable(values: dict[str, object], variable: str) -> None:
    with pytest.raises(ValidationError, match=variable):
        Settings(**values)  # type: ignore[arg-type]


def test_malformed_api_keys_name_the_expected_shape() -> None:
    with pytest.raises(ValueError, match="key1=alice"):
        Settings(api_keys="just-a-key").actor_keys()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("s3cr3t-key", "pair 1 is not key=actor; write it like 'key1=alice,key2=bob'"),
        ("k1=alice,s3cr3t-key=", "pair 2 is not key=actor"),
        ("k1=alice,=bob", "pair 2 is not key=actor"),
        ("s3cr3t-key=alice,k2=bob,s3cr3t-key=mallory", "pair 3 repeats an earlier pair's key"),
        ("s3cr3t-key=alice, s3cr3t-key =alice", "pair 2 repeats an earlier pair's key"),
        # issue 40: `;` as the separator made `Bearer key1` actor 'alice;key2=bob'
        ("s3cr3t-key=alice;k2=bob", "pair 1 holds ';' or whitespace"),
        ("k1=alice,s3cr3t key=bob", "pair 2 holds ';' or whitespace"),
        ("k1=al ice", "pair 1 holds ';' or whitespace"),
        ("k1=alice\tk2=bob", "pair 1 holds ';' or whitespace"),
        ("k1=alice=s3cr3t", "pair 1 is not key=actor"),
    ],
)
def test_bad_or_repeated_api_keys_are_one_line_at_start_up_without_the_keys(
    monkeypatch: pytest.MonkeyPatch, value: str, problem: str
) -> None:
    """Found by attack: `AGENT_API_KEYS=key1` was a 24-line traceback at the first request's
    module build (exit 1), and a repeated key silently went to the last actor named."""
    monkeypatch.setenv("AGENT_API_KEYS", value)
    message = _settings_error()
    assert message.startswith(f"invalid settings: AGENT_API_KEYS: {problem}"), message
    assert "\n" not in message and "s3cr3t" not in message
    assert "'key1=alice,key2=bob'" in message  # the expected form, every time


@pytest.mark.parametrize("value", ["", "   ", ",", " , ,"])
def test_api_keys_set_but_naming_no_key_stop_start_up_instead_of_opening_local_mode(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """`AGENT_API_KEYS=""` (a secret not filled in) used to parse to no keys, so every request
    became actor `local`, with only a start-up warning. Unset is local mode; set is keys."""
    monkeypatch.setenv("AGENT_API_KEYS", value)
    message = _settings_error()
    assert message.startswith(
        "invalid settings: AGENT_API_KEYS: set but names no key=actor pair"
    ), message
    assert "unset AGENT_API_KEYS for local development mode" in message
    with pytest.raises(ValidationError, match="names no key=actor pair"):
        Settings(api_keys=value)  # type: ignore[arg-type]


def test_unset_api_keys_are_local_mode_and_a_trailing_comma_is_no_empty_list() -> None:
    assert Settings(api_keys=None).actor_keys() == {}
    assert Settings(api_keys="k1=alice,").actor_keys() == {"k1": "alice"}


def test_two_keys_for_one_actor_are_fine() -> None:
    """Rotating a key means both work for a while: the same actor twice is no repeat."""
    assert Settings(api_keys="old=alice,new=alice").actor_keys() == {"old": "alice", "new": "alice"}


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (
            "postgresql://app:s3cr3t@db/agents",
            "postgresql:// lacks the app's driver: write postgresql+asyncpg:// in its place",
        ),
        (
            "postgres://app:s3cr3t@db/agents",
            "postgres:// lacks the app's driver: write postgresql+asyncpg:// in its place",
        ),
        (
            "postgresql+psycopg2://app:s3cr3t@db/agents",
            "postgresql+psycopg2:// lacks the app's driver: write postgresql+asyncpg://",
        ),
        ("sqlite:///./agent.db", "sqlite:// lacks the app's driver: write sqlite+aiosqlite://"),
        ("mysql+aiomysql://app:s3cr3t@db/x", "mysql+aiomysql:// is not supported; write"),
        ("./agent.db", "not a database URL; write postgresql+asyncpg://user@host/db or"),
    ],
)
def test_a_database_url_without_the_async_driver_says_what_to_write(
    monkeypatch: pytest.MonkeyPatch, url: str, problem: str
) -> None:
    """Found by attack: `postgresql://` said only `ModuleNotFoundError` (or, with psycopg2
    installed, a traceback); `sqlite://` said `InvalidRequestError`."""
    monkeypatch.setenv("AGENT_DATABASE_URL", url)
    message = _settings_error()
    assert message.startswith(f"invalid settings: AGENT_DATABASE_URL: {problem}"), message
    assert "s3cr3t" not in message


@pytest.mark.parametrize(
    "url",
    ["postgresql+asyncpg://app@db/agents", "sqlite+aiosqlite:///./agent.db", "sqlite+aiosqlite://"],
)
def test_the_async_drivers_urls_are_accepted(url: str) -> None:
    assert Settings(database_url=url).database_url == url


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("run_lease_seconds", 1e300),  # would overflow the database's interval on every turn
        ("journal_retention_seconds", 1e300),
        ("journal_retention_seconds", -1),
        ("failed_run_retention_seconds", -1),
        ("failed_run_retention_seconds", 1e300),
        ("sweep_seconds", 0.001),  # a sweep a millisecond would hammer the database
        ("sweep_max_resumes", 0),
        # Found by attack: a lease of 1e-300 s (or 0.01) had two processes take live runs from
        # each other (3 turns, 34 model calls, 409 lease_lost) and one idle process sweep
        # 800 times a second; a sweep of inf never resumed a dead process's runs.
        ("run_lease_seconds", 1e-300),
        ("run_lease_seconds", 0.5),
        ("sweep_seconds", float("inf")),
        ("sweep_seconds", 1e300),
    ],
)
def test_lease_sweep_and_retention_settings_refuse_values_the_database_cannot_take(
    name: str, value: float
) -> None:
    with pytest.raises(ValidationError):
        Settings(**{name: value})


def test_an_empty_sweep_setting_means_unset_like_the_others() -> None:
    assert Settings(sweep_seconds="").sweep_seconds is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("AGENT_SWEEP_SECONDS", "garbage"),
        ("AGENT_RUN_LEASE_SECONDS", "nan"),
        ("AGENT_DURABLE", "SQL"),
        ("AGENT_DB_PGBOUNCER", "maybe"),
        ("AGENT_JOURNAL_RETENTION_SECONDS", "-1"),
        # Found by attack: each passed the settings and stopped `serve` with a traceback.
        ("AGENT_PORT", "70000"),
        ("AGENT_PORT", "-1"),
        ("AGENT_OPENAI_BASE_URL", "http://localhost:PORT/v1"),
        ("AGENT_OPENAI_BASE_URL", "localhost:8080/v1"),
        ("AGENT_ANTHROPIC_BASE_URL", "https://gateway.example:99999"),
    ],
)
def test_a_bad_environment_variable_is_one_config_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    message = _settings_error()
    assert re.search(f"^invalid settings: {variable}: ", message), message
    assert "\n" not in message


def test_a_settings_error_never_quotes_a_password(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by attack: pydantic's message quoted the tail of every setting given, so a bad
    history setting printed the DBOS system database's password beside it."""
    monkeypatch.setenv("AGENT_HISTORY_MAX_MESSAGES", "-3")
    monkeypatch.setenv("AGENT_DATABASE_URL", "postgresql+asyncpg://app:s3cr3t-db@db/x")
    monkeypatch.setenv("AGENT_DBOS_SYSTEM_DATABASE_URL", "postgresql://app:s3cr3t-dbos@db/x")
    monkeypatch.setenv("AGENT_OPENAI_API_KEY", "sk-s3cr3t-key")
    monkeypatch.setenv("AGENT_OPENAI_BASE_URL", "https://app:s3cr3t-gw@gateway:PORT/v1")
    # a password with `/` or `#` is read as no password by a URL parser (found by review)
    monkeypatch.setenv("AGENT_ANTHROPIC_BASE_URL", "https://app:Xy7/s3cr3t#x@gateway/v1")
    message = _settings_error()
    assert re.search("AGENT_HISTORY_MAX_MESSAGES", message), message
    assert "s3cr3t" not in message


def test_the_cap_field_is_a_setting_that_reaches_the_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """AGENT_OPENAI_MAX_TOKENS_FIELD picks the request field of AGENT_OPENAI_MAX_TOKENS, for
    servers that refuse `max_tokens`; any other value is refused at start-up."""
    from bounded_agents.module import AgentModule
    from bounded_agents.providers import OpenAICompatibleProvider

    monkeypatch.setenv("AGENT_MODEL", "openai")
    monkeypatch.setenv("AGENT_OPENAI_MODEL", "o3-mini")
    monkeypatch.setenv("AGENT_OPENAI_MAX_TOKENS", "500")
    monkeypatch.setenv("AGENT_OPENAI_MAX_TOKENS_FIELD", "max_completion_tokens")
    settings = Settings(database_url="sqlite+aiosqlite:///:memory:", migrate_on_start=False)
    model = AgentModule.for_root(agents=[], settings=settings).loop.model
    assert isinstance(model, OpenAICompatibleProvider)
    assert (model.max_tokens, model.max_tokens_field) == (500, "max_completion_tokens")
    assert Settings().openai_max_tokens_field == "max_completion_tokens"
    monkeypatch.setenv("AGENT_OPENAI_MAX_TOKENS_FIELD", "max_output_tokens")
    with pytest.raises(ValidationError, match="max_completion_tokens"):
        Settings()


def test_the_fingerprint_key_is_the_setting_else_derived_from_the_api_keys() -> None:
    key = "k" * 32
    assert Settings(fingerprint_key=key).fingerprint_secret() == key.encode()
    derived = Settings(api_keys="key-a=alice").fingerprint_secret()
    assert len(derived) == 32 and b"key-a" not in derived
    assert Settings(api_keys="key-b=alice").fingerprint_secret() != derived
    assert Settings().fingerprint_secret() == DEVELOPMENT_FINGERPRINT_KEY
    with pytest.raises(ValidationError, match="at least 32 characters"):
        Settings(fingerprint_key="short")
