"""Every statement a turn sends names its thread (or, on the usage tables, its actor).

Distributed by `thread_id` (docs/scale-out.md), a statement that names the thread goes to one
shard; one that does not is sent to every shard. So every SQL statement sent during real turns
is captured on the store's engine, and each one on a distributed table must carry the key:
an INSERT in its column list, anything else as a predicate (`<table>.thread_id = ...` or
`IN (...)`; `threads.id` for `threads`, `actor_id` for `ledger` and `actor_usage`).

The check is a regular expression over the SQL SQLAlchemy compiled (which qualifies every
column with its table or alias), not a parser: enough for the statements this code writes.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.messages import ToolCall
from bounded_agents.durable import SqlJournal
from bounded_agents.errors import ProviderError, RunFailed
from bounded_agents.providers.echo import EchoModel
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.ledger import SqlLedger
from bounded_agents.store.schema import runs
from bounded_agents.testing import FunctionTool, ScriptedProvider, reply
from tests.factories import assistant, user
from tests.loop.conftest import CountingSummarizer, LoopEnv
from tests.store.test_store import captured_sql
from tests.store.test_thread_keys import DISTRIBUTED_BY

KEYS = {"threads": "id", **DISTRIBUTED_BY}
"""Each distributed table and the column a statement on it must name."""

_TABLE = re.compile(r'\b(FROM|JOIN|UPDATE|INTO)\s+"?(\w+)"?(?:\s+AS\s+(\w+))?', re.IGNORECASE)
_INSERT_COLUMNS = re.compile(r'\bINSERT\s+INTO\s+"?(\w+)"?\s*\(([^)]*)\)', re.IGNORECASE)


def missing_keys(statement: str) -> list[str]:
    """The distributed tables `statement` reads or writes without naming their key."""
    missing: list[str] = []
    inserted = dict(_INSERT_COLUMNS.findall(statement))
    for verb, table, alias in _TABLE.findall(statement):
        key = KEYS.get(table)
        if key is None:
            continue
        if verb.upper() == "INTO":
            columns = {c.strip().strip('"') for c in inserted.get(table, "").split(",")}
            if key not in columns:
                missing.append(table)
            continue
        name = re.escape(alias or table)
        # `<name>.<key> =` or `IN`, `= <name>.<key>` (a join on it), a row value that starts
        # with it (`(<name>.<key>, ...) IN`), or a bare `<key> =` in a statement written out
        # by hand.
        predicate = (
            rf"(?:\b{name}\.|(?<![\w.])){key}\s*(?:=|IN\b)"
            rf"|=\s*{name}\.{key}\b"
            rf"|\(\s*{name}\.{key}\s*,[^)]*\)\s*IN\b"
        )
        if not re.search(predicate, statement, re.IGNORECASE):
            missing.append(table)
    return missing


def tables_of(statement: str) -> set[str]:
    return {table for _, table, _ in _TABLE.findall(statement) if table in KEYS}


def assert_all_keyed(statements: list[str], allowed: frozenset[str] = frozenset()) -> None:
    """Fail naming every statement (outside `allowed`) that lacks a key."""
    offending = [
        f"{', '.join(missing)} without its key in: {' '.join(s.split())}"
        for s in statements
        if (missing := missing_keys(s)) and " ".join(s.split()) not in allowed
    ]
    assert not offending, "\n".join(offending)


# --- the checker itself ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT runs.id FROM runs WHERE runs.status = ? AND runs.lease_expires_at < ?",
        "UPDATE runs SET lease_expires_at=? WHERE runs.id = ? AND runs.owner = ?",
        "SELECT run_steps.name FROM run_steps WHERE run_steps.run_id = ? ORDER BY position",
        "INSERT INTO run_steps (run_id, position, name, payload) VALUES (?, ?, ?, ?)",
        "DELETE FROM messages WHERE messages.run_id = ?",
        "SELECT page.seq FROM threads LEFT OUTER JOIN messages AS page ON page.seq > ? "
        "WHERE threads.id = ? AND messages.thread_id = ?",
        "UPDATE threads SET title=? WHERE threads.actor_id = ?",
        "SELECT ledger.model FROM ledger WHERE ledger.run_id = ? ORDER BY ledger.id",
        "DELETE FROM run_steps WHERE (run_steps.run_id, run_steps.thread_id) IN ((?, ?))",
        "DELETE FROM run_steps WHERE run_steps.run_id IN (?, ?)",
    ],
)
def test_the_check_names_a_statement_without_its_key(statement: str) -> None:
    assert missing_keys(statement)
    with pytest.raises(AssertionError, match="without its key in"):
        assert_all_keyed([statement])


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE runs SET lease_expires_at=? WHERE runs.thread_id = ? AND runs.id = ?",
        "INSERT INTO run_steps (thread_id, run_id, position) VALUES ($1, $2, $3)",
        'INSERT INTO ledger (id, "actor_id", model) VALUES (?, ?, ?)',
        "SELECT page.seq FROM threads LEFT OUTER JOIN messages AS page "
        "ON page.thread_id = ? WHERE threads.id = ?",
        "SELECT messages.seq FROM messages JOIN runs ON runs.thread_id = messages.thread_id "
        "WHERE messages.thread_id = ?",
        "SELECT run_steps.name FROM run_steps WHERE run_steps.thread_id IN (?, ?)",
        "UPDATE actor_usage SET tokens = tokens - :tokens WHERE actor_id = :actor_id",
        "DELETE FROM run_steps WHERE (run_steps.thread_id, run_steps.run_id) IN ((?, ?))",
    ],
)
def test_the_check_passes_a_statement_with_its_key(statement: str) -> None:
    assert missing_keys(statement) == []


# --- real turns ------------------------------------------------------------------------------


@pytest.fixture
def env(sql_store: SqlAgentStore) -> LoopEnv:
    return LoopEnv(
        sql_store, SqlJournal(sql_store.engine, lease_seconds=60), SqlLedger(sql_store.engine)
    )


def rid() -> str:
    return str(uuid.uuid4())


HISTORY = [m for i in range(3) for m in (user(f"q{i}"), assistant(f"a{i}"))]


async def test_a_plain_turn_names_its_thread_in_every_statement(env: LoopEnv) -> None:
    tid = await env.thread(HISTORY)
    loop = env.loop(EchoModel(), window_history(max_messages=20), quota=10**9)
    with captured_sql(env.store) as statements:
        await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="hello", run_id=rid()
        )
    assert_all_keyed(statements)
    seen = set().union(*map(tables_of, statements))
    assert {"threads", "messages", "runs", "run_steps", "ledger", "actor_usage"} <= seen


async def test_a_turn_with_a_tool_call_names_its_thread_in_every_statement(
    env: LoopEnv,
) -> None:
    async def lookup(q: str) -> str:
        return f"found {q}"

    calls = [ToolCall(id="c1", name="lookup", arguments={"q": "a"})]
    model = ScriptedProvider([reply("", tool_calls=calls), reply("done")])
    tid = await env.thread(HISTORY)
    loop = env.loop(
        model, window_history(max_messages=20), tools={"lookup": FunctionTool("lookup", lookup)}
    )
    run_id = rid()
    with captured_sql(env.store) as statements:
        await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="look", run_id=run_id
        )
    assert "tool:1:c1" in await env.step_names(run_id)
    assert_all_keyed(statements)


async def test_a_summarizing_turn_that_folds_names_its_thread_in_every_statement(
    env: LoopEnv,
) -> None:
    summarizer = CountingSummarizer()
    tid = await env.thread(HISTORY)
    loop = env.loop(EchoModel(), window_history(max_messages=2, summarize=summarizer))
    with captured_sql(env.store) as statements:
        for i in range(2):  # the second turn reads the summary the first one stored
            await loop.run_turn(
                agent="helper", thread_id=tid, actor_id="alice", content=f"t{i}", run_id=rid()
            )
    assert summarizer.calls, "the turn folded"
    assert_all_keyed(statements)
    assert any(s.lstrip().startswith("INSERT INTO thread_summaries") for s in statements)
    assert any("FROM thread_summaries" in s for s in statements), "the summary was read"


async def test_a_turn_past_a_dead_run_and_a_resumed_run_name_their_thread(env: LoopEnv) -> None:
    """A run a dead process left holding the thread is released by the next turn, which fails;
    resumed, it is claimed and ended by its thread. A resume starts from the run id alone, so
    its lookups by that id (the run's record, its journal's thread, its ledger rows for the
    report) are the statements allowed to go without the key: recovery, not a turn's path."""
    tid = await env.thread(HISTORY)
    async with env.store.engine.begin() as conn:
        await conn.execute(
            runs.insert().values(
                id=rid(),
                thread_id=tid,
                actor_id="alice",
                agent="helper",
                status="running",
                request="{}",
                owner="gone",
                lease_expires_at=datetime.now(UTC) - timedelta(minutes=5),
            )
        )
    failing = env.loop(ScriptedProvider([ProviderError("down")]), window_history(max_messages=20))
    run_id = rid()
    with captured_sql(env.store) as turn:
        with pytest.raises(RunFailed):
            await failing.run_turn(
                agent="helper", thread_id=tid, actor_id="alice", content="now?", run_id=run_id
            )
    assert any("lease_expires_at <" in s for s in turn), "the dead run was released"
    assert_all_keyed(turn)

    resumed = env.loop(ScriptedProvider([reply("answer")]), window_history(max_messages=20))
    with captured_sql(env.store) as resume:
        await resumed.resume(run_id)
    by_run_id = [" ".join(s.split()) for s in resume if missing_keys(s)]
    assert len(by_run_id) == 3, by_run_id
    assert all(
        re.search(r"WHERE (runs\.id|ledger\.run_id) = \S+( ORDER BY [\w.]+)?$", s)
        for s in by_run_id
    ), by_run_id
    assert_all_keyed(resume, allowed=frozenset(by_run_id))
