"""Reliability fixtures reuse the fake OpenAI-compatible server of the provider tests, and the
HTTP fixtures (`stack`, `make_module`, `client`) of tests/http."""

from tests.http.conftest import client, make_module, stack
from tests.providers.conftest import fake_openai, http_client

__all__ = ["client", "fake_openai", "http_client", "make_module", "stack"]
