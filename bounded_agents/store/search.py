"""The history search's SQL: one ranked full-text query of ONE thread's messages.

PostgreSQL reads `messages.search_vector` (a generated `to_tsvector('simple', content)`, GIN
indexed: migration 0011); SQLite reads `messages_fts`, an FTS5 index over `messages.content`
kept by triggers. Both are kept out of `schema.metadata` (a dialect-specific column and a
virtual table with shadow tables of its own), so the schema comparison skips them by name
(`is_search_object`).

The query is the model's text and never syntax. PostgreSQL parses it with its own parser
(`to_tsvector('simple', :q)`), and ORs the lexemes it finds, each quoted (a quote doubled, a
backslash escaped, as tsquery input wants), into a tsquery: any
word matches, `ts_rank` orders. SQLite gets the core's words (`search_terms`), each a quoted
FTS5 string, ORed: `bm25()` orders. Either way a quote, `*`, `NEAR(` or `-` is just not a word.
Every statement says `thread_id = :tid`: on Citus one shard answers it.
"""

from __future__ import annotations

from collections.abc import Mapping

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from bounded_agents.core.messages import Message
from bounded_agents.core.search import search_terms
from bounded_agents.store.codec import from_row
from bounded_agents.store.dialect import dialect_of

SEARCH_COLUMN = "search_vector"
SEARCH_INDEX = "ix_messages_search_vector"
FTS_TABLE = "messages_fts"

_COLUMNS = "m.seq, m.role, m.content, m.tool_calls, m.tool_results, m.attachments, m.run_id"

_PG_SEARCH = sa.text(
    f"""
    WITH q AS (
        SELECT array_to_string(
            ARRAY(SELECT '''' || replace(replace(lexeme, '\\', '\\\\'), '''', '''''') || ''''
                  FROM unnest(tsvector_to_array(to_tsvector('simple', :q))) AS lexeme),
            ' | '
        )::tsquery AS query
    )
    SELECT {_COLUMNS}
    FROM messages m, q
    WHERE m.thread_id = :tid AND m.{SEARCH_COLUMN} @@ q.query
    ORDER BY ts_rank(m.{SEARCH_COLUMN}, q.query) DESC, m.seq DESC
    LIMIT :limit
    """
)

_SQLITE_SEARCH = sa.text(
    f"""
    SELECT {_COLUMNS}
    FROM {FTS_TABLE} f JOIN messages m ON m.rowid = f.rowid
    WHERE {FTS_TABLE} MATCH :q AND m.thread_id = :tid
    ORDER BY bm25({FTS_TABLE}), m.seq DESC
    LIMIT :limit
    """
)


def fts5_query(query: str) -> str:
    """The words of `query` as FTS5 strings ORed (`"a" OR "b"`); empty when it has none."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in search_terms(query))


async def search_messages(
    conn: AsyncConnection, thread_id: str, query: str, limit: int
) -> list[Message]:
    """See `HistorySearcher.search_messages`."""
    if limit < 1 or not search_terms(query):
        return []  # no word (PostgreSQL's parser would find none either): nothing to match
    statement, q = _PG_SEARCH, query
    if not dialect_of(conn).postgres:
        statement, q = _SQLITE_SEARCH, fts5_query(query)
        if not q:
            return []
    rows = (await conn.execute(statement, {"q": q, "tid": thread_id, "limit": limit})).all()
    return [from_row(r) for r in rows]


def include_name(name: str | None, type_: str, parent_names: Mapping[str, str | None]) -> bool:
    """Alembic's `include_name` for a schema comparison: everything but the search index's
    objects, which the metadata does not hold."""
    return not is_search_object(name, type_)


def is_search_object(name: str | None, type_: str) -> bool:
    """Whether a reflected name is the search index's (`include_name` of a schema comparison):
    the FTS5 table and its shadow tables, the tsvector column and its index."""
    if name is None:
        return False
    if type_ == "table":
        return name == FTS_TABLE or name.startswith(FTS_TABLE + "_")
    return (type_, name) in {("column", SEARCH_COLUMN), ("index", SEARCH_INDEX)}
