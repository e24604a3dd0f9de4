"""`python -m bench --profile`: where a turn's Python time goes, per backend.

200 window-10 bench turns (the `bench/turns.py` shape: one tool call with an 8 KB result) on a
100-message thread, after 20 warm-up turns, under cProfile. Prints the top functions by their
own time and the project's own functions by cumulative time. cProfile slows every Python call
alike, so read the shares, not the milliseconds.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import pstats

from bench.data import build_thread
from bench.run import Config, _database
from bench.trips import DriverClock
from bench.turns import TurnSeries
from bounded_agents.store.sql import SqlAgentStore

TURNS = 200
WARMUP = 20


async def profile_backend(
    backend: str, config: Config, *, turns: int = TURNS, warmup: int = WARMUP
) -> str:
    async with _database(backend, config.postgres_url) as url:
        store = SqlAgentStore.from_url(url)
        try:
            await store.create_schema()
            thread_id, _ = await build_thread(store, 100)
            series = TurnSeries(store, thread_id, 10, DriverClock())
            await series.warm(warmup)
            profiler = cProfile.Profile()
            profiler.enable()
            await series.warm(turns)
            profiler.disable()
        finally:
            await store.dispose()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    out.write(f"\n=== {backend}: {turns} turns, top own time ===\n")
    stats.sort_stats("tottime").print_stats(25)
    out.write(f"\n=== {backend}: the project's functions by cumulative time ===\n")
    stats.sort_stats("cumulative").print_stats(r"bounded_agents/", 30)
    return out.getvalue()


def profile_main(config: Config) -> int:
    for backend in config.backends:
        print(asyncio.run(profile_backend(backend, config)))
    return 0
