"""Which database a connection talks to, asked in ONE place: PostgreSQL or SQLite.

The project speaks SQL to two databases, and they differ in what they can do, not only in how
they spell it: PostgreSQL has row locks (`FOR UPDATE`), data-modifying CTEs, asyncpg's
`executemany`, `tsvector` search and Citus; SQLite has one writer per file, FTS5, PRAGMAs and
Alembic's batch mode for table changes. Every place that branches on that difference (the
store, the journal through the store, the migrations) asks `dialect_of(...)` or
`dialect_of_url(...)` for a `SqlDialect` and reads its flags, so the list of differences is
this module's and a third database would be one more row here, and a refusal everywhere else
until then (`tests/test_architecture.py` holds `dialect.name` to this module).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Protocol

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect, make_url

from bounded_agents.errors import ConfigError


@dataclass(frozen=True, slots=True)
class SqlDialect:
    """What the project needs to know about one database."""

    name: str
    """SQLAlchemy's name for it (`postgresql`, `sqlite`)."""
    postgres: bool
    """Row locks, data-modifying CTEs, asyncpg's `executemany`, `tsvector`, Citus."""
    sqlite: bool
    """One writer per file, FTS5, PRAGMAs (foreign keys, secure delete), batch migrations."""
    insert: Callable[[sa.Table], Any]
    """`INSERT` with `.on_conflict_do_nothing()`: a construct of the dialect's own."""


POSTGRESQL: Final = SqlDialect("postgresql", postgres=True, sqlite=False, insert=postgresql.insert)
SQLITE: Final = SqlDialect("sqlite", postgres=False, sqlite=True, insert=sqlite.insert)

DIALECTS: Final[Mapping[str, SqlDialect]] = MappingProxyType(
    {d.name: d for d in (POSTGRESQL, SQLITE)}
)
"""Every database the project runs on, by SQLAlchemy's name."""


class HasDialect(Protocol):
    """An engine or a connection, sync or async (Alembic's `op.get_bind()` included)."""

    @property
    def dialect(self) -> Dialect: ...


def _named(name: str) -> SqlDialect:
    found = DIALECTS.get(name)
    if found is None:
        raise ConfigError(f"bounded-agents runs on PostgreSQL or SQLite, not {name!r}")
    return found


def dialect_of(bind: HasDialect | Dialect) -> SqlDialect:
    """The database `bind` (an engine, a connection, or SQLAlchemy's `Dialect`) talks to;
    `ConfigError` for one the project does not run on."""
    dialect = bind if isinstance(bind, Dialect) else bind.dialect
    return _named(dialect.name)


def dialect_of_url(url: str | sa.URL) -> SqlDialect:
    """The database a URL names (`postgresql+asyncpg://...` is PostgreSQL), before any engine
    exists; `ConfigError` for one the project does not run on."""
    return _named(make_url(url).get_backend_name())


__all__ = [
    "DIALECTS",
    "POSTGRESQL",
    "SQLITE",
    "HasDialect",
    "SqlDialect",
    "dialect_of",
    "dialect_of_url",
]
