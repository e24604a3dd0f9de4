"""Alembic, driven from code: `create_schema()` and the tests use the same revisions users get."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / "migrations"


def alembic_config(url: str | None = None) -> Config:
    """Config for `migrations/`; `alembic.ini` at the top is used when present."""
    ini = ROOT / "alembic.ini"
    cfg = Config(str(ini)) if ini.exists() else Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    async with engine.begin() as conn:
        await conn.run_sync(_run, "upgrade", revision)


async def downgrade(engine: AsyncEngine, revision: str = "base") -> None:
    async with engine.begin() as conn:
        await conn.run_sync(_run, "downgrade", revision)


def _run(connection: Connection, action: str, revision: str) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = connection
    if action == "upgrade":
        command.upgrade(cfg, revision)
    else:
        command.downgrade(cfg, revision)
