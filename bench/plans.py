"""The query plan of each agent's turn read, at the shortest and the longest thread.

Timings can hide a plan that is O(thread) but fast at these sizes; the plan cannot. On
PostgreSQL the read runs under `EXPLAIN (ANALYZE, BUFFERS)`: the pages it touched must not grow
with the thread. On SQLite `EXPLAIN QUERY PLAN` shows which index each part uses (no counts).
The statement is the store's own (`turn_read`) for the query the policy's `read_bound` asks.
"""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa

from bench.turns import History
from bounded_agents.core.history import HistoryConfig, policy_from_config
from bounded_agents.core.loop import read_bound
from bounded_agents.core.ports import ThreadTurnQuery
from bounded_agents.providers.echo import EchoModel
from bounded_agents.store.sql import SqlAgentStore, turn_read

_BUFFERS = re.compile(r"shared hit=(\d+)(?: read=(\d+))?")
_REMOVED = re.compile(r"Rows Removed by Filter: (\d+)")


def turn_query(history: History, thread_id: str) -> ThreadTurnQuery:
    """What a turn of an agent with `history` asks the store for."""
    policy = policy_from_config(HistoryConfig.coerce(history), EchoModel())
    summarizing = getattr(policy, "summarize", None) is not None
    return ThreadTurnQuery.of(thread_id, read_bound(policy), after_summary=summarizing)


def _literal(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "NULL"}[value]
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def _plan(lines: list[str]) -> dict[str, Any]:
    """The plan's text and what betrays an O(thread) or O(table) plan: the pages touched, rows
    read and thrown away by a filter, and sequential scans of `messages`."""
    return {
        "buffers": _buffers(lines),
        "rows_removed": sum(int(m.group(1)) for line in lines if (m := _REMOVED.search(line))),
        "seq_scans": [line.strip() for line in lines if "Seq Scan on messages" in line],
        "plan": lines,
    }


def _buffers(lines: list[str]) -> int | None:
    """Pages the whole statement touched: the first (top node's) `Buffers:` line."""
    top = next((m for line in lines if (m := _BUFFERS.search(line))), None)
    return int(top.group(1)) + int(top.group(2) or 0) if top else None


async def explain(store: SqlAgentStore, query: ThreadTurnQuery) -> dict[str, Any]:
    """The plan of the turn read for `query`; on PostgreSQL with the pages it touched, both as
    planned for these values (`custom`) and as the GENERIC plan a prepared statement may switch
    to after five executions (asyncpg prepares every statement), which is the one that matters
    for a long-lived connection."""
    stmt, params = turn_read(query)
    engine = store.engine
    if engine.dialect.name != "postgresql":
        sql = str(
            stmt.params(**params).compile(
                dialect=engine.dialect, compile_kwargs={"literal_binds": True}
            )
        )
        async with engine.connect() as conn:
            rows = (await conn.execute(sa.text("EXPLAIN QUERY PLAN " + sql))).all()
        # EXPLAIN QUERY PLAN rows: (id, parent, notused, detail).
        return {"plan": [str(r[-1]) for r in rows]}
    compiled = stmt.compile(dialect=engine.dialect)
    args = ", ".join(
        _literal(params.get(name, compiled.params.get(name))) for name in compiled.positiontup or []
    )
    analyze = "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) "
    out: dict[str, Any] = {}
    async with engine.connect() as conn:
        for mode in ("force_custom_plan", "force_generic_plan"):
            await conn.exec_driver_sql(f"SET plan_cache_mode = {mode}")
            await conn.exec_driver_sql(f"PREPARE bench_turn_read AS {compiled}")
            try:
                result = await conn.exec_driver_sql(f"{analyze}EXECUTE bench_turn_read({args})")
                lines = [str(r[0]) for r in result.all()]
            finally:
                await conn.exec_driver_sql("DEALLOCATE bench_turn_read")
            key = "custom" if mode == "force_custom_plan" else "generic"
            out[key] = _plan(lines)
        await conn.rollback()
    return out


async def turn_plans(
    store: SqlAgentStore, agents: dict[str, tuple[History, dict[int, str]]]
) -> dict[str, dict[str, Any]]:
    """Per agent, the plan at the shortest and the longest of its threads."""
    out: dict[str, dict[str, Any]] = {}
    for name, (history, threads) in agents.items():
        lengths = sorted(threads)
        out[name] = {
            str(n): await explain(store, turn_query(history, threads[n]))
            for n in sorted({lengths[0], lengths[-1]})
        }
    return out
