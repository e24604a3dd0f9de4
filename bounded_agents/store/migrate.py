"""Alembic, driven from code: `create_schema()` and the tests use the same revisions users get.

Several processes may start at once on one database (`AGENT_MIGRATE_ON_START` in each): on
PostgreSQL every migration first takes an advisory lock (`migrations/env.py`), on SQLite a file
lock beside the database file, so one migrates and the others find the schema at head.

On SQLite a migration runs with foreign keys off, as one transaction, and ends with
`PRAGMA foreign_key_check` (SQLite's own recipe for changing a table, which Alembic's batch
mode follows). Batch mode rebuilds a table (copy, DROP, rename): with foreign keys on, the DROP
of a parent table deletes its rows first, and `ON DELETE CASCADE` every child row with them
(0005, which rebuilds `threads`, took every message, run and run step of a database at 0004).
The app's engines turn foreign keys on at connect, and the PRAGMA is a no-op inside a
transaction, so `migration_connection` turns them off before the transaction begins and back
on before the connection returns to the pool. The alembic CLI goes through it too.
"""

from __future__ import annotations

import asyncio
import fcntl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.util.exc import CommandError
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bounded_agents.errors import StoreError
from bounded_agents.store.dialect import dialect_of
from bounded_agents.store.engine import make_engine

PACKAGE = Path(__file__).resolve().parents[1]


def _migrations() -> Path:
    """The revisions: an installed wheel carries them in the package (`bounded_agents/migrations`,
    mapped there from the repository's top-level `migrations/` by pyproject.toml); a source
    checkout, where the package is imported from the tree, has them beside it."""
    for place in (PACKAGE / "migrations", PACKAGE.parent / "migrations"):
        if (place / "env.py").is_file():
            return place
    raise StoreError(f"the migrations are missing: neither {PACKAGE / 'migrations'} nor a checkout")


MIGRATIONS = _migrations()
MIGRATION_LOCK_KEY = 0x626F756E646564
"""The PostgreSQL advisory lock every migration takes first ("bounded" in ASCII), and
`bounded_agents.store.distribute` too: processes started together queue on it."""


def alembic_config(url: str | None = None) -> Config:
    """Config for the migrations; a checkout's `alembic.ini` (logging) is used when present."""
    ini = MIGRATIONS.parent / "alembic.ini"
    cfg = Config(str(ini)) if ini.exists() else Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


class MigrationRefused(StoreError):
    """A migration that would break the database, refused before or rolled back after it ran,
    or one Alembic cannot run (the database is at a revision this release does not know)."""


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    async with migration_connection(engine) as conn:
        await conn.run_sync(_run, "upgrade", revision)


async def upgrade_url(url: str, revision: str = "head", *, pgbouncer: bool = False) -> None:
    """`upgrade` on an engine of its own for `url`, disposed afterwards: for callers that
    migrate a database they do not otherwise hold (test fixtures, the benchmark)."""
    engine = make_engine(url, pgbouncer=pgbouncer)
    try:
        await upgrade(engine, revision)
    finally:
        await engine.dispose()


async def downgrade(engine: AsyncEngine, revision: str = "base") -> None:
    async with migration_connection(engine) as conn:
        await conn.run_sync(_run, "downgrade", revision)


@asynccontextmanager
async def migration_connection(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection of `engine` in the transaction a migration runs in, under the migration
    lock; committed when the block ends, rolled back if it raises.

    On SQLite foreign keys are off for it (see the module docstring) and the transaction is an
    explicit BEGIN: sqlite3 opens one by itself only before an INSERT, UPDATE or DELETE, so a
    migration's DDL before its first such statement would commit as it went, and a failure
    (`check_foreign_keys`) could not roll it back."""
    async with _sqlite_file_lock(engine), engine.connect() as conn:
        if not dialect_of(conn).sqlite:
            async with conn.begin():
                yield conn
            return
        await _set_foreign_keys(conn, "OFF")
        try:
            async with conn.begin():
                await conn.exec_driver_sql("BEGIN")
                yield conn
        finally:
            try:
                await _set_foreign_keys(conn, "ON")
            except BaseException:
                await conn.invalidate()  # never back into the pool with foreign keys off
                raise


async def _set_foreign_keys(conn: AsyncConnection, state: str) -> None:
    """`PRAGMA foreign_keys` outside any transaction, where it takes effect: a PRAGMA opens
    none in sqlite3, and the commit only ends SQLAlchemy's own (autobegun) transaction."""
    await conn.exec_driver_sql(f"PRAGMA foreign_keys={state}")
    await conn.commit()


def require_foreign_keys_off(connection: Connection) -> None:
    """Refuse to migrate SQLite on a connection that enforces foreign keys (see the module
    docstring): whoever hands Alembic a connection of their own must turn them off first,
    before its transaction begins."""
    if (
        dialect_of(connection).sqlite
        and connection.exec_driver_sql("PRAGMA foreign_keys").scalar_one()
    ):
        raise MigrationRefused(
            "SQLite migrations need foreign keys off (PRAGMA foreign_keys=OFF before the "
            "transaction begins; bounded_agents.store.migrate.migration_connection does it): "
            "a table rebuilt with them on deletes its child rows through ON DELETE CASCADE"
        )


def check_foreign_keys(connection: Connection) -> None:
    """`PRAGMA foreign_key_check` at the end of a SQLite migration, inside its transaction: a
    row whose foreign key points at no row fails the migration, which is then rolled back."""
    if not dialect_of(connection).sqlite:
        return  # PostgreSQL checks every foreign key as it goes
    found = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
    if not found:
        return
    dangling: dict[tuple[str, str], int] = {}
    for table, _rowid, parent, _fk in found:
        dangling[(table, parent)] = dangling.get((table, parent), 0) + 1
    listed = ", ".join(f"{n} in {table} -> {parent}" for (table, parent), n in dangling.items())
    raise MigrationRefused(
        f"migration rolled back: PRAGMA foreign_key_check found {len(found)} row(s) whose "
        f"foreign key points at no row ({listed})"
    )


@asynccontextmanager
async def _sqlite_file_lock(engine: AsyncEngine) -> AsyncIterator[None]:
    """An exclusive `flock` on `<database>.migrate-lock` while a SQLite migration runs (two
    processes migrating one file would otherwise both read the old version, then collide on
    the write lock). A no-op for PostgreSQL and in-memory databases."""
    database = engine.url.database
    if not dialect_of(engine).sqlite or not database or database == ":memory:":
        yield
        return
    with open(f"{database}.migrate-lock", "a") as handle:  # noqa: ASYNC230 (a local file)
        await asyncio.to_thread(fcntl.flock, handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _run(connection: Connection, action: str, revision: str) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = connection
    try:
        if action == "upgrade":
            command.upgrade(cfg, revision)
        else:
            command.downgrade(cfg, revision)
    except CommandError as exc:
        # Mostly a database a newer release migrated (the code rolled back): Alembic cannot
        # locate its revision. An operator needs that line, not Alembic's traceback.
        hint = (
            ": a newer release migrated this database; run that release, or restore a backup"
            if "Can't locate revision" in str(exc) and revision in ("head", "base")
            else ""
        )
        raise MigrationRefused(f"cannot migrate: {exc}{hint}") from exc
