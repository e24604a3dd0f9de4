"""Orchestration: one database per backend, seeded threads, then every figure per length."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from bench.cache_cold import run_cold_bench
from bench.conversation import scripted_conversation
from bench.data import TOOL_BYTES, analyze, build_thread, settle
from bench.floor import open_floor
from bench.plans import turn_plans
from bench.policies import AGENTS, CountingStore, policy_turns
from bench.reads import bounded_read_breakdown, bounded_reads, commit_floor, full_read
from bench.report import DOMINANT
from bench.trips import DriverClock, clock_aiosqlite, count_engine_asyncpg
from bench.turns import TurnSeries, nowindow_turns, window_turns
from bench.turnsql import turn_sql_floor
from bounded_agents.store.sql import SqlAgentStore

BACKENDS = ("sqlite", "postgres")
FULL_LENGTHS = (100, 1_000, 10_000, 100_000)
QUICK_LENGTHS = (100, 10_000)
DEFAULT_PG_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"


@dataclass
class Config:
    """What to run. `reps` is the repetitions of each turn figure and of the full read; the
    cheap bounded and floor reads take `read_factor` times as many."""

    mode: str = "full"
    backends: tuple[str, ...] = BACKENDS
    lengths: tuple[int, ...] = FULL_LENGTHS
    reps: int = 30
    read_factor: int = 4
    window: int = 10
    tool_bytes: int = TOOL_BYTES
    turn_warmup: int = 5
    """Warm-up turns with the window: 5 turns roll a window of 10 over to turn-made messages."""
    full_warmup: int = 1
    full_budget_s: float = 6.0
    """Time allowed per length for the measured full reads (at least 3 reps are taken)."""
    nowindow_budget_s: float = 20.0
    """Time allowed per length for the measured no-window turns (at least 3 reps)."""
    cap_from: int = 100_000
    """From this thread length on, the full read and the no-window turn take `cap_reps` reps."""
    cap_reps: int = 3
    breakdown_reps: int = 200
    policy_reps: int = 24
    """Measured turns per agent and length in the POLICIES table: 24 turns span 8 folds of the
    summarizing agent (it folds every third turn here), so the per-turn average holds both."""
    token_budget: int = 10_000
    """`max_tokens` of the token-only agent. Comparable to the 10-message window in this
    benchmark's shape: an answer with its 8 KB tool result is ~2,100 tokens, a question ~10, so
    10,000 tokens keep the newest 9 messages (the issue's 2,000 would keep the question alone)."""
    conversation_turns: int = 200
    """Turns of the scripted conversation (window 10 + summarize)."""
    cold_turns: int = 200
    """Turns of the conversation with idle gaps (bench/cache_cold.py), folding early or not."""
    recall_turns: tuple[int, ...] = (120, 500)
    """Conversation lengths of the recall benchmark (`--recall`)."""
    recall_summarizers: tuple[str, ...] = ("reference", "verbose")
    """The legacy recall benchmark's summarizers (`--recall-legacy`): `reference`, `verbose`
    (offline), `llama`, `endpoint`."""
    recall_seeds: tuple[int, ...] = (0,)
    recall_windows: tuple[int, ...] = (20, 40)
    """Window sizes of the recall benchmark by layer (`--recall`, bench/recall_layers.py)."""
    recall_styles: tuple[str, ...] = ()
    """Its summarizer styles (bench/recall_styles.py; empty: all)."""
    recall_clear_keep: int | None = None
    """Its agent clears tool results past the newest this many (None: off)."""
    postgres_url: str = field(
        default_factory=lambda: os.environ.get(
            "AGENT_BENCH_POSTGRES_URL",
            os.environ.get("AGENT_TEST_POSTGRES_URL", DEFAULT_PG_URL),
        )
    )

    @classmethod
    def quick(cls) -> Config:
        return cls(
            mode="quick",
            lengths=QUICK_LENGTHS,
            reps=10,
            full_budget_s=2.0,
            nowindow_budget_s=5.0,
            breakdown_reps=100,
            policy_reps=12,
            cold_turns=100,
        )


Log = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def run_benchmark(config: Config, log: Log = _stderr) -> dict[str, Any]:
    """Run every measurement of `config` and return the results (see bench/README.md)."""
    started = time.perf_counter()
    results: dict[str, Any] = {
        "machine": machine_info(config),
        "config": {k: v for k, v in asdict(config).items() if k != "postgres_url"},
        "backends": {},
    }
    for backend in config.backends:
        async with _database(backend, config.postgres_url) as url:
            results["backends"][backend] = await _run_backend(backend, url, config, log)
    results["cache_cold"] = await run_cold_bench(config.cold_turns)
    log(f"[sqlite] {config.cold_turns}-turn conversation with idle gaps, before/after, done")
    results["machine"]["loadavg_end"] = _loadavg()
    results["elapsed_s"] = time.perf_counter() - started
    return results


async def _run_backend(backend: str, url: str, config: Config, log: Log) -> dict[str, Any]:
    """Seed every length, then: bounded reads (all lengths interleaved), full reads and
    no-window turns (per length), window turns (all lengths interleaved), the breakdown.

    No-window turns (each paired with a windowed turn beside it) run before the interleaved
    window turns: each turn appends two messages, and this way the no-window reads see the
    thread at (about) its seeded length; the window's reads do not depend on the length.
    Turns use a store of their own whose driver calls are timed; the reads use a store with no
    instrumentation at all.
    """
    store = SqlAgentStore.from_url(url)
    turn_store = SqlAgentStore.from_url(url)
    clock = DriverClock()
    sqlite = store.engine.dialect.name == "sqlite"
    if not sqlite:
        count_engine_asyncpg(turn_store.engine, _Discard(), clock)
    lengths = sorted(config.lengths)
    out: dict[str, Any] = {"server_version": "", "lengths": {}, "seed_s": {}, "breakdown": {}}
    try:
        await store.create_schema()
        out["server_version"] = await _server_version(store)
        threads: dict[int, str] = {}
        for length in lengths:
            start = time.perf_counter()
            threads[length], total = await build_thread(store, length, tool_bytes=config.tool_bytes)
            out["seed_s"][str(length)] = time.perf_counter() - start
            log(
                f"[{backend}] seeded {length:,} messages ({total / 1e6:.1f} MB) "
                f"in {out['seed_s'][str(length)]:.1f} s"
            )
        await analyze(store.engine)
        floor = await open_floor(url, store.engine)
        out["floor_sql"] = floor.sql
        try:
            reads = await bounded_reads(
                store,
                floor,
                threads,
                window=config.window,
                reps=config.reps * config.read_factor,
            )
            log(f"[{backend}] bounded reads and floor x{config.reps * config.read_factor} done")
            out["commit_floor"] = await commit_floor(
                floor,
                threads[lengths[0]],
                window=config.window,
                reps=config.reps * config.read_factor,
            )
            for length in lengths:
                capped = length >= config.cap_from
                reads[length].update(
                    await full_read(
                        store,
                        threads[length],
                        reps=config.reps,
                        budget_s=config.full_budget_s,
                        cap=config.cap_reps if capped else None,
                    )
                )
                log(f"[{backend}] {length:,}: full read x{reads[length]['full']['n']}")
            with clock_aiosqlite(clock) if sqlite else contextlib.nullcontext():
                nowindow: dict[int, dict[str, Any]] = {}
                for length in lengths:
                    start = time.perf_counter()
                    nowindow[length] = await nowindow_turns(
                        turn_store,
                        threads[length],
                        clock,
                        reps=config.reps,
                        budget_s=config.nowindow_budget_s,
                        cap=config.cap_reps if length >= config.cap_from else None,
                        warmup=config.full_warmup,
                        window=config.window,
                        window_warmup=config.turn_warmup,
                    )
                    log(
                        f"[{backend}] {length:,}: no-window turns "
                        f"x{nowindow[length]['time']['n']} in {time.perf_counter() - start:.1f} s"
                    )
                await settle(turn_store.engine)
                window = await window_turns(
                    turn_store,
                    threads,
                    clock,
                    window=config.window,
                    reps=config.reps,
                    warmup=config.turn_warmup,
                )
                log(f"[{backend}] window turns x{config.reps} per length done")
            shortest = TurnSeries(turn_store, threads[lengths[0]], config.window, clock)
            await shortest.warm(config.turn_warmup)
            out["turn_sql_floor"] = await turn_sql_floor(
                floor, shortest, reps=config.reps * config.read_factor
            )
            log(f"[{backend}] the turn's own SQL replayed raw, done")
            # The read plans here, where the longest thread is most of the table, as well as
            # in the POLICIES part (two long threads): one dominant thread is the layout that
            # once made PostgreSQL scan the whole table (docs in bench/README.md).
            dominant = await turn_plans(
                store,
                {
                    f"{name}{DOMINANT}": (AGENTS[name](config.window, config.token_budget), threads)
                    for name in AGENTS
                },
            )
            for length in lengths:
                out["lengths"][str(length)] = {
                    "reads": reads[length],
                    "turn_window": window[length],
                    "turn_nowindow": nowindow[length],
                }
            out["policies"], out["plans"], out["conversation"] = await _policies(
                backend, url, store, threads, config, log
            )
            out["plans"].update(dominant)
            for length in sorted({lengths[0], lengths[-1]}):
                out["breakdown"][str(length)] = await bounded_read_breakdown(
                    store,
                    floor,
                    url,
                    threads[length],
                    window=config.window,
                    reps=config.breakdown_reps,
                )
                log(f"[{backend}] breakdown at {length:,} done")
        finally:
            await floor.close()
    finally:
        await turn_store.dispose()
        await store.dispose()
    return out


async def _policies(
    backend: str,
    url: str,
    store: SqlAgentStore,
    threads: dict[int, str],
    config: Config,
    log: Log,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The window-only, summarizing and token-only agents side by side, their read plans, and
    the scripted conversation.

    The summarizing agent gets threads of its own, seeded now (its summary and its fold cadence
    must be its own); the window-only and token-only agents share the seeded threads the other
    figures used (their policies keep no state, and every turn keeps the thread's shape).
    """
    summarizing: dict[int, str] = {}
    for length in sorted(threads):
        start = time.perf_counter()
        summarizing[length], _ = await build_thread(store, length, tool_bytes=config.tool_bytes)
        log(
            f"[{backend}] seeded {length:,} more for the summarizing agent "
            f"in {time.perf_counter() - start:.1f} s"
        )
    await analyze(store.engine)
    by_agent = {"window": threads, "summarize": summarizing, "tokens": threads}
    counting = CountingStore.from_url(url)
    try:
        policies = await policy_turns(
            counting,
            by_agent,
            window=config.window,
            token_budget=config.token_budget,
            reps=config.policy_reps,
            warmup=config.turn_warmup,
            log=log,
            label=backend,
        )
        log(f"[{backend}] policy turns x{config.policy_reps} per agent and length done")
        plans = await turn_plans(
            counting,
            {
                name: (AGENTS[name](config.window, config.token_budget), by_agent[name])
                for name in by_agent
            },
        )
        start = time.perf_counter()
        conversation = await scripted_conversation(
            counting, turns=config.conversation_turns, window=config.window
        )
        log(
            f"[{backend}] {config.conversation_turns}-turn conversation in "
            f"{time.perf_counter() - start:.1f} s"
        )
    finally:
        await counting.dispose()
    return (
        {name: {str(n): v for n, v in by_length.items()} for name, by_length in policies.items()},
        plans,
        conversation,
    )


class _Discard(list[str]):
    """A call list that keeps nothing (the clock counts the calls of the timed turns)."""

    def append(self, _item: str) -> None:
        return None


# --- databases -------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _database(backend: str, pg_admin_url: str) -> AsyncIterator[str]:
    """A fresh database for `backend`, removed afterwards whatever happens."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="agent_bench_") as tmp:
            yield f"sqlite+aiosqlite:///{tmp}/bench.db"
        return
    if backend != "postgres":
        raise ValueError(f"unknown backend {backend!r} (expected one of {BACKENDS})")
    admin = make_url(pg_admin_url)
    name = f"agent_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    await _pg_admin(pg_admin_url, f'CREATE DATABASE "{name}"')
    try:
        yield admin.set(database=name).render_as_string(hide_password=False)
    finally:
        await _pg_admin(pg_admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _pg_admin(url: str, sql: str) -> None:
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        conn = await asyncpg.connect(dsn, timeout=10)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        raise SystemExit(
            f"PostgreSQL not reachable at {make_url(url).render_as_string()}: {exc}\n"
            "Set AGENT_BENCH_POSTGRES_URL, or run with --backends sqlite."
        ) from exc
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def _server_version(store: SqlAgentStore) -> str:
    sqlite = store.engine.dialect.name == "sqlite"
    query = "select sqlite_version()" if sqlite else "show server_version"
    async with store.engine.connect() as conn:
        return str(await conn.scalar(sa.text(query)))


# --- machine ---------------------------------------------------------------------------------


def _loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine_info(config: Config) -> dict[str, Any]:
    import aiosqlite
    import pydantic

    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": config.mode,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "loadavg_start": _loadavg(),
        "sqlalchemy": sa.__version__,
        "asyncpg": asyncpg.__version__,
        "aiosqlite": aiosqlite.__version__,
        "pydantic": pydantic.VERSION,
        "sqlite_library": sqlite3.sqlite_version,
    }


def main_sync(config: Config) -> dict[str, Any]:
    return asyncio.run(run_benchmark(config))
