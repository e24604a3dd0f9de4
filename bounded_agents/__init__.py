"""Bounded-history agents for FastAPI: `from bounded_agents import AgentModule, agent, tool`.

The public names are loaded on first use, so `import bounded_agents.core` stays free of FastAPI
and SQLAlchemy. Type checkers read the imports under `TYPE_CHECKING` and see each name's real
type; `__getattr__` serves the same objects at run time, and `__dir__` lists them before they
are loaded (`tests/test_public_api.py` holds the three lists equal).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bounded_agents.actors import Actor
    from bounded_agents.core.history.config import HistoryConfig
    from bounded_agents.module import AgentModule
    from bounded_agents.registry import agent, tool

__all__ = ["Actor", "AgentModule", "HistoryConfig", "agent", "tool"]

_WHERE = {
    "Actor": "bounded_agents.actors",
    "AgentModule": "bounded_agents.module",
    "agent": "bounded_agents.registry",
    "tool": "bounded_agents.registry",
    "HistoryConfig": "bounded_agents.core.history.config",
}


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module 'bounded_agents' has no attribute {name!r}")
    if name == "AgentModule":
        # The routes register the factory that serves the deprecated `module.router` (one
        # release): `bounded_agents.module` itself imports nothing of `http`.
        import_module("bounded_agents.http.router")
    found = getattr(import_module(_WHERE[name]), name)
    globals()[name] = found  # served once: later reads are plain attribute reads
    return found


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
