"""Bounded-history agents for FastAPI.

The public names are loaded lazily, so `import app.core` stays free of FastAPI and SQLAlchemy.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["Actor", "AgentModule", "HistoryConfig", "agent", "tool"]

_WHERE = {
    "Actor": "app.module",
    "AgentModule": "app.module",
    "agent": "app.module",
    "tool": "app.module",
    "HistoryConfig": "app.core.history",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'app' has no attribute {name!r}")
