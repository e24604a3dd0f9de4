"""Which run journal and ledger `for_root` picks: by what the store can do, said at start-up."""

from __future__ import annotations

import logging

import pytest

from bounded_agents import AgentModule, agent
from bounded_agents.durable import InlineRuntime, SqlJournal
from bounded_agents.errors import ConfigError
from bounded_agents.settings import Settings
from bounded_agents.store import MemoryStore, SqlAgentStore
from bounded_agents.store.ledger import MemoryLedger, SqlLedger
from bounded_agents.testing import ScriptedProvider, reply
from tests.loop.conftest import FullReadStore

SETTINGS = Settings(migrate_on_start=False)


@agent(name="plain")
class Plain:
    pass


class EngineSharingStore(FullReadStore):
    """Another store class (not a `SqlAgentStore`) on the same database, sharing its engine."""

    @property
    def engine(self) -> object:
        return self.inner.engine


class NotSqlEngine(FullReadStore):
    """A store with an `engine` of some other kind: it cannot host the SQL journal."""

    engine = "a document database"


def _module(store: object, **kw: object) -> AgentModule:
    return AgentModule.for_root(
        model=ScriptedProvider(default=reply("ok")),
        store=store,  # type: ignore[arg-type]
        agents=[Plain],
        **{"settings": SETTINGS, **kw},  # type: ignore[arg-type]
    )


