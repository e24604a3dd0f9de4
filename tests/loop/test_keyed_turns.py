"""Turns under an Idempotency-Key at the loop: every runtime refuses a second run under one key
(`TurnInProgress`, naming the first; the module answers its outcome), and the key costs a turn
nothing, counted as `test_turn_budget` counts (the key and the request's fingerprint ride in
the run row's insert); a repeat commits nothing."""

from __future__ import annotations

import uuid

import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.loop import AgentLoop
from bounded_agents.core.ports import Idempotency
from bounded_agents.errors import TurnInProgress
from bounded_agents.providers.echo import EchoModel
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv
from tests.loop.test_turn_budget import Counts, counted

KEY = Idempotency(key="retry-me", fingerprint="f" * 64)


async def _turn(env: LoopEnv, loop: AgentLoop, tid: str, keyed: Idempotency | None) -> Counts:
    with counted(env.store) as counts:
        await loop.run_turn(
            agent="helper",
            thread_id=tid,
            actor_id="alice",
            content="the same question",
            run_id=str(uuid.uuid4()),
            idempotency=keyed,
        )
    return counts


# SQL journal only: counts SqlJournal's units of work (DBOS steps commit one by one).
@SQL_JOURNAL_ONLY
async def test_a_keyed_turn_costs_no_statement_more_and_its_repeat_commits_nothing(
    env: LoopEnv,
) -> None:
    tid = await env.thread()
    loop = env.loop(EchoModel(), window_history(max_messages=10))
    await _turn(env, loop, tid, None)  # statement caches filled
    plain = await _turn(env, loop, tid, None)
    keyed = await _turn(env, loop, tid, KEY)

    with counted(env.store) as repeat, pytest.raises(TurnInProgress) as found:
        await _turn(env, loop, tid, KEY)

    print(
        f"\n{env.store.engine.dialect.name}: plain turn {plain.commits} commits, "
        f"{len(plain.statements)} statements; keyed {keyed.commits}, {len(keyed.statements)}; "
        f"repeat {repeat.commits}, {len(repeat.statements)}"
    )
    assert (keyed.commits, len(keyed.statements)) == (plain.commits, len(plain.statements))
    assert repeat.commits == 0
    assert found.value.fingerprint == KEY.fingerprint
    # the ownership read, the refused insert and the key's lookup
    assert len(repeat.statements) <= 3, "\n".join(repeat.statements)


async def test_each_runtime_refuses_a_second_run_under_one_key(env: LoopEnv) -> None:
    """The SQL journal and DBOS's runtime (whose runs rows are the journal's) alike: a second
    begin under a key names the first run, and its row is the only one under the key."""
    tid = await env.thread()
    loop = env.loop(EchoModel(), window_history(max_messages=10))
    first = await loop.run_turn(
        agent="helper",
        thread_id=tid,
        actor_id="alice",
        content="q",
        run_id=str(uuid.uuid4()),
        idempotency=KEY,
    )
    with pytest.raises(TurnInProgress) as repeat:
        await _turn(env, loop, tid, KEY)
    other = await _turn(env, loop, tid, Idempotency(key="another", fingerprint=KEY.fingerprint))

    assert repeat.value.run_id == first.run_id
    assert other.commits > 0
    assert await env.journal.find_keyed_run(tid, "alice", KEY.key) == (first.run_id, "f" * 64)
    assert await env.journal.find_keyed_run(tid, "bob", KEY.key) is None
