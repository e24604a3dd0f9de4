"""What an erasure owed DBOS is paid by a sweep. A thread's erasure deletes its `runs` rows, then
its runs' DBOS workflows (whose step outputs hold its messages). Two ways left workflows behind
for good, the erased messages in them: the DBOS deletion failing after the store's erasure had
committed (a retry finds no thread, and no `runs` row names the workflows any more), and a run
that began after the erasure read the thread's run ids and ended before the store's erasure
(never live, so nothing refused it; never read, so never deleted). Both leave a workflow of
the run-attempt workflow whose run has no `runs` row: the sweep deletes those, and only those.

DBOS is the loop tests' one instance (`dbos_launched`), its system database shared by every
test of the session: each test here sweeps first what earlier tests left (their stores were
emptied, so their workflows are orphans too), so the counts after are this test's alone.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bounded_agents.errors import ThreadNotFound
from bounded_agents.module import AgentModule
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.schema import runs
from tests.http.erasure import marker_hits

dbos = pytest.importorskip("dbos", reason="the dbos extra is not installed")

from bounded_agents.durable import dbos_sweep  # noqa: E402
from tests.loop.test_dbos_erasure import _folded, _module, _system_hits  # noqa: E402

DBOS = dbos.DBOS


@DBOS.workflow(name="tests.not_a_run")
async def _not_a_run(tag: str) -> str:
    """A workflow of another name, under an id no `runs` row has: never the sweep's."""
    return tag


async def _workflows(run_ids: list[str]) -> set[str]:
    """The ids of DBOS's workflows of these runs, every attempt's."""
    found = await DBOS.list_workflows_async(
        workflow_id_prefix=run_ids, load_input=False, load_output=False
    )
    return {w.workflow_id for w in found}


async def _runtime_swept(module: AgentModule) -> Any:
    """The module's DBOS runtime, with what earlier tests left in DBOS swept away."""
    runtime: Any = module.persistence.journal
    for _ in range(10):
        if not await runtime.sweep_erased():
            break
    return runtime


async def _thread_of_two_runs(module: AgentModule, marker: str) -> tuple[str, list[str]]:
    thread = await module.create_thread("helper", actor_id="alice")
    for text in [f"my secret is {marker}", "and another"]:
        await module.run_turn(agent="helper", thread_id=thread.id, actor_id="alice", content=text)
    ids: list[str] = await module.persistence.journal.thread_run_ids(thread.id)  # type: ignore[attr-defined]
    return thread.id, ids


