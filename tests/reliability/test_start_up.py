"""Several processes started together on one empty database: each runs the migrations at
start-up (`AGENT_MIGRATE_ON_START`), and they must not race. Before the migration lock, two
`python -m app serve` on an empty PostgreSQL database died with a `UniqueViolation` on
`pg_type` in about half the trials."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.conftest import create_pg_database, drop_pg_database
from tests.reliability.test_crash_recovery import App

TRIALS = 10


async def _both_come_up(url: str, log_dir: Path, trial: int) -> None:
    env = {**os.environ, "AGENT_DATABASE_URL": url, "AGENT_MIGRATE_ON_START": "true"}
    first = App(env, log_dir / f"first-{trial}.log")
    second = App(env, log_dir / f"second-{trial}.log")
    try:
        await asyncio.gather(first.start(), second.start())  # each waits for its /healthz
    finally:
        await asyncio.gather(first.stop(), second.stop())


@pytest.mark.postgres
async def test_two_processes_started_together_on_an_empty_postgres_both_come_up(
    tmp_path: Path,
) -> None:
    for trial in range(TRIALS):
        url = await asyncio.to_thread(create_pg_database, "agent_startup")
        try:
            await _both_come_up(url, tmp_path, trial)
        finally:
            await asyncio.to_thread(drop_pg_database, url)


async def test_two_processes_started_together_on_an_empty_sqlite_file_both_come_up(
    tmp_path: Path,
) -> None:
    for trial in range(3):
        await _both_come_up(f"sqlite+aiosqlite:///{tmp_path}/fresh-{trial}.db", tmp_path, trial)
