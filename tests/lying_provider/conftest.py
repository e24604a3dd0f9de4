"""A provider that lies, over HTTP: fixtures of tests/http and tests/providers reused."""

from tests.http.conftest import client, make_module, stack
from tests.providers.conftest import fake_anthropic, fake_openai, http_client

__all__ = ["client", "fake_anthropic", "fake_openai", "http_client", "make_module", "stack"]