def _fail_once(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    """DBOS's `name` raises once (its system database unreachable a moment), then works."""
    original = getattr(DBOS, name)
    failed: list[str] = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        if not failed:
            failed.append(name)
            raise ConnectionError("DBOS's system database is unreachable")
        return original(*args, **kwargs)

    monkeypatch.setattr(DBOS, name, flaky)
    return failed


@pytest.mark.parametrize("by", ["launch", "periodic sweep"])
async def test_a_dbos_deletion_an_erasure_owed_is_made_by_a_later_sweep(
    sql_store: SqlAgentStore,
    dbos_launched: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    by: str,
) -> None:
    module = _module(sql_store)
    runtime = await _runtime_swept(module)
    marker = f"MARK{uuid.uuid4().hex}"
    thread_id, _seq = await _folded(module, marker)  # the summary steps quote it, in DBOS
    run_ids = await runtime.thread_run_ids(thread_id)
    owed = await _workflows(run_ids)
    assert len(owed) == len(run_ids) > 2 and _system_hits(dbos_launched, marker)

    failed = _fail_once(monkeypatch, "delete_workflows")
    with pytest.raises(ConnectionError):
        await module.erase_thread(thread_id, actor_id="alice")
    assert failed, "the DBOS deletion failed after the store's erasure committed"
    assert await marker_hits(sql_store, marker) == []
    assert _system_hits(dbos_launched, marker), "DBOS still holds the erased message"
    with pytest.raises(ThreadNotFound):  # a retry cannot name the workflows any more
        await module.erase_thread(thread_id, actor_id="alice")

    if by == "launch":
        with caplog.at_level(logging.INFO):
            await runtime.launch(f"sqlite:///{dbos_launched}")  # DBOS is up: a restart's sweep
        await runtime.shutdown()
        assert any(f"{len(owed)} workflows" in r.getMessage() for r in caplog.records)
    else:
        assert await module.sweep_erased_runs() == len(owed)

    assert await _workflows(run_ids) == set()
    assert _system_hits(dbos_launched, marker) == []


@pytest.mark.parametrize("busy", [False, True])
async def test_a_run_that_ended_as_a_thread_erasure_began_is_erased_from_dbos_too(
    sql_store: SqlAgentStore, dbos_launched: Path, monkeypatch: pytest.MonkeyPatch, busy: bool
) -> None:
    """Another process's turn begins after the erasure read the thread's run ids and ends
    before the store's erasure takes the thread: never live (nothing refused the erasure),
    never read (its workflow was not in the ids to delete), its `runs` row deleted with the
    thread. Its `load:thread` checkpoint holds the thread's summary. `busy`: more workflows
    began in the window than the erasure's sweep reads (pages of 2, one page): it reads the
    newest first, and the raced run's is the newest."""
    module = _module(sql_store)
    runtime: Any = module.persistence.journal
    marker = f"MARK{uuid.uuid4().hex}"
    if busy:
        monkeypatch.setattr(dbos_sweep, "SWEEP_PAGE", 2)
        monkeypatch.setattr(dbos_sweep, "SINCE_PAGES", 1)
        await _thread_of_two_runs(module, "busy")
        await _thread_of_two_runs(module, "busier")
    # Folded: the summary quotes it, so the raced turn's `load:thread` (the summary read) holds
    # it in DBOS (its kept messages are journaled by seq, no copy).
    thread_id, _seq = await _folded(module, marker)
    read = runtime.thread_run_ids
    raced: list[str] = []

    async def read_then_a_turn_lands(thread_id: str) -> list[str]:
        ids: list[str] = await read(thread_id)
        if not raced:
            done = await module.run_turn(
                agent="helper", thread_id=thread_id, actor_id="alice", content="and then?"
            )
            raced.append(done.run_id)
        return ids

    runtime.thread_run_ids = read_then_a_turn_lands
    try:
        await module.erase_thread(thread_id, actor_id="alice")
    finally:
        del runtime.thread_run_ids

    assert raced, "the turn ran in the window"
    assert await _workflows(raced) == set()
    assert _system_hits(dbos_launched, marker) == []
    assert await marker_hits(sql_store, marker) == []


@pytest.mark.parametrize("page", [dbos_sweep.SWEEP_PAGE, 1])
async def test_the_sweep_deletes_nothing_but_workflows_of_runs_that_are_gone(
    sql_store: SqlAgentStore, dbos_launched: Path, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    """Another thread's workflows stay, a pruned run keeps its `runs` row (its workflows went
    with its journal), and a workflow of another name, under an id no run has, stays too.
    `page` 1: a workflow per page, so a pass pages past its own deletions."""
    module = _module(sql_store)
    runtime = await _runtime_swept(module)
    monkeypatch.setattr(dbos_sweep, "SWEEP_PAGE", page)
    kept, kept_runs = await _thread_of_two_runs(module, "kept")
    assert await runtime.prune_steps(0.0, 1) == 1  # the oldest completed run: kept's first
    erased, erased_runs = await _thread_of_two_runs(module, f"MARK{uuid.uuid4().hex}")
    other_id = str(uuid.uuid4())
    with dbos.SetWorkflowID(other_id):
        assert await _not_a_run("not ours") == "not ours"
    owed = await _workflows(erased_runs)
    before = await _workflows(kept_runs) | await _workflows([other_id])
    assert len(owed) == 2 and len(before) == 2  # kept's second run's, and the other one

    async with sql_store.engine.begin() as conn:  # as an erasure whose DBOS deletion failed
        await conn.execute(sa.delete(runs).where(runs.c.thread_id == erased))

    assert await runtime.sweep_erased() == len(owed)
    assert await _workflows(erased_runs) == set()
    assert await _workflows(kept_runs) | await _workflows([other_id]) == before
    async with sql_store.engine.connect() as conn:
        rows = await conn.execute(sa.select(runs.c.id).where(runs.c.thread_id == kept))
        assert sorted(r.id for r in rows) == sorted(kept_runs)
    assert await runtime.sweep_erased() == 0


async def test_a_live_workflow_with_no_run_is_left_for_a_later_sweep(
    sql_store: SqlAgentStore, dbos_launched: Path
) -> None:
    """A workflow still running may be a run whose `runs` row has yet to be read (or is on its
    way): the sweep leaves it, and deletes it once it has ended with no run to its name."""
    from bounded_agents.durable.dbos_runtime import _PENDING, _run_attempt

    module = _module(sql_store)
    runtime = await _runtime_swept(module)
    run_id = str(uuid.uuid4())
    gate = asyncio.Event()

    async def body() -> str:
        await gate.wait()
        return "completed"

    async def start() -> str:
        _PENDING[run_id] = body
        with dbos.SetWorkflowID(run_id):
            return await _run_attempt(run_id, "no-thread", 1, "")

    attempt = asyncio.create_task(start())
    for _ in range(200):
        status = await DBOS.get_workflow_status_async(run_id)
        if status is not None and status.status == "PENDING":
            break
        await asyncio.sleep(0.01)
    assert await runtime.sweep_erased() == 0
    assert await _workflows([run_id]) == {run_id}

    gate.set()
    assert await attempt == "completed"
    assert await runtime.sweep_erased() == 1
    assert await _workflows([run_id]) == set()


@pytest.mark.parametrize("when", ["after an erasure", "at launch"])
async def test_a_failed_sweep_is_a_warning_never_a_failed_erasure_or_start_up(
    sql_store: SqlAgentStore,
    dbos_launched: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    when: str,
) -> None:
    module = _module(sql_store)
    runtime = await _runtime_swept(module)
    thread_id, run_ids = await _thread_of_two_runs(module, "swept")
    original = DBOS.list_workflows

    def listing_fails(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("name") is not None:  # the sweep's listing; the erasure's own still works
            raise ConnectionError("DBOS's system database is unreachable")
        return original(*args, **kwargs)

    monkeypatch.setattr(DBOS, "list_workflows", listing_fails)
    with caplog.at_level(logging.WARNING):
        if when == "at launch":
            await runtime.launch(f"sqlite:///{dbos_launched}")
            await runtime.shutdown()
        else:
            await module.erase_thread(thread_id, actor_id="alice")
            assert await _workflows(run_ids) == set()  # the erasure itself reached DBOS
        assert await runtime.sweep_erased() == 0

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings  # the erasure's (or the launch's) sweep, and this one
    assert all("failed after deleting 0 workflows (ConnectionError" in w for w in warnings)
