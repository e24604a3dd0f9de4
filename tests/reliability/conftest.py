"""Reliability fixtures reuse the fake OpenAI-compatible server of the provider tests."""

from tests.providers.conftest import fake_openai, http_client

__all__ = ["fake_openai", "http_client"]