async def _start_up_log(module: AgentModule, caplog: pytest.LogCaptureFixture) -> str:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bounded_agents"):
        async with module.lifespan():
            pass
    lines = [r for r in caplog.records if "run journal" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    return f"{lines[0].levelname} {lines[0].getMessage()}"


async def test_any_store_sharing_its_sql_engine_gets_the_durable_journal_and_ledger(
    sql_store: SqlAgentStore,
) -> None:
    module = _module(EngineSharingStore(sql_store))
    thread = await module.store.create_thread(actor_id="a", agent="plain")
    result = await module.run_turn(agent="plain", thread_id=thread.id, actor_id="a", content="hi")
    # the run and its spend are in the database, where another process would find them
    record = await SqlJournal(sql_store.engine, lease_seconds=60).get_run(result.run_id)
    assert record is not None and record.status == "completed"
    entries = await SqlLedger(sql_store.engine).entries_for_run(result.run_id)
    assert [e.purpose for e in entries] == ["chat"]


def test_an_engine_that_is_not_a_sql_engine_gets_the_in_process_runtime(
    sql_store: SqlAgentStore,
) -> None:
    module = _module(NotSqlEngine(sql_store))
    runtime = module.loop.runtime  # traced and metered by a wrapper around it
    assert isinstance(getattr(runtime, "inner", runtime), InlineRuntime)
    assert isinstance(module.loop.ledger, MemoryLedger)


async def test_start_up_logs_the_sql_journal_and_ledger(
    sql_store: SqlAgentStore, caplog: pytest.LogCaptureFixture
) -> None:
    line = await _start_up_log(_module(sql_store), caplog)
    assert line.startswith("INFO ")
    assert "SqlJournal" in line and "SqlLedger" in line


async def test_start_up_warns_that_an_in_process_runtime_is_not_durable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    line = await _start_up_log(_module(MemoryStore()), caplog)
    assert line.startswith("WARNING ")
    assert "InlineRuntime" in line and "MemoryLedger" in line
    assert "MemoryStore" in line and "not resumed" in line


async def test_start_up_logs_a_given_journal_and_ledger_as_given(
    sql_store: SqlAgentStore, caplog: pytest.LogCaptureFixture
) -> None:
    module = _module(MemoryStore(), journal=InlineRuntime(), ledger=SqlLedger(sql_store.engine))
    line = await _start_up_log(module, caplog)
    assert "InlineRuntime (given)" in line and "SqlLedger (given)" in line


def _unwrapped(module: AgentModule) -> object:
    runtime = module.loop.runtime  # traced and metered by a wrapper around it
    return getattr(runtime, "inner", runtime)


def test_agent_durable_picks_the_runtime(sql_store: SqlAgentStore) -> None:
    inline = _module(sql_store, settings=Settings(migrate_on_start=False, durable="inline"))
    assert isinstance(_unwrapped(inline), InlineRuntime)
    sql = _module(sql_store, settings=Settings(migrate_on_start=False, durable="sql"))
    assert type(_unwrapped(sql)) is SqlJournal
    pytest.importorskip("dbos", reason="the dbos extra is not installed")
    from bounded_agents.durable.dbos_runtime import DbosRuntime

    dbos = _module(sql_store, settings=Settings(migrate_on_start=False, durable="dbos"))
    assert isinstance(_unwrapped(dbos), DbosRuntime)


def test_agent_durable_dbos_without_the_extra_is_a_config_error(
    sql_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "dbos", None)  # as if not installed: importing it fails
    monkeypatch.delitem(sys.modules, "bounded_agents.durable.dbos_runtime", raising=False)
    with pytest.raises(ConfigError, match=r"pip install '\.\[dbos\]' from a clone"):
        _module(sql_store, settings=Settings(migrate_on_start=False, durable="dbos"))


def test_agent_durable_dbos_needs_a_store_that_hosts_the_lease(sql_store: SqlAgentStore) -> None:
    with pytest.raises(ConfigError, match="AGENT_DURABLE=dbos"):
        _module(NotSqlEngine(sql_store), settings=Settings(migrate_on_start=False, durable="dbos"))


def test_the_dbos_system_database_follows_the_app_database() -> None:
    pytest.importorskip("dbos", reason="the dbos extra is not installed")
    from bounded_agents.durable.dbos_runtime import dbos_system_url

    assert (
        dbos_system_url("postgresql+asyncpg://u:p@db:5432/app")
        == "postgresql+psycopg://u:p@db:5432/app"
    )
    assert dbos_system_url("sqlite+aiosqlite:///./agent.db") == "sqlite:///./agent.db"
    with pytest.raises(ConfigError, match="in-memory"):
        dbos_system_url("sqlite+aiosqlite:///:memory:")


async def test_a_memory_store_with_a_token_quota_answers_and_books_the_spend() -> None:
    """The in-process ledger reserves quota like the SQL one; the loop hands every ledger the
    same `record_reserved(..., tx=...)` call (None here: nothing is shared in memory)."""
    settings = Settings(migrate_on_start=False, token_quota=100_000)
    module = AgentModule.for_root(
        model=ScriptedProvider(default=reply("ok")),
        store=MemoryStore(),
        agents=[Plain],
        settings=settings,
    )
    thread = await module.store.create_thread(actor_id="a", agent="plain")
    result = await module.run_turn(agent="plain", thread_id=thread.id, actor_id="a", content="hi")
    assert result.message.content == "ok"
    ledger = module.loop.ledger
    assert isinstance(ledger, MemoryLedger)
    spent = sum(e.prompt_tokens + e.completion_tokens for e in ledger.entries)
    assert spent > 0
    assert await ledger.tokens_used("a") == spent, "the reservation became the spend, no more"


async def test_the_lifespan_restores_the_token_ratios_an_earlier_process_saved(
    sql_store: SqlAgentStore,
) -> None:
    """Issue 39: the module's start-up reads the learned ratios back from the SQL ledger
    (`RatioBook`), so its first turn sizes windows and fold chunks as the last process did."""
    await SqlLedger(sql_store.engine).save_ratios({"gpt-test": 1.5})
    module = _module(sql_store)
    assert module.loop.deps.learned.tokens.learned("gpt-test") is None
    async with module.lifespan():
        assert module.loop.deps.learned.tokens.learned("gpt-test") == 1.5


async def test_a_database_it_cannot_read_at_start_up_leaves_the_ratios_to_be_relearned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Restoring the saved ratios is an optimization: a store that is down at start-up (the
    health check reports it) does not stop the process from starting; it warns and relearns."""
    down = SqlAgentStore.from_url("postgresql+asyncpg://nobody@127.0.0.1:1/none")
    try:
        module = _module(down, journal=InlineRuntime())
        with caplog.at_level(logging.WARNING, logger="bounded_agents"):
            await module.loop.restore_learned()
        assert "relearning" in caplog.text
        assert module.loop.deps.learned.tokens.unsaved() == {}
    finally:
        await down.dispose()
