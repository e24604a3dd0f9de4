"""Thread stores: `SqlAgentStore` (PostgreSQL, SQLite) and `MemoryStore` (full read only)."""

from app.store.memory import MemoryStore
from app.store.sql import SqlAgentStore

__all__ = ["MemoryStore", "SqlAgentStore"]
