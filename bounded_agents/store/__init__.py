"""Thread stores: `SqlAgentStore` (PostgreSQL, SQLite) and `MemoryStore` (full read only), and
the capability a store implements to host the SQL run journal and ledger (`SqlJournalHost`)."""

from bounded_agents.store.host import SqlJournalHost, hosts_sql_journal
from bounded_agents.store.memory import MemoryStore
from bounded_agents.store.sql import SqlAgentStore

__all__ = ["MemoryStore", "SqlAgentStore", "SqlJournalHost", "hosts_sql_journal"]
