"""Three app processes on one PostgreSQL, one killed with SIGKILL during a model call.

The two survivors both sweep for dead runs, every quarter second; one of them runs with its
clock half a lease ahead (libfaketime). Leases are dated and judged by the database's clock,
so: the live run is never taken over while its process renews it, the dead one is taken over
only once its lease lapsed by the database's clock (never by the fast host's), exactly one
survivor claims it, one answer is stored, and neither survivor logs an error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from bounded_agents.store import SqlAgentStore
from bounded_agents.store.clock import db_now
from bounded_agents.store.schema import ledger, messages, runs
from tests.conftest import emptied_store
from tests.providers.fake_openai import FakeOpenAI, RecordedRequest, Reply, completion
from tests.reliability.processes import App, fake_model_env

pytestmark = pytest.mark.postgres

KEY = "sweepers-key"
LEASE_SECONDS = 4
OFFSET_SECONDS = LEASE_SECONDS // 2
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def answering(delay: Callable[[], float]) -> Callable[[RecordedRequest], Reply]:
    def respond(request: RecordedRequest) -> Reply:
        sent = request.json()["messages"]
        question = next(m["content"] for m in reversed(sent) if m["role"] == "user")
        return dataclasses.replace(Reply.json(completion(f"answer: {question}")), delay=delay())

    return respond


def _faketime_env() -> dict[str, str]:
    if not LIBFAKETIME.exists():
        message = f"libfaketime is missing ({LIBFAKETIME}): apt-get install faketime"
        if os.environ.get("AGENT_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return {
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME": f"+{OFFSET_SECONDS}",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",  # asyncio's timers stay sane
    }


async def _server_time(client: httpx.AsyncClient) -> datetime:
    """The process's own clock, from the Date header uvicorn stamps on every answer."""
    response = await client.get("/healthz")
    return email.utils.parsedate_to_datetime(response.headers["date"])


async def test_one_survivor_takes_the_dead_run_when_its_lease_lapses_by_the_database_clock(
    postgres_url: str, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    shifted = _faketime_env()
    victim_model = FakeOpenAI()
    await victim_model.start()
    victim_model.responder = answering(lambda: 3600.0)  # thinks until killed
    fake_openai.responder = answering(lambda: 0.0)
    env = fake_model_env(
        postgres_url,
        fake_openai.base_url,
        KEY,
        AGENT_RUN_LEASE_SECONDS=str(LEASE_SECONDS),
        AGENT_SWEEP_SECONDS="0.25",
    )
    victim = App({**env, "AGENT_OPENAI_BASE_URL": victim_model.base_url}, tmp_path / "v.log")
    steady = App(env, tmp_path / "steady.log")
    fast = App({**env, **shifted}, tmp_path / "fast.log")
    options = {"headers": {"Authorization": f"Bearer {KEY}"}, "trust_env": False}
    async with emptied_store(postgres_url) as store:
        try:
            for app in (victim, steady, fast):
                await app.start()
            async with (
                httpx.AsyncClient(base_url=victim.url, timeout=60, **options) as via_victim,
                httpx.AsyncClient(base_url=steady.url, timeout=60, **options) as via_steady,
                httpx.AsyncClient(base_url=fast.url, timeout=60, **options) as via_fast,
            ):
                ahead = (await _server_time(via_fast)) - (await _server_time(via_steady))
                assert ahead.total_seconds() >= OFFSET_SECONDS - 1, "the clock offset is off"

                thread = (await via_victim.post("/agents/assistant/threads", json={})).json()["id"]
                doomed = asyncio.create_task(
                    via_victim.post(
                        f"/agents/assistant/threads/{thread}/messages", json={"content": "q1"}
                    )
                )
                for _ in range(1500):
                    if victim_model.requests:
                        break
                    await asyncio.sleep(0.02)
                assert victim_model.requests, victim.log.read_text()
                [run_id] = await _run_ids(store)
                first_owner = await _owner(store, run_id)

                # Alive for 1.5 leases: renewals keep it, whatever the fast host's clock says.
                for _ in range(int(1.5 * LEASE_SECONDS / 0.05)):
                    assert await _owner(store, run_id) == first_owner, "a live run was taken"
                    await asyncio.sleep(0.05)

                await victim.kill_9()
                with pytest.raises(httpx.TransportError):
                    await doomed
                async with store.engine.connect() as conn:
                    lapses_at = (
                        await conn.execute(
                            sa.select(runs.c.lease_expires_at).where(runs.c.id == run_id)
                        )
                    ).scalar_one()

                # Watch for the takeover, by the database's clock.
                taken_at = None
                async with asyncio.timeout(6 * LEASE_SECONDS):
                    while taken_at is None:
                        async with store.engine.connect() as conn:
                            owner, now = (
                                await conn.execute(
                                    sa.select(runs.c.owner, db_now()).where(runs.c.id == run_id)
                                )
                            ).one()
                        if owner != first_owner:
                            taken_at = now
                        await asyncio.sleep(0.02)
                assert taken_at >= lapses_at, f"taken {lapses_at - taken_at} early"
                await _until_completed(store, run_id)
        finally:
            for app in (victim, steady, fast):
                await app.stop()
            await victim_model.close()

        async with store.engine.connect() as conn:
            answers = (
                (
                    await conn.execute(
                        sa.select(messages.c.content).where(messages.c.role == "assistant")
                    )
                )
                .scalars()
                .all()
            )
            booked = (await conn.execute(sa.select(ledger.c.run_id))).scalars().all()
    assert answers == ["answer: q1"]
    assert booked == [run_id]
    claims = [
        line
        for app in (steady, fast)
        for line in app.log.read_text().splitlines()
        if f"resuming run {run_id}" in line
    ]
    assert len(claims) == 1, claims
    for app in (steady, fast):
        text = app.log.read_text()
        assert "Traceback" not in text and " ERROR " not in text, text


async def _run_ids(store: SqlAgentStore) -> list[str]:
    async with store.engine.connect() as conn:
        return list((await conn.execute(sa.select(runs.c.id))).scalars())


async def _owner(store: SqlAgentStore, run_id: str) -> str | None:
    async with store.engine.connect() as conn:
        owner: str | None = (
            await conn.execute(sa.select(runs.c.owner).where(runs.c.id == run_id))
        ).scalar_one()
        return owner


async def _until_completed(store: SqlAgentStore, run_id: str) -> None:
    async with asyncio.timeout(6 * LEASE_SECONDS):
        while True:
            async with store.engine.connect() as conn:
                status = (
                    await conn.execute(sa.select(runs.c.status).where(runs.c.id == run_id))
                ).scalar_one()
            if status == "completed":
                return
            await asyncio.sleep(0.1)
