"""The command line. Argument parsing only; the work is done by the store and the module."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

from app.settings import get_settings


def _migrate() -> int:
    from app.store import SqlAgentStore

    settings = get_settings()

    async def run() -> None:
        store = SqlAgentStore.from_url(settings.database_url)
        try:
            await store.create_schema()
        finally:
            await store.dispose()

    asyncio.run(run())
    print(f"database at head: {settings.database_url}")
    return 0


def _serve(host: str | None, port: int | None) -> int:
    import uvicorn

    settings = get_settings()
    uvicorn.run("app.main:app", host=host or settings.host, port=port or settings.port)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the HTTP API with uvicorn")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    sub.add_parser("migrate", help="bring the database to the newest schema")
    args = parser.parse_args(argv)
    if args.command == "migrate":
        return _migrate()
    return _serve(args.host, args.port)
