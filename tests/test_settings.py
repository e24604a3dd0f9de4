"""Settings come from AGENT_* variables, and a wrong one is a clear error at start-up."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.settings import Settings


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


def test_a_summary_without_a_window_is_refused() -> None:
    with pytest.raises(ValidationError, match="AGENT_HISTORY_SUMMARIZE needs"):
        Settings(history_summarize=True)


def test_malformed_api_keys_name_the_expected_shape() -> None:
    with pytest.raises(ValueError, match="key1=alice"):
        Settings(api_keys="just-a-key").actor_keys()
