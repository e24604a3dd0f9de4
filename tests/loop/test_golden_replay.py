"""The golden journals resumed: a run that died just before its first model call sends the model
the recorded prompts, from a journal of today's format (`load:thread` naming its kept messages
by seq, read back from the store) and from one written before it (`keep`: the messages whole,
tests/loop/golden/before_keep_refs, recorded by the code of 2dd23fa). Either way `load:thread`
is not run again: no bounded read, no `select`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bounded_agents.core.checkpoints import LOAD_THREAD
from bounded_agents.testing import ScriptedProvider
from tests.factories import user
from tests.loop.conftest import SQL_JOURNAL_ONLY, CountingStore, LoopEnv
from tests.loop.test_golden_journal import GOLDEN, TURNS

BEFORE = GOLDEN / "before_keep_refs"


def _prefix(golden: dict[str, Any], tid: str) -> list[tuple[str, str]]:
    """The golden run's steps up to its first model call, as a crash there left them."""
    steps = [(s["name"], s["payload"].replace("<thread>", tid)) for s in golden["steps"]]
    first_model = next(i for i, (name, _) in enumerate(steps) if name.startswith("model:"))
    return steps[:first_model]


@SQL_JOURNAL_ONLY
@pytest.mark.parametrize("folder", [GOLDEN, BEFORE], ids=["keep_refs", "keep"])
@pytest.mark.parametrize("name", list(TURNS))
async def test_a_golden_run_resumed_before_its_first_call_sends_the_recorded_prompts(
    env: LoopEnv, folder: Path, name: str
) -> None:
    golden = json.loads((folder / f"{name}.json").read_text())
    history, policy, model, tools, _summarizer = TURNS[name]()
    tid = await env.thread(history)
    await env.store.append_messages(tid, [user("and now?", run_id="golden-run")])
    steps = _prefix(golden, tid)
    load = json.loads(dict(steps)[LOAD_THREAD])
    assert ("keep_refs" in load) == (folder == GOLDEN), "the fixture is of the other format"
    await env.failed_run("golden-run", tid, "and now?", steps)

    store = CountingStore(env.store)
    await env.loop(model, policy, tools=tools, store=store).resume("golden-run")

    assert isinstance(model, ScriptedProvider)
    model.assert_consumed()
    assert [r.model_dump(mode="json") for r in model.calls] == golden["prompts"]
    assert store.bounded_reads == [] and store.full_reads == 0, "load:thread ran again"
    names = [n for n, _ in await env.journal.steps("golden-run")]
    assert names.count(LOAD_THREAD) == 1
