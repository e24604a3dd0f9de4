"""Revision 0018 (an index on `threads (agent, searchable)`) on a database at 0017 that holds
threads and messages of several agents, on SQLite and PostgreSQL: every row is kept, the index
is there, the planner reads start-up's two statements (`search_index._THREADS_OFF` and
`_TURN_OFF`) through it on a table of 5,000 threads of 50 agents, analyzed, with no planner
setting forced, and `index_agents` works as before; the downgrade drops the index and keeps
every row, and the upgrade runs again."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.visitors import ExternallyTraversible, replacement_traverse

from bounded_agents.store import migrate
from bounded_agents.store.engine import make_engine
from bounded_agents.store.search_index import _THREADS_OFF, _TURN_OFF, index_agents
from tests.migrations.conftest import seeded_at

HEAD = "0018_threads_agent_index"
BEFORE = "0017_token_ratios"
INDEX = "ix_threads_agent_searchable"

SEED = [
    "INSERT INTO threads (id, actor_id, agent, title, last_seq, searchable) VALUES "
    "('t1', 'alice', 'helper', 'a', 2, true), ('t2', 'bob', 'helper', 'b', 1, false), "
    "('t3', 'alice', 'coder', 'c', 1, true), ('t4', 'carol', 'quiet', NULL, 1, false), "
    "('t5', 'carol', 'quiet', 'e', 0, true)",
    "INSERT INTO messages (thread_id, seq, role, content, indexed) VALUES "
    "('t1', 1, 'user', 'We deployed the build on Tuesday.', true), "
    "('t1', 2, 'assistant', 'Noted, the deployment went fine.', true), "
    "('t2', 1, 'user', 'Not indexed yet.', false), "
    "('t3', 1, 'user', 'Refactor the parser.', true), "
    "('t4', 1, 'user', 'Nobody searches this.', false)",
]

BULK_THREADS = 5_000
BULK_AGENTS = 50
"""5,000 threads of 50 agents as start-up finds them once it ran before: agents 5 to 49 search
(their threads on), agents 0 to 4 do not (off). ANALYZE samples every row of a table this size,
so the estimates, and the plans, are the same on every run."""
_BULK = (
    "INSERT INTO threads (id, actor_id, agent, title, searchable) "
    "SELECT 'bulk-' || i, 'actor-' || (i % 97), 'agent-' || (i % {agents}), "
    "'a thread title of some length, as users write them', i % {agents} >= 5 FROM {numbers}"
)
_NUMBERS = {
    "postgresql": "generate_series(1, {n}) AS i",
    "sqlite": "(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {n}) "
    "SELECT i FROM n)",
}


async def _rows(engine: AsyncEngine) -> dict[str, list[Any]]:
    """Every row of `threads` and `messages`, in key order."""
    async with engine.connect() as conn:
        return {
            table: list(
                (await conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY {key}"))).all()
            )
            for table, key in (("threads", "id"), ("messages", "thread_id, seq"))
        }


async def _indexes(engine: AsyncEngine) -> set[str]:
    """The names of `threads`'s indexes, as the database lists them."""
    if engine.dialect.name == "sqlite":
        sql = "SELECT name FROM pragma_index_list('threads')"
    else:
        sql = "SELECT indexname FROM pg_indexes WHERE tablename = 'threads'"
    async with engine.connect() as conn:
        return set((await conn.execute(sa.text(sql))).scalars())


async def _plan(engine: AsyncEngine, statement: sa.ClauseElement, agents: list[str]) -> str:
    """The plan of `statement` for `agents`: EXPLAIN (PostgreSQL; an UPDATE's plan, not run),
    EXPLAIN QUERY PLAN (SQLite). The statement as the app sends it, its expanding `agents`
    parameter given a value so that it compiles to literals."""

    def valued(element: ExternallyTraversible, **_: Any) -> ExternallyTraversible | None:
        if isinstance(element, sa.BindParameter) and element.key == "agents":
            return sa.bindparam("agents", agents, expanding=True)
        return None

    bound = replacement_traverse(statement, {}, valued)
    assert isinstance(bound, sa.ClauseElement)
    sql = str(bound.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
    explain = "EXPLAIN " if engine.dialect.name == "postgresql" else "EXPLAIN QUERY PLAN "
    async with engine.connect() as conn:
        rows = (await conn.exec_driver_sql(explain + sql)).all()
    return "\n".join(" ".join(str(v) for v in row) for row in rows)


async def test_0018_indexes_threads_by_agent_keeps_every_row_and_downgrades(
    fresh_url: str,
) -> None:
    engine = make_engine(fresh_url)
    try:
        await seeded_at(engine, BEFORE, SEED)
        before = await _rows(engine)
        assert INDEX not in await _indexes(engine)

        await migrate.upgrade(engine, HEAD)

        assert await _rows(engine) == before
        assert INDEX in await _indexes(engine)

        numbers = _NUMBERS[engine.dialect.name].format(n=BULK_THREADS)
        async with engine.begin() as conn:
            await conn.execute(sa.text(_BULK.format(agents=BULK_AGENTS, numbers=numbers)))
        async with engine.connect() as conn:
            await conn.execute(sa.text("ANALYZE threads"))
            await conn.commit()
        # the threads of searching agents still off, and of the others still on: none
        for statement, agents in ((_THREADS_OFF, ["agent-6", "agent-8"]), (_TURN_OFF, ["agent-3"])):
            plan = await _plan(engine, statement, agents)
            assert INDEX in plan, plan

        # start-up: coder and quiet stop searching, helper searches (t2's row indexed)
        assert await index_agents(engine, ["helper"], ["coder", "quiet"]) == 1
        async with engine.connect() as conn:
            off = await conn.execute(
                sa.text("SELECT id FROM threads WHERE NOT searchable AND id LIKE 't%'")
            )
            assert sorted(off.scalars()) == ["t3", "t4", "t5"]
        after = await _rows(engine)

        await migrate.downgrade(engine, BEFORE)

        assert INDEX not in await _indexes(engine)
        assert await _rows(engine) == after

        await migrate.upgrade(engine, HEAD)
        assert INDEX in await _indexes(engine)
        assert await _rows(engine) == after
    finally:
        await engine.dispose()
