"""Instructions per bench turn, counted by callgrind: repeatable on a shared, noisy machine where
wall time is not.

`python -m bench.instructions --backend sqlite --turns N` runs N window-10 bench turns (the
`bench/turns.py` shape: one tool call with an 8 KB result) on a 100-message thread after a
warm-up, and nothing else. Run it under `valgrind --tool=callgrind` twice, with two values of
N; the difference of the two totals ("Collected") divided by the difference of N is what one
turn costs, start-up and imports cancelled out:

    for n in 10 40; do valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \
        python -m bench.instructions --turns $n 2>&1 | grep Collected; done

`--no-index` drops the messages' search index triggers first (a what-if). On SQLite the
database's own work (FTS5 triggers, B-tree writes) is in the process and counted; on PostgreSQL
only the client's (the server's work is not in this process).
"""

from __future__ import annotations

import argparse
import asyncio
import os

from bench.data import build_thread
from bench.run import _database
from bench.trips import DriverClock
from bench.turns import TurnSeries
from bounded_agents.store.sql import SqlAgentStore

WARMUP = 5


async def turns(backend: str, count: int, postgres_url: str, *, no_index: bool = False) -> None:
    async with _database(backend, postgres_url) as url:
        store = SqlAgentStore.from_url(url)
        try:
            await store.create_schema()
            if no_index:
                await _drop_index_triggers(store)
            thread_id, _ = await build_thread(store, 100)
            series = TurnSeries(store, thread_id, 10, DriverClock())
            await series.warm(WARMUP + count)
        finally:
            await store.dispose()


async def _drop_index_triggers(store: SqlAgentStore) -> None:
    """A what-if: the messages' search index not maintained at all (its triggers dropped)."""
    sqlite = store.engine.dialect.name == "sqlite"
    drops = (
        [f"DROP TRIGGER messages_fts_{e}" for e in ("insert", "update", "delete")]
        if sqlite
        else ["DROP TRIGGER messages_search_vector ON messages"]
    )
    async with store.engine.begin() as conn:
        for statement in drops:
            await conn.exec_driver_sql(statement)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--no-index", action="store_true", help="what-if: no search triggers")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(
            "AGENT_BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
        ),
    )
    args = parser.parse_args()
    asyncio.run(turns(args.backend, args.turns, args.postgres_url, no_index=args.no_index))


if __name__ == "__main__":
    main()
