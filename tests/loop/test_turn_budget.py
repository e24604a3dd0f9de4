"""What one turn costs the database, counted: committed transactions and statements sent, on
SQLite and PostgreSQL. A count, not a timing, so a regression fails CI on any machine.

The budget: the common turn (no tool call, no summary) commits at most 2 transactions; each tool
step adds one; a fold adds two per chunk. Statements are counted too, so a write that sneaks back
into its own transaction, or a read that comes back, shows up; and on SQLite the calls into the
aiosqlite worker thread, each a thread hand-over.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event

from bounded_agents.core.history import window_history
from bounded_agents.core.messages import ToolCall
from bounded_agents.providers.echo import EchoModel
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.engine import on_citus
from bounded_agents.testing import FunctionTool, ScriptedProvider, reply
from tests.conftest import worker_calls
from tests.factories import assistant, user
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv

COMMON_TURN_TRANSACTIONS = 2
"""Committed transactions of a turn with no tool call and no fold, at most: the run's row with
the user's message and `load:thread`; the model step with its ledger row, the answer and the
run's end (4 before the run's row joined the first unit, 3 before the model step rode in the
answer's commit, issue 37)."""
COMMON_TURN_STATEMENTS = {"sqlite": 12, "postgresql": 7, "citus": 13}
"""Statements of that turn, at most (reads, writes and the lease checks, pings excluded): 15 on
both before a run's one message and its seq bump became one statement on PostgreSQL (a
data-modifying CTE). SQLite has none: there they stay two statements, sent in one call. On a
Citus database the two messages' bumps and the ledger's stay two statements too, each routed
to one shard (`bounded_agents.store.engine.on_citus`): 3 more, and there the thread's owner is
read before the run's insert, not checked by it (`SqlJournal._insert_run`): 4 more. (15, 13
and 16 before the model step's unit, and its lease check, went; 13 and 10 while the ownership
read was the loop's own on every database: issue 37.) On PostgreSQL the run's end, waiting
(`direct.write_later`), goes with the answer unit's journal row as one statement, the row a
data-modifying CTE of the run's end (9 before: issue 37), and the model step's ledger row goes
as CTEs in front of the answer's insert (`waiting.send_after_waiting`: 8 before); not on
Citus."""
COMMON_TURN_SQLITE_WORKER_CALLS = 6
"""On SQLite, calls into the aiosqlite worker thread (each a hand-over and a wake-up, 50-100 us
on a 2-core machine) of that turn, at most: one per statement (`bounded_agents.store.onehop`), one
per COMMIT unless it rode with its unit's last write (`direct.write_many(last=True)`), and one per
appended message for its bump and its insert (`direct.write_together`): 20 before the first of
those, 17 with it, 15 since the run's row joined the first unit (its COMMIT and that unit's
lease check are gone), 13 since each message's two statements share a call, 10 since the
model step rides in the answer's unit (its lease check, its COMMIT and its journal row's call
are gone), 8 since the ledger row and the run's end ride in the unit's next call, 7 since the
later unit's lease check does too (deferred: `direct.write_later`), 6 since the run's insert
checks the thread's owner (`owned_run_insert`: no ownership read before it)."""
COMMON_TURN_SQLALCHEMY_STATEMENTS = {"sqlite": 0, "postgresql": 0, "citus": 2}
"""Of those, the ones sent through SQLAlchemy's Core execute, at most: none. The run's insert
went through SQLAlchemy until its unique violation (`ThreadBusy`) and foreign key refusal
(`ThreadNotFound`) were read from the driver's own errors too (`UniqueConflict`,
`MissingParent`: 1 before, issue 37). On PostgreSQL the later unit's first statement (its lease
check) went through SQLAlchemy too, for its BEGIN, until `direct` sent that BEGIN itself (2; 4
while the model step had a unit of its own, 3 while the thread check went through SQLAlchemy
too: issue 37); the message appends were two more before they took the driver's way. Every
statement (the run's insert, the turn read, the lease checks and the writes) goes through the
driver (`bounded_agents.store.hotread`, `bounded_agents.store.direct`) at about 100 us less
Python each. On Citus the owner's read and the run's insert after it go through SQLAlchemy
(`SqlJournal._insert_run`)."""


@dataclass
class Counts:
    commits: int = 0
    worker_calls: list[str] = field(default_factory=list)
    """SQLite only: calls into the aiosqlite worker thread, by the function each ran."""
    statements: list[str] = field(default_factory=list)
    through_sqlalchemy: list[str] = field(default_factory=list)
    """Statements SQLAlchemy executed (its listeners get a cursor; the driver's way, none)."""


