"""A provider that lies, over HTTP and to the loop: fixtures of tests/http, tests/loop and
tests/providers reused."""

from tests.http.conftest import client, make_module, stack
from tests.loop.conftest import dbos_launched, env, runtime_name
from tests.providers.conftest import claude, fake_anthropic, fake_openai, http_client

__all__ = [
    "claude",
    "client",
    "dbos_launched",
    "env",
    "fake_anthropic",
    "fake_openai",
    "http_client",
    "make_module",
    "runtime_name",
    "stack",
]
