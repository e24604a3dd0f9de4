"""The capability that lets a store keep the run journal and the token ledger next to its threads.

The journal's tables (`runs`, `run_steps`) and the ledger's (`ledger`, `actor_usage`) are part of
this project's schema, so a store whose threads live in a database migrated with that schema can
host them too, on its own engine. `build_persistence` (what `AgentModule.for_root` chooses them
with) asks `hosts_sql_journal(store)` rather than which class the store is, so a store of your
own on that database gets durable runs as `SqlAgentStore` does.

It lives here and not in `bounded_agents.core.ports` because it names SQLAlchemy's `AsyncEngine`,
which the framework-free core must not import.
"""

from __future__ import annotations

from typing import Protocol, TypeGuard, runtime_checkable

from sqlalchemy.ext.asyncio import AsyncEngine


@runtime_checkable
class SqlJournalHost(Protocol):
    """Optional: a store on a SQL database with this project's schema (see the module docstring)."""

    @property
    def engine(self) -> AsyncEngine:
        """The store's engine; the journal and the ledger share its pool and its database."""
        ...


def hosts_sql_journal(store: object) -> TypeGuard[SqlJournalHost]:
    """runtime_checkable sees only that an `engine` attribute exists, so its type is checked as
    well: a store whose `engine` is something else is not mistaken for a SQL one."""
    return isinstance(store, SqlJournalHost) and isinstance(store.engine, AsyncEngine)


__all__ = ["SqlJournalHost", "hosts_sql_journal"]