@contextmanager
def counted(store: SqlAgentStore) -> Iterator[Counts]:
    counts = Counts()

    def on_commit(_conn: Any) -> None:
        counts.commits += 1

    def on_statement(_conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        if statement.strip().upper() != "SELECT 1":  # the pool's liveness ping
            counts.statements.append(statement)
            if cursor is not None:
                counts.through_sqlalchemy.append(statement)

    engine = store.engine.sync_engine
    event.listen(engine, "commit", on_commit)
    event.listen(engine, "before_cursor_execute", on_statement)
    try:
        with worker_calls() as counts.worker_calls:
            yield counts
    finally:
        event.remove(engine, "commit", on_commit)
        event.remove(engine, "before_cursor_execute", on_statement)


def rid() -> str:
    return str(uuid.uuid4())


async def _turn(env: LoopEnv, loop: Any, tid: str, content: str) -> Counts:
    with counted(env.store) as counts:
        await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content=content, run_id=rid()
        )
    return counts


# SQL journal only: counts SqlJournal's units of work (DBOS steps commit one by one).
@SQL_JOURNAL_ONLY
async def test_a_common_turn_fits_its_transaction_and_statement_budget(env: LoopEnv) -> None:
    tid = await env.thread([m for i in range(30) for m in (user(f"q{i}"), assistant(f"a{i}"))])
    loop = env.loop(EchoModel(), window_history(max_messages=10))
    await _turn(env, loop, tid, "warm up")  # statement caches filled
    counts = await _turn(env, loop, tid, "and now?")
    assert counts.commits <= COMMON_TURN_TRANSACTIONS, counts
    if env.store.engine.dialect.name == "sqlite":
        assert len(counts.worker_calls) <= COMMON_TURN_SQLITE_WORKER_CALLS, counts
    else:
        assert counts.worker_calls == [], "asyncpg has no worker thread"
    engine = env.store.engine
    budget = COMMON_TURN_STATEMENTS["citus" if on_citus(engine) else engine.dialect.name]
    assert len(counts.statements) <= budget, "\n".join(counts.statements)
    through_sqlalchemy = COMMON_TURN_SQLALCHEMY_STATEMENTS[
        "citus" if on_citus(engine) else engine.dialect.name
    ]
    assert len(counts.through_sqlalchemy) <= through_sqlalchemy, "\n".join(
        counts.through_sqlalchemy
    )


# SQL journal only: counts SqlJournal's units of work (DBOS steps commit one by one).
@SQL_JOURNAL_ONLY
async def test_each_tool_step_adds_one_transaction(env: LoopEnv) -> None:
    async def look(q: str) -> str:
        return f"found {q}"

    tools = {"look": FunctionTool("look", look)}
    call = ToolCall(id="c1", name="look", arguments={"q": "x"})
    tid = await env.thread([user("q0"), assistant("a0")])
    plain = env.loop(ScriptedProvider([reply("a"), reply("b")]), window_history(max_messages=10))
    await _turn(env, plain, tid, "warm up")
    base = await _turn(env, plain, tid, "plain")
    with_tool = env.loop(
        ScriptedProvider([reply("", tool_calls=[call]), reply("done")]),
        window_history(max_messages=10),
        tools=tools,
    )
    counts = await _turn(env, with_tool, tid, "use the tool")
    assert counts.commits <= base.commits + 1, (base.commits, counts.commits)


# SQL journal only: counts SqlJournal's units of work (DBOS steps commit one by one).
@SQL_JOURNAL_ONLY
async def test_a_fold_adds_two_transactions(env: LoopEnv) -> None:
    """The summary with its ledger row, then the summary row: a process killed between the
    two resumes with the journaled summary (see the crash tests)."""
    history = [m for i in range(3) for m in (user(f"q{i}"), assistant(f"a{i}"))]
    tid = await env.thread([*history, user("q3")])
    summarizing = window_history(max_messages=2, summarize=_summarizer, fold_messages=6)
    loop = env.loop(ScriptedProvider([reply("a"), reply("b"), reply("c")]), summarizing)
    first = await _turn(env, loop, tid, "this turn folds")  # 8 unsummarized: the high mark
    second = await _turn(env, loop, tid, "this one does not")
    third = await _turn(env, loop, tid, "nor this one")
    assert (first.commits, second.commits) == (third.commits + 2, third.commits)


async def _summarizer(messages: list[Any], ctx: Any) -> Any:
    from bounded_agents.core.ports import HistorySummary

    return HistorySummary(text=f"through {messages[-1].seq}")
