"""Thread stores: `SqlAgentStore` (PostgreSQL, SQLite) and `MemoryStore` (full read only), and
the capability a store implements to host the SQL run journal and ledger (`SqlJournalHost`)."""

from app.store.host import SqlJournalHost, hosts_sql_journal
from app.store.memory import MemoryStore
from app.store.sql import SqlAgentStore

__all__ = ["MemoryStore", "SqlAgentStore", "SqlJournalHost", "hosts_sql_journal"]
