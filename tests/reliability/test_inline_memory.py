"""AGENT_DURABLE=inline in a long-lived `python -m app serve`: memory stays flat over many
turns, as under the SQL journal (attack round 5: every run's request, the user's whole message
included, stayed in `InlineRuntime._runs` for the life of the process: +47.7 MiB over 200 turns
of 250 KB, against +16.0 MiB under `sql`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.reliability.processes import App, app_env

KEY = "mem-key"
CONTENT = "x" * (250 * 1024)  # under AGENT_MAX_CONTENT_BYTES (256 KiB)
WARM_TURNS = 400
TURNS = 200
GROWTH_BOUND_KIB = 30 * 1024
"""200 turns of 250 KB after 400 (which fill the store's bounded message cache, 64 MB of text):
the text is 50 MB; a server that keeps none of it grows far less."""


async def _turns(client: httpx.AsyncClient, n: int) -> None:
    async def one() -> None:
        created = await client.post("/agents/assistant/threads", json={})
        tid = created.json()["id"]
        r = await client.post(
            f"/agents/assistant/threads/{tid}/messages", json={"content": CONTENT}
        )
        assert r.status_code == 200, r.text

    for _ in range(n // 4):
        await asyncio.gather(*(one() for _ in range(4)))


@pytest.mark.parametrize("durable", ["sql", "inline"])
async def test_resident_memory_stays_flat_over_many_turns(tmp_path: Path, durable: str) -> None:
    env = app_env(
        f"sqlite+aiosqlite:///{tmp_path / 'mem.db'}",
        AGENT_API_KEYS=f"{KEY}=alice",
        AGENT_DURABLE=durable,
    )
    app = App(env, tmp_path / "server.log")
    await app.start()
    try:
        async with httpx.AsyncClient(
            base_url=app.url,
            headers={"Authorization": f"Bearer {KEY}"},
            trust_env=False,
            timeout=60,
        ) as client:
            await _turns(client, WARM_TURNS)
            before = app.memory_kib("VmRSS")
            await _turns(client, TURNS)
            after = app.memory_kib("VmRSS")
    finally:
        await app.stop()
    growth = after - before
    assert growth < GROWTH_BOUND_KIB, f"{durable}: RSS grew {growth / 1024:.1f} MiB"
