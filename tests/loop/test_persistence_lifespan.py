"""What the lifespan does with the persistence bundle `for_root` chose: migrate, launch, shut
down and dispose, each asked of what the store, journal and model can do, never of their class
(`bounded_agents.persistence`, the `supports_*` powers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bounded_agents import AgentModule, agent
from bounded_agents.core.ports import supports_launch
from bounded_agents.durable import InlineRuntime
from bounded_agents.observability import ObservedRuntime
from bounded_agents.settings import Settings
from bounded_agents.store import SqlAgentStore
from bounded_agents.testing import ScriptedProvider, reply
from tests.loop.conftest import FullReadStore


@agent(name="plain")
class Plain:
    pass


class SchemaStore(FullReadStore):
    """A store of its own class (not a `SqlAgentStore`) that keeps a schema and a pool."""

    def __init__(self, inner: SqlAgentStore, events: list[str]) -> None:
        super().__init__(inner)
        self.events = events

    async def create_schema(self) -> None:
        self.events.append("create_schema")
        await self.inner.create_schema()

    async def dispose(self) -> None:
        self.events.append("dispose")


class LaunchedJournal(InlineRuntime):
    """A runtime with an engine of its own to start and stop, as `DbosRuntime` has."""

    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.events = events
        self.launched_with: tuple[str, str | None, str | None] | None = None

    async def launch(
        self,
        system_database_url: str,
        *,
        executor_id: str | None = None,
        application_version: str | None = None,
    ) -> None:
        self.events.append("launch")
        self.launched_with = (system_database_url, executor_id, application_version)

    async def shutdown(self) -> None:
        self.events.append("shutdown")

    async def claim_expired(self, limit: int) -> list[str]:
        self.events.append("claim_expired")
        return await super().claim_expired(limit)


class ClosingModel(ScriptedProvider):
    def __init__(self, events: list[str]) -> None:
        super().__init__(default=reply("ok"))
        self.events = events

    async def aclose(self) -> None:
        self.events.append("aclose")


@pytest.mark.parametrize("migrate_on_start", [True, False])
async def test_a_given_store_that_keeps_a_schema_is_migrated_by_setting_and_never_disposed(
    sql_store: SqlAgentStore, migrate_on_start: bool
) -> None:
    """Migrated by what it can do, as a `SqlAgentStore` is; not closed, since its owner gave it."""
    events: list[str] = []
    module = AgentModule.for_root(
        model=ScriptedProvider(default=reply("ok")),
        store=SchemaStore(sql_store, events),  # type: ignore[arg-type]
        agents=[Plain],
        settings=Settings(migrate_on_start=migrate_on_start),
    )
    assert module.persistence.owns_store is False
    async with module.lifespan():
        assert events == (["create_schema"] if migrate_on_start else [])
    assert "dispose" not in events


async def test_a_launched_journal_starts_before_the_sweep_and_stops_before_the_model_closes(
    sql_store: SqlAgentStore,
) -> None:
    """Probed on the journal itself, though the loop runs it in the tracing wrapper."""
    events: list[str] = []
    journal = LaunchedJournal(events)
    settings = Settings(
        migrate_on_start=False,
        tracing=True,
        dbos_system_database_url="sqlite+aiosqlite:///./system.db",
        dbos_executor_id="executor-7",
        dbos_application_version="v7",
    )
    module = AgentModule.for_root(
        model=ClosingModel(events),
        store=sql_store,
        journal=journal,
        agents=[Plain],
        settings=settings,
    )
    assert isinstance(module.loop.runtime, ObservedRuntime)
    assert module.persistence.journal is journal and supports_launch(journal)
    async with module.lifespan():
        assert events == ["launch", "claim_expired"]
    assert events == ["launch", "claim_expired", "shutdown", "aclose"]
    assert journal.launched_with == ("sqlite+aiosqlite:///./system.db", "executor-7", "v7")


async def test_a_journal_without_an_engine_is_neither_launched_nor_shut_down(
    sql_store: SqlAgentStore,
) -> None:
    events: list[str] = []
    module = AgentModule.for_root(
        model=ClosingModel(events),
        store=sql_store,
        journal=InlineRuntime(),
        agents=[Plain],
        settings=Settings(migrate_on_start=False),
    )
    async with module.lifespan():
        pass
    assert events == ["aclose"]


async def test_the_store_the_module_built_is_migrated_and_disposed_of_at_shutdown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    disposing = SqlAgentStore.dispose

    async def dispose(store: SqlAgentStore) -> None:
        events.append("dispose")
        await disposing(store)

    monkeypatch.setattr(SqlAgentStore, "dispose", dispose)
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'own.db'}")
    module = AgentModule.for_root(
        model=ScriptedProvider(default=reply("ok")), agents=[Plain], settings=settings
    )
    assert module.persistence.owns_store is True
    async with module.lifespan():
        thread = await module.store.create_thread(actor_id="a", agent="plain")  # migrated
        assert events == []
    assert events == ["dispose"]
    assert thread.agent == "plain"
