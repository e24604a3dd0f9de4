"""The COMMIT FLOOR what-if (`bench.turnsql.merged`): a recorded bench turn's PostgreSQL units,
each unit's writes sent as one statement in autocommit, insert as many rows per table as the
recorded statements (runs, messages, run_steps, ledger) and add the same tokens to the actor's
usage: a cost figure of the same inserts, in four round trips instead of sixteen. Not the same
semantics, and this checks counts, not values: in one statement the answer unit's lease check
and its run's end both update the run's row, and PostgreSQL applies only one of them."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from bench.data import build_thread
from bench.floor import AsyncpgFloor
from bench.trips import DriverClock
from bench.turns import TurnSeries
from bench.turnsql import capture, merged, with_run_id
from bounded_agents.store.schema import actor_usage, ledger, messages, run_steps, runs
from tests.conftest import emptied_store

pytestmark = pytest.mark.postgres

TABLES = (runs, messages, run_steps, ledger)


async def _rows(engine: sa.ext.asyncio.AsyncEngine, run_id: str) -> dict[str, int]:
    async with engine.connect() as conn:
        counts = {
            table.name: await conn.scalar(
                sa.select(sa.func.count()).select_from(table).where(table.c.run_id == run_id)
                if "run_id" in table.c
                else sa.select(sa.func.count()).select_from(table).where(table.c.id == run_id)
            )
            for table in TABLES
        }
        counts["usage_tokens"] = await conn.scalar(sa.select(sa.func.sum(actor_usage.c.tokens)))
    return {name: int(n or 0) for name, n in counts.items()}


async def test_each_unit_as_one_statement_writes_what_the_recorded_units_write(
    postgres_url: str,
) -> None:
    async with emptied_store(postgres_url) as store:
        thread_id, _ = await build_thread(store, 20)
        series = TurnSeries(store, thread_id, 10, DriverClock())
        await series.warm(2)
        units, run_id = await capture(series)
        floor = await AsyncpgFloor.open(postgres_url, store.engine)
        try:
            recorded, what_if = str(uuid.uuid4()), str(uuid.uuid4())
            before = await _rows(store.engine, recorded)
            await floor.replay(with_run_id(units, run_id, recorded))
            after_recorded = await _rows(store.engine, recorded)
            plan = merged(with_run_id(units, run_id, what_if))
            await floor.send(plan)
            after_what_if = await _rows(store.engine, what_if)
        finally:
            await floor.close()

    # 15: 9 statements (the run's end and the tool round's ledger row each ride with their
    # unit's journal rows, `direct.write_later`; the answer's ledger row rides in front of the
    # answer's insert, `waiting.send_after_waiting`) and 3 BEGIN + COMMIT pairs; 18, then 16,
    # before.
    assert len(plan) == 4 and sum(len(u.statements) for u in units) + 2 * len(units) == 15
    written = {k: v for k, v in after_recorded.items() if k != "usage_tokens"}
    assert written == {k: v for k, v in after_what_if.items() if k != "usage_tokens"}
    assert written["messages"] == 2 and written["run_steps"] >= 3 and written["runs"] == 1
    grew_recorded = after_recorded["usage_tokens"] - before["usage_tokens"]
    grew_what_if = after_what_if["usage_tokens"] - after_recorded["usage_tokens"]
    assert grew_recorded == grew_what_if > 0
