"""Starting and stopping DBOS itself: its system database beside the app's, its config, its
launch and its teardown. Process-wide, so kept apart from the runtime that uses it."""

from __future__ import annotations

import logging

from dbos import DBOS, DBOSConfig
from sqlalchemy.engine import make_url

from bounded_agents.errors import ConfigError
from bounded_agents.store import dialect_of_url

log = logging.getLogger(__name__)

APPLICATION_VERSION = "bounded-agents"
"""DBOS recovers a pending workflow only under the application version it started with; by
default DBOS hashes the workflow's source. The workflow here is a shim (the loop's code is not
in the hash), so the version is pinned instead and code changes are met by `ctx.patched`, as
with the SQL journal (this is what DBOS's deprecated `enable_patching` flag did)."""


def dbos_system_url(database_url: str) -> str:
    """DBOS's system database for an app database URL: DBOS uses synchronous drivers, so
    `postgresql+asyncpg` becomes `postgresql+psycopg` and `sqlite+aiosqlite` plain `sqlite`."""
    url = make_url(database_url)
    if dialect_of_url(url).postgres:
        url = url.set(drivername="postgresql+psycopg")
    else:
        if url.database in (None, "", ":memory:"):
            raise ConfigError(
                "AGENT_DURABLE=dbos needs a database file or PostgreSQL: an in-memory SQLite "
                "database cannot hold DBOS's system tables (set AGENT_DBOS_SYSTEM_DATABASE_URL)"
            )
        url = url.set(drivername="sqlite")
    return url.render_as_string(hide_password=False)


def dbos_config(
    system_database_url: str,
    *,
    executor_id: str | None = None,
    application_version: str | None = None,
) -> DBOSConfig:
    config: DBOSConfig = {
        "name": "bounded-agents",
        "system_database_url": dbos_system_url(system_database_url),
        "application_version": application_version or APPLICATION_VERSION,
    }
    if executor_id:
        config["executor_id"] = executor_id
    return config


_launched_here = False


def launch_dbos(config: DBOSConfig) -> bool:
    """Construct and launch the process's DBOS; False (and nothing done) when this module
    launched one already (tests launch one per session)."""
    global _launched_here
    if _launched_here:
        log.info("DBOS is already launched in this process")
        return False
    DBOS(config=config)
    DBOS.launch()
    _launched_here = True
    return True


def destroy_dbos() -> None:
    global _launched_here
    if _launched_here:
        DBOS.destroy()
        _launched_here = False


__all__ = ["APPLICATION_VERSION", "dbos_config", "dbos_system_url", "destroy_dbos", "launch_dbos"]
