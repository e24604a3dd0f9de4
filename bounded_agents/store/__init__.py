"""Thread stores, and the SQL surface the rest of the library builds on.

The stores: `SqlAgentStore` (PostgreSQL, SQLite) and `MemoryStore` (full read only), and the
capability a store implements to host the SQL run journal and ledger (`SqlJournalHost`).

The SQL surface: what the SQL journal (`bounded_agents.durable`) and the wiring use of the
store's internals, exported here so they import this package and no module of it, and a module
of the store can be split or renamed without reaching into `durable/`:

    tables            `runs`, `run_steps`, `messages` (`schema.py`)
    transactions      `write_transaction`, `autocommit` (`engine.py`), `SqlTransaction`,
                      `joined`, `open_write` (`tx.py`), `wrap_db_errors` (`errors.py`)
    writes            `direct`: statements sent without SQLAlchemy's per-call work (what they
                      share with the turn's read: `driver.py`; PostgreSQL's waiting writes:
                      `waiting.py`)
    time              `db_now` (the database's clock), `aware_utc`
    dialect           `dialect_of`, `dialect_of_url`, `SqlDialect` (`dialect.py`): the one place
                      that tells PostgreSQL from SQLite
"""

from bounded_agents.store import direct
from bounded_agents.store.clock import db_now
from bounded_agents.store.dialect import SqlDialect, dialect_of, dialect_of_url
from bounded_agents.store.engine import autocommit, write_transaction
from bounded_agents.store.errors import wrap_db_errors
from bounded_agents.store.host import SqlJournalHost, hosts_sql_journal
from bounded_agents.store.memory import MemoryStore
from bounded_agents.store.schema import messages, run_steps, runs, threads
from bounded_agents.store.sql import SqlAgentStore, aware_utc
from bounded_agents.store.tx import SqlTransaction, joined, open_write

__all__ = [
    "MemoryStore",
    "SqlAgentStore",
    "SqlDialect",
    "SqlJournalHost",
    "SqlTransaction",
    "autocommit",
    "aware_utc",
    "db_now",
    "dialect_of",
    "dialect_of_url",
    "direct",
    "hosts_sql_journal",
    "joined",
    "messages",
    "open_write",
    "run_steps",
    "runs",
    "threads",
    "wrap_db_errors",
    "write_transaction",
]
