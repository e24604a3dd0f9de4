"""The path `bounded_agents.http.openai_api` documented before the `/v1` API became the package
`bounded_agents.http.openai`: kept so `from bounded_agents.http.openai_api import
build_openai_router` still works. New code imports from `bounded_agents.http.openai`."""

from __future__ import annotations

from bounded_agents.http.openai.api import build_openai_router

__all__ = ["build_openai_router"]
