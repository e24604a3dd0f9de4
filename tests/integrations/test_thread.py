"""The shared core, without any framework: ids, the store it needs, folds cut at runs."""

from __future__ import annotations

import pytest

from bounded_agents.errors import ConfigError, InvalidInput
from bounded_agents.integrations import Projection, ThreadHistory, thread_id_for
from bounded_agents.integrations.items import legacy_thread_id_for
from bounded_agents.store import MemoryStore, SqlAgentStore
from tests.factories import summary_rows
from tests.integrations.helpers import NotesSummarizer


def run(n: int, size: int) -> list[tuple[Projection, str]]:
    return [
        (Projection("user", f"question {n}"), f'{{"q": {n}}}'),
        (Projection("assistant", "x" * size), f'{{"call": {n}}}'),
        (Projection("assistant", "y" * size), f'{{"output": {n}}}'),
        (Projection("assistant", f"answer {n}"), f'{{"a": {n}}}'),
    ]


def test_session_ids_map_to_thread_ids_the_store_can_hold_one_per_actor_and_adapter() -> None:
    ids = {
        thread_id_for(session, actor_id=actor, agent=agent)
        for session in ("user-42", "x" * 37, "tab\there")
        for actor in ("alice", "bob")
        for agent in ("openai-agents", "pydantic-ai")
    }
    assert len(ids) == 12 and all(len(i) == 36 for i in ids)
    assert thread_id_for("s", actor_id="a", agent="g") == thread_id_for(
        "s", actor_id="a", agent="g"
    )
    # A part holding what could separate parts makes no other triple's id (found by review).
    assert thread_id_for("s\x1fchat", actor_id="alice", agent="g") != thread_id_for(
        "chat", actor_id="alice\x1fs", agent="g"
    )
    # A session id that is itself a thread id names no other session's thread.
    made = thread_id_for("s", actor_id="a", agent="g")
    assert thread_id_for(made, actor_id="a", agent="g") != made
    assert legacy_thread_id_for("user-42") == "user-42"
    assert len(legacy_thread_id_for("x" * 37)) == 36
    with pytest.raises(InvalidInput, match="may not be empty"):
        thread_id_for("", actor_id="a", agent="g")


def test_a_store_without_the_powers_is_refused_naming_what_it_lacks() -> None:
    with pytest.raises(ConfigError, match=r"MemoryStore cannot back .* a bounded read"):
        ThreadHistory(MemoryStore(), "s")


async def test_every_fold_ends_at_the_end_of_a_run(sql_store: SqlAgentStore) -> None:
    """A fold budget that runs out inside a run folds up to the run before it: a boundary
    inside a run would leave the view starting on a tool output whose call was folded."""
    history = ThreadHistory(sql_store, "folds", keep_runs=2)
    for n in range(12):
        await history.append(run(n, 600))
    done = await history.compact(NotesSummarizer(), fold_max_tokens=1000)
    assert done.refused is None and done.folded == 10 * 4
    boundaries = [seq for seq, _ in await summary_rows(sql_store, history.thread_id)]
    assert len(boundaries) > 1  # the budget made it fold in several chunks
    assert all(seq % 4 == 0 for seq in boundaries), boundaries  # each after a run's answer
    view = await history.bounded()
    assert [e.message.role for e in view.entries][::4] == ["user", "user"]


async def test_a_run_larger_than_the_fold_budget_is_folded_whole(sql_store: SqlAgentStore) -> None:
    history = ThreadHistory(sql_store, "big-run", keep_runs=1)
    for n in range(3):
        await history.append(run(n, 5000))
    done = await history.compact(NotesSummarizer(), fold_max_tokens=500)
    assert done.folded == 8
    boundaries = [seq for seq, _ in await summary_rows(sql_store, history.thread_id)]
    assert boundaries == [4, 8]
