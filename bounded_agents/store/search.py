"""The history search's SQL: ranked full-text queries of ONE thread's messages and archived
summary parts (migration 0012 builds the index; `bounded_agents.core.search` renders hits).

What is indexed: a message's `content` and `search_text` (its tool results but the search
tool's own), and each `summary_archive` row's `content`, in the language the index was built
with (`AGENT_SEARCH_LANGUAGE` at migration time: stemmed, so "deploying" finds "deployed").

- PostgreSQL reads `messages.search_vector` and `summary_archive.search_vector` (plain
  tsvector columns kept by BEFORE triggers; GIN indexed with `thread_id` since 0021, where
  `btree_gin` could be created, so one index scan finds the thread's matching rows), in the
  configuration
  `bounded_search_config()` returns: the one the index was built with. `ts_rank` (normalized by
  length, so a pasted log does not win by size; content weighted above tool text) times the
  recency factor orders; `ts_headline` marks the matches of the rows returned only (it is
  costly, and PostgreSQL evaluates it after the LIMIT).
- SQLite reads the FTS5 tables `messages_fts` (columns content, search_text, thread_key) and
  `summary_archive_fts` (content, thread_key), external content keyed on the tables' explicit
  `search_id` column, so a `.dump` and restore keeps them right. The query ANDs the thread's
  token (`thread_key`, migration 0021) with the words, which are held to the text columns:
  FTS5 walks the thread's rows, not every row of the database holding a word
  (`python -m bench.search_scale`). `bm25()` (the thread column weighted 0) times the
  recency factor orders; the marks (`highlight()`) and which terms each hit holds are asked
  for the returned rows only, in two more statements (FTS5 would compute them for every match
  before the LIMIT).

The recency factor is `1 + H / (H + age)`, age being the thread's last seq minus the hit's seq
(an archived part's `to_seq`) and H `RECENCY_HALF_LIFE`: 2 for the newest message, 1.5 at H
messages back, toward 1 for the oldest. Relevance dominates; among near-equals the newer wins.

The query is the model's text and never syntax. PostgreSQL parses it with its own parser and
ORs the lexemes it finds, each quoted (a quote doubled, a backslash escaped, as tsquery input
wants); SQLite gets the core's words (`search_terms`), each a quoted FTS5 string, ORed. Either
way a quote, `*`, `NEAR(` or `-` is just not a word. Every statement says `thread_id = :tid`:
on Citus one shard answers it.

Neither index object is in `schema.metadata` (a dialect-specific column, triggers, virtual
tables with shadow tables of their own), so the schema comparison skips them by name
(`is_search_object`). The two dialects' SQL is grouped in `_POSTGRES` and `_SQLITE`, chosen in
one place (`_dialect`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from bounded_agents.core.ports import MARK_END, MARK_START, SearchHit
from bounded_agents.core.search import RECENCY_HALF_LIFE, both_forms, query_text, search_terms
from bounded_agents.store.dialect import dialect_of

SEARCH_COLUMN = "search_vector"
SEARCH_KEY = "search_id"
SEARCH_INDEX = "ix_messages_search_vector"
FTS_TABLE = "messages_fts"
ARCHIVE_FTS_TABLE = "summary_archive_fts"
_INDEXES = {
    SEARCH_INDEX,
    "ix_messages_search_thread",
    "ix_summary_archive_search_thread",
    "ix_summary_archive_search_vector",
    "ix_messages_search_id",
    "ix_summary_archive_search_id",
}

# --- PostgreSQL --------------------------------------------------------------------------

_PG_QUERY = """
    q AS (
        SELECT array_to_string(
            ARRAY(SELECT '''' || replace(replace(lexeme, '\\', '\\\\'), '''', '''''') || ''''
                  FROM unnest(tsvector_to_array(to_tsvector(bounded_search_config(), :q)))
                  AS lexeme),
            ' | '
        )::tsquery AS query
    ),
    t AS (SELECT last_seq FROM threads WHERE id = :tid)
