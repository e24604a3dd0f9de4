"""The database's clock, as SQL expressions: lease times are read and written by it alone.

Several app processes on several hosts share one database. If each wrote a lease's expiry from
its own clock and another judged it by its own, a host whose clock runs ahead would take over a
live run early, and one whose clock lags would hold a dead one's thread too long. One clock
fixes both: the database server's, evaluated in the statement that writes or tests the lease.

SQLite is embedded, so its clock is the host's; it is still asked in SQL, in the text format
SQLAlchemy stores datetimes in there (`YYYY-MM-DD HH:MM:SS.ffffff`, compared as strings).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal


class DbNow(ColumnElement[Any]):
    """The database's current time, `seconds` ahead (may be negative)."""

    inherit_cache = True
    type = sa.DateTime(timezone=True)
    # Each distinct offset compiles to its own SQL text, so it belongs in the cache key.
    _traverse_internals = [("seconds", InternalTraversal.dp_plain_obj)]  # noqa: RUF012 - SQLAlchemy's shape

    def __init__(self, seconds: float) -> None:
        self.seconds = float(seconds)


def db_now(seconds: float = 0.0) -> DbNow:
    """The database's current time, `seconds` ahead (negative: behind)."""
    return DbNow(seconds)


@compiles(DbNow, "postgresql")
def _postgresql(element: DbNow, _compiler: Any, **_kw: Any) -> str:
    # statement_timestamp(), not now(): a lease renewed late in a long transaction must not be
    # dated from the transaction's start.
    if element.seconds == 0:
        return "statement_timestamp()"
    return f"(statement_timestamp() + interval '{element.seconds:.6f} seconds')"


@compiles(DbNow, "sqlite")
def _sqlite(element: DbNow, _compiler: Any, **_kw: Any) -> str:
    # %f is SS.SSS: three more digits make the microseconds SQLAlchemy writes and parses.
    return f"strftime('%Y-%m-%d %H:%M:%f000', 'now', '{element.seconds:+.3f} seconds')"


@compiles(DbNow)
def _default(element: DbNow, _compiler: Any, **_kw: Any) -> str:
    raise NotImplementedError("the database clock is written for PostgreSQL and SQLite")
