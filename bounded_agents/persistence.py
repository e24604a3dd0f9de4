"""The persistence bundle: the store, run journal and ledger a module keeps, chosen by one rule
(`build_persistence`), and the same bundle's start-up and shutdown (migrate, launch, shut down,
dispose) in the lifespan.

Both halves ask what each piece can do (`hosts_sql_journal` and the `supports_*` probes of
`bounded_agents.core.ports`), never which class it is: a store of your own on this project's
schema is chosen, migrated and disposed of the way `SqlAgentStore` is.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from bounded_agents.core.ports import (
    AgentStore,
    DurableRuntime,
    Ledger,
    supports_disposal,
    supports_launch,
    supports_migrations,
    supports_search_indexing,
)
from bounded_agents.core.search import SEARCH_TOOL_NAME
from bounded_agents.core.turn import AgentDefinition
from bounded_agents.durable import InlineRuntime, SqlJournal
from bounded_agents.errors import ConfigError
from bounded_agents.settings import Settings
from bounded_agents.store import SqlAgentStore, dialect_of_url
from bounded_agents.store.host import hosts_sql_journal
from bounded_agents.store.ledger import MemoryLedger, SqlLedger

log = logging.getLogger("bounded_agents")

NOT_RESUMED = "a run cut off by a crash is not resumed"
SPEND_LOST = "spent tokens (and quotas) start from zero at every restart"


@dataclass(frozen=True)
class Persistence:
    """What `build_persistence` chose, and what the lifespan does with it."""

    store: AgentStore
    journal: DurableRuntime
    """As built or given, not the tracing wrapper the loop runs it in: the probes here see the
    runtime itself."""
    ledger: Ledger
    owns_store: bool
    """The store was built here from AGENT_DATABASE_URL, so shutdown disposes of it; a given
    store is its owner's to close."""
    note: tuple[int, str]
    """The start-up log line (level, text): which journal and ledger, and what is lost when
    they live in process."""

    async def migrate(self) -> None:
        """Bring the store's database to the newest schema, when the store keeps one."""
        if supports_migrations(self.store):
            await self.store.create_schema()

    async def index_search(self, agents: Mapping[str, AgentDefinition]) -> None:
        """Keep the store's search index for the agents that search alone (issue 37): the
        others' turns stop feeding it; an agent that turned search on has its threads' older
        messages indexed now, in bounded batches, so its searches find them."""
        if not supports_search_indexing(self.store):
            return
        searching = [name for name, d in agents.items() if SEARCH_TOOL_NAME in d.tools]
        others = [name for name in agents if name not in searching]
        indexed = await self.store.index_agents(searching, others)
        if indexed:
            log.info("history search: %d earlier messages indexed", indexed)

    async def launch(self, settings: Settings) -> None:
        """Start a runtime run by an engine of its own (DBOS: `AGENT_DURABLE=dbos`): after the
        migrations, before the sweep, since its recovery of this executor's runs starts here."""
        if supports_launch(self.journal):
            await self.journal.launch(
                settings.dbos_system_database_url or settings.database_url,
                executor_id=settings.dbos_executor_id,
                application_version=settings.dbos_application_version,
            )

    async def shutdown(self) -> None:
        """Stop what `launch` started."""
        if supports_launch(self.journal):
            await self.journal.shutdown()

    async def dispose(self) -> None:
        """Close the store's connections, if this module built the store."""
        if self.owns_store and supports_disposal(self.store):
            await self.store.dispose()


def build_persistence(
    *,
    store: AgentStore | None,
    journal: DurableRuntime | None,
    ledger: Ledger | None,
    settings: Settings,
) -> Persistence:
    """The one rule. Given pieces win. Without a store, the SQL store on AGENT_DATABASE_URL.
    Without a journal or a ledger, both live in the store's own database when it can host them
    (`hosts_sql_journal`); a store that cannot gets in-process ones, and the start-up line is
    then a warning, since a run cut off by a crash is not resumed and spend (with any quota)
    starts from zero at every restart."""
    owns_store = store is None
    if store is None:
        store = store_from_settings(settings)
    journal, journal_from, journal_lost = _journal(store, journal, settings)
    ledger, ledger_from, ledger_lost = _ledger(store, ledger)
    lost = [*journal_lost, *ledger_lost]
    note = (
        f"run journal: {type(journal).__name__} ({journal_from}); "
        f"ledger: {type(ledger).__name__} ({ledger_from})"
    )
    level = logging.INFO
    if lost:
        level = logging.WARNING
        note += (
            f". {type(store).__name__} cannot host the SQL journal, so {' and '.join(lost)}; "
            "pass journal= and ledger= to keep them"
        )
    return Persistence(store, journal, ledger, owns_store=owns_store, note=(level, note))


def store_from_settings(settings: Settings) -> SqlAgentStore:
    """The SQL store on AGENT_DATABASE_URL, with the AGENT_DB_* pool settings."""
    if settings.db_pgbouncer and not dialect_of_url(settings.database_url).postgres:
        log.warning("AGENT_DB_PGBOUNCER is ignored: AGENT_DATABASE_URL is not PostgreSQL")
    return SqlAgentStore.from_url(
        settings.database_url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_timeout=settings.db_pool_timeout,
        statement_timeout=settings.db_statement_timeout,
        pgbouncer=settings.db_pgbouncer,
    )


def _journal(
    store: AgentStore, journal: DurableRuntime | None, settings: Settings
) -> tuple[DurableRuntime, str, list[str]]:
    """The run journal AGENT_DURABLE asks for, where it came from, and what it loses."""
    if journal is not None:
        return journal, "given", []
    if settings.durable == "dbos":
        if not hosts_sql_journal(store):
            raise ConfigError(
                f"AGENT_DURABLE=dbos keeps the thread lease in the store's database, but "
                f"{type(store).__name__} cannot host it"
            )
        runtime = dbos_runtime(store.engine, settings)
        return runtime, "DBOS workflows; leases in the store's database", []
    if settings.durable == "inline":
        return InlineRuntime(), "in process, AGENT_DURABLE=inline", [NOT_RESUMED]
    if hosts_sql_journal(store):
        sql = SqlJournal(store.engine, lease_seconds=settings.run_lease_seconds)
        return sql, "the store's database", []
    return InlineRuntime(), "in process", [NOT_RESUMED]


def _ledger(store: AgentStore, ledger: Ledger | None) -> tuple[Ledger, str, list[str]]:
    """The ledger, where it came from, and what it loses."""
    if ledger is not None:
        return ledger, "given", []
    if hosts_sql_journal(store):
        return SqlLedger(store.engine), "the store's database", []
    return MemoryLedger(), "in process", [SPEND_LOST]


def dbos_runtime(engine: AsyncEngine, settings: Settings) -> DurableRuntime:
    """The DBOS runtime (`AGENT_DURABLE=dbos`), or a ConfigError naming the missing extra."""
    try:
        from bounded_agents.durable.dbos_runtime import DbosRuntime
    except ImportError as exc:
        raise ConfigError(
            "AGENT_DURABLE=dbos needs the dbos package (the dbos extra: "
            f"pip install '.[dbos]' from a clone) ({exc})"
        ) from None
    return DbosRuntime(engine, lease_seconds=settings.run_lease_seconds)


__all__ = ["Persistence", "build_persistence", "dbos_runtime", "store_from_settings"]