"""
_PG_TERMS = """
    ARRAY(SELECT (w.o - 1)::int
          FROM unnest(CAST(:terms AS text[]), CAST(:alts AS text[])) WITH ORDINALITY
              AS w(term, alt, o)
          WHERE {vector} @@ plainto_tsquery(bounded_search_config(), w.term)
              OR {vector} @@ plainto_tsquery(bounded_search_config(), w.alt))
"""
"""Which terms (by position) a row holds, each in either Unicode form (`both_forms`)."""
_PG_RECENCY = "(1.0 + :half / (:half + greatest(t.last_seq - {seq}, 0)))"
_PG_MARK = f"'HighlightAll=true, StartSel={MARK_START}, StopSel={MARK_END}'"
_PG_SHORT = " AND {bytes} <= :max_bytes AND {chars} <= :max_chars"
"""The rows of at most `max_chars` characters. `octet_length` comes first: it reads a stored
text's size from its header, where `length` would decompress a long text to count its
characters; a text of more than `max_bytes` (4 bytes a character) is never that short."""
_PG_SHORT_MESSAGES = _PG_SHORT.format(
    bytes="octet_length(m.content) + coalesce(octet_length(m.search_text), 0)",
    chars="length(m.content) + coalesce(length(m.search_text), 0)",
)
"""A message's text and its tool results' (found by review: a pasted log arriving as a tool
result, its message's content empty, took the candidates' places as a pasted message did)."""
_PG_SHORT_ARCHIVE = _PG_SHORT.format(bytes="octet_length(a.content)", chars="length(a.content)")
_PG_MESSAGES_SQL = f"""
    WITH {_PG_QUERY}
    SELECT m.seq, m.role, m.content, m.created_at, NULL AS from_seq,
        ts_rank(m.search_vector, q.query, 1) * {_PG_RECENCY.format(seq="m.seq")} AS score,
        {_PG_TERMS.format(vector="m.search_vector")} AS terms,
        ts_headline(bounded_search_config(), left(m.content, 100000), q.query, {_PG_MARK})
            AS marked,
        CASE WHEN m.search_text IS NOT NULL THEN ts_headline(bounded_search_config(),
            left(m.search_text, 100000), q.query, {_PG_MARK}) END AS marked_tools
    FROM messages m, q, t
    WHERE m.thread_id = :tid AND m.search_vector @@ q.query{{short}}
    ORDER BY score DESC, m.seq DESC
    LIMIT :limit
    """
_PG_ARCHIVE_SQL = f"""
    WITH {_PG_QUERY}
    SELECT a.to_seq AS seq, 'summary' AS role, a.content, a.created_at, a.from_seq,
        ts_rank(a.search_vector, q.query, 1) * {_PG_RECENCY.format(seq="a.to_seq")} AS score,
        {_PG_TERMS.format(vector="a.search_vector")} AS terms,
        ts_headline(bounded_search_config(), left(a.content, 100000), q.query, {_PG_MARK})
            AS marked,
        NULL AS marked_tools
    FROM summary_archive a, q, t
    WHERE a.thread_id = :tid AND a.search_vector @@ q.query{{short}}
    ORDER BY score DESC, a.to_seq DESC
    LIMIT :limit
    """


def _pg_statement(sql: str, short: str) -> sa.TextClause:
    return sa.text(sql.format(short=short)).bindparams(
        sa.bindparam("terms", type_=postgresql.ARRAY(sa.Text)),
        sa.bindparam("alts", type_=postgresql.ARRAY(sa.Text)),
    )


_PG_STATEMENTS = {
    short: (
        _pg_statement(_PG_MESSAGES_SQL, _PG_SHORT_MESSAGES if short else ""),
        _pg_statement(_PG_ARCHIVE_SQL, _PG_SHORT_ARCHIVE if short else ""),
    )
    for short in (False, True)
}
"""The messages' and the archive's statements, without and with the `max_chars` bound (a
search without it never measures a row's text)."""


async def _pg_hits(
    conn: AsyncConnection,
    thread_id: str,
    query: str,
    terms: list[str],
    limit: int,
    max_chars: int | None,
) -> list[SearchHit]:
    params: dict[str, Any] = {
        "q": both_forms(query),
        "tid": thread_id,
        "limit": limit,
        "terms": terms,
        "alts": [unicodedata.normalize("NFD", t) for t in terms],
        "half": float(RECENCY_HALF_LIFE),
    }
    if max_chars is not None:
        params |= {"max_chars": max_chars, "max_bytes": min(4 * max_chars, _INT_MAX)}
    hits: list[SearchHit] = []
    for statement in _PG_STATEMENTS[max_chars is not None]:
        for r in (await conn.execute(statement, params)).all():
            hits.append(_hit(r, float(r.score), frozenset(r.terms or ())))
    return hits


# --- SQLite --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fts:
    """One FTS5 index over a table: how its candidates are read, then marked."""

    fts: str
    candidates: sa.TextClause
    short_candidates: sa.TextClause
    """The same, of the rows of at most `max_chars` characters only."""
    marks: str
    """The SELECT of marks for the candidates' keys (`{keys}`: a JSON array)."""
    text: str
    """Its text columns, as an FTS5 column filter: the words are matched there only, never in
    the `thread_key` column (a word could be a piece of some thread's token)."""

    def words(self, terms: Sequence[str]) -> str:
        """`terms` as FTS5 strings ORed, held to the text columns (`{a b} : ("x" OR "y")`)."""
        return f"{self.text} : ({' OR '.join(_fts5_forms(t) for t in terms)})"

    def match(self, thread_id: str, words: str) -> str:
        """The candidates' MATCH: the thread's token AND the `words` (the statement's
        `thread_id = :tid` says it again, for an index made before 0021)."""
        return f'thread_key : "{thread_key(thread_id)}" AND {words}' if thread_id else words


def thread_key(thread_id: str) -> str:
    """A thread's token in the index: its id's UTF-8 bytes in hexadecimal, as migration 0021's
    triggers write it (`hex(thread_id)`; FTS5 folds the case): one token whatever the id."""
    return thread_id.encode("utf-8").hex()


_SQLITE_RECENCY = "(1.0 + :half / (:half + max(t.last_seq - {seq}, 0)))"
_SQLITE_MESSAGES_SQL = f"""
        SELECT f.rowid AS key, m.seq, m.role, m.content, m.created_at, NULL AS from_seq,
            -bm25({FTS_TABLE}, 1.0, 0.5, 0.0) * {_SQLITE_RECENCY.format(seq="m.seq")}
                AS score
        FROM {FTS_TABLE} f JOIN messages m ON m.{SEARCH_KEY} = f.rowid
            JOIN threads t ON t.id = m.thread_id
        WHERE {FTS_TABLE} MATCH :q AND m.thread_id = :tid{{short}}
        ORDER BY score DESC, m.seq DESC
        LIMIT :limit
        """
_SQLITE_SHORT = " AND length({t}.content){tools} <= :max_chars"
_SQLITE_MESSAGES = _Fts(
    FTS_TABLE,
    sa.text(_SQLITE_MESSAGES_SQL.format(short="")),
    sa.text(
        _SQLITE_MESSAGES_SQL.format(
            short=_SQLITE_SHORT.format(t="m", tools=" + coalesce(length(m.search_text), 0)")
        )
    ),
    f"""
    SELECT rowid AS key, highlight({FTS_TABLE}, 0, char(2), char(3)) AS marked,
        highlight({FTS_TABLE}, 1, char(2), char(3)) AS marked_tools
    FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH :q
        AND rowid IN (SELECT value FROM json_each(:keys))
    """,
    "{content search_text}",
)
_SQLITE_ARCHIVE_SQL = f"""
        SELECT f.rowid AS key, a.to_seq AS seq, 'summary' AS role, a.content, a.created_at,
            a.from_seq,
            -bm25({ARCHIVE_FTS_TABLE}, 1.0, 0.0) * {_SQLITE_RECENCY.format(seq="a.to_seq")}
                AS score
        FROM {ARCHIVE_FTS_TABLE} f JOIN summary_archive a ON a.{SEARCH_KEY} = f.rowid
            JOIN threads t ON t.id = a.thread_id
        WHERE {ARCHIVE_FTS_TABLE} MATCH :q AND a.thread_id = :tid{{short}}
        ORDER BY score DESC, a.to_seq DESC
        LIMIT :limit
        """
_SQLITE_ARCHIVE = _Fts(
    ARCHIVE_FTS_TABLE,
    sa.text(_SQLITE_ARCHIVE_SQL.format(short="")),
    sa.text(_SQLITE_ARCHIVE_SQL.format(short=_SQLITE_SHORT.format(t="a", tools=""))),
    f"""
    SELECT rowid AS key, highlight({ARCHIVE_FTS_TABLE}, 0, char(2), char(3)) AS marked,
        NULL AS marked_tools
    FROM {ARCHIVE_FTS_TABLE} WHERE {ARCHIVE_FTS_TABLE} MATCH :q
        AND rowid IN (SELECT value FROM json_each(:keys))
    """,
    "content",
)


def _fts5_string(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _fts5_forms(term: str) -> str:
    """`term` as an FTS5 string, ORed with its decomposed (NFD) form when that differs:
    `unicode61` folds Latin accents away, but not every mark (found by review: a Japanese
    voicing mark written apart, as macOS file names hold it, was out of reach)."""
    decomposed = unicodedata.normalize("NFD", term)
    if decomposed == term:
        return _fts5_string(term)
    return f"({_fts5_string(term)} OR {_fts5_string(decomposed)})"


async def _sqlite_hits(
    conn: AsyncConnection,
    thread_id: str,
    query: str,
    terms: list[str],
    limit: int,
    max_chars: int | None,
) -> list[SearchHit]:
    hits: list[SearchHit] = []
    for index in (_SQLITE_MESSAGES, _SQLITE_ARCHIVE):
        words = index.words(terms)
        q = index.match(thread_id, words)
        params: dict[str, Any] = {
            "q": q,
            "tid": thread_id,
            "limit": limit,
            "half": float(RECENCY_HALF_LIFE),
        }
        candidates = index.candidates
        if max_chars is not None:
            candidates, params["max_chars"] = index.short_candidates, max_chars
        try:
            rows = (await conn.execute(candidates, params)).all()
        except sa.exc.OperationalError as exc:
            if "thread_key" not in str(exc.orig):
                raise
            # An index made before migration 0021 (this code deployed ahead of its
            # migration): no thread column, so the words alone, as it was searched then.
            params["q"] = words
            rows = (await conn.execute(candidates, params)).all()
        if not rows:
            continue
        keys = "[" + ",".join(str(int(r.key)) for r in rows) + "]"
        marks = {
            r.key: r for r in (await conn.execute(sa.text(index.marks), {"q": words, "keys": keys}))
        }
        held = await _sqlite_terms(conn, index, terms, keys)
        for r in rows:
            mark = marks.get(r.key)
            hits.append(
                _hit(
                    r,
                    float(r.score),
                    frozenset(held.get(r.key, ())),
                    marked=None if mark is None else mark.marked,
                    marked_tools=None if mark is None else mark.marked_tools,
                )
            )
    return hits


async def _sqlite_terms(
    conn: AsyncConnection, index: _Fts, terms: Sequence[str], keys: str
) -> dict[int, set[int]]:
    """Which of `terms` (by position) each keyed row holds: one MATCH per term, over the keys
    only, in one statement."""
    fts = index.fts
    arms = [
        f"SELECT rowid AS key, {i} AS term FROM {fts} WHERE {fts} MATCH :t{i} "
        "AND rowid IN (SELECT value FROM json_each(:keys))"
        for i in range(len(terms))
    ]
    params: dict[str, Any] = {
        f"t{i}": f"{index.text} : {_fts5_forms(t)}" for i, t in enumerate(terms)
    }
    held: dict[int, set[int]] = {}
    for r in await conn.execute(sa.text(" UNION ALL ".join(arms)), {**params, "keys": keys}):
        held.setdefault(r.key, set()).add(r.term)
    return held


# --- both ----------------------------------------------------------------------------------


def _hit(
    r: Any,
    score: float,
    terms: frozenset[int],
    *,
    marked: str | None = None,
    marked_tools: str | None = None,
) -> SearchHit:
    """A row as a hit: marked in its content when the content matched, else in its tool
    results' text (`in_tools`)."""
    marked = marked if marked is not None else getattr(r, "marked", None)
    marked_tools = marked_tools if marked_tools is not None else getattr(r, "marked_tools", None)
    text, in_tools = marked or r.content, False
    if MARK_START not in text and marked_tools and MARK_START in marked_tools:
        text, in_tools = marked_tools, True
    return SearchHit(
        seq=r.seq,
        role=r.role,
        in_tools=in_tools,
        content=r.content,
        marked=text,
        relevance=score,
        terms=terms,
        at=_at(r.created_at),
        from_seq=r.from_seq,
    )


def _at(value: datetime | str | None) -> datetime | None:
    """A row's timestamp, aware: SQLite returns a raw text query's as naive UTC text."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


_INT_MAX = 2**31 - 1
"""The largest `max_chars` sent: a PostgreSQL `integer` parameter (a larger bound is this one:
no text either database stores is longer)."""


def _dialect(conn: AsyncConnection) -> Any:
    return _pg_hits if dialect_of(conn).postgres else _sqlite_hits


async def search_history(
    conn: AsyncConnection, thread_id: str, query: str, limit: int, max_chars: int | None = None
) -> list[SearchHit]:
    """See `HistorySearcher.search_history`: messages and archived parts together, best
    first (relevance with recency, then newest). A NUL or a lone surrogate in `query` is read
    as a separator (`query_text`): PostgreSQL's driver cannot send either, and the store's
    caller is not always the tool, which cleans its query the same way."""
    query = query_text(query)
    terms = search_terms(query)
    if limit < 1 or not terms or (max_chars is not None and max_chars < 0):
        return []  # no word (PostgreSQL's parser would find none either): nothing to match
    longest = None if max_chars is None else min(max_chars, _INT_MAX)
    hits: list[SearchHit] = await _dialect(conn)(conn, thread_id, query, terms, limit, longest)
    hits.sort(key=lambda h: (h.relevance, h.seq), reverse=True)
    return hits[:limit]


def include_name(name: str | None, type_: str, parent_names: Mapping[str, str | None]) -> bool:
    """Alembic's `include_name` for a schema comparison: everything but the search index's
    objects, which the metadata does not hold."""
    return not is_search_object(name, type_)


def is_search_object(name: str | None, type_: str) -> bool:
    """Whether a reflected name is the search index's (`include_name` of a schema comparison):
    the FTS5 tables, their shadow tables and their content views (`<fts>_rows`, 0021), the
    tsvector and key columns and their indexes."""
    if name is None:
        return False
    if type_ == "table":
        return any(name == t or name.startswith(t + "_") for t in (FTS_TABLE, ARCHIVE_FTS_TABLE))
    if type_ == "column":
        return name in {SEARCH_COLUMN, SEARCH_KEY}
    return type_ == "index" and name in _INDEXES
